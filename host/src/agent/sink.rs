//! `TurnSink`: the one way a turn's output leaves the agent.
//!
//! A turn produces more than its reply: streamed text, a hint that a tool
//! started, the plugin's own `host.progress` texts while it runs, and the
//! tool's outcome. Every front end wants some of that, each in its own form:
//! the bus responder ([`super::responder::BusResponder`]) turns it into
//! `StreamDelta`/`Progress` events for the gateway's router (web chat, API,
//! channels); `chitin agent` prints hints on stderr; tests record it. So the
//! runner knows one trait, in ripgrep's `Sink` style: every method has a
//! no-op default, a front end implements what it shows, and nothing else in
//! the agent publishes, prints or streams.
//!
//! What a sink receives is untrusted: streamed text and tool arguments are
//! the model's, progress texts are the plugin's. The sandbox has already
//! budgeted and escaped progress texts (`plugins::sandbox`: bytes and count
//! per call, one line cut at 1 KiB, at most one per 50 ms, control
//! characters shown as escapes); [`args_preview`] does the same for a
//! call's arguments. A sink that prints still escapes for its medium.
//!
//! The methods are synchronous and called on the turn's task (progress: on
//! the plugin call's thread): an implementation queues or writes, it never
//! blocks on a slow reader.

use std::sync::Arc;

use crate::session::ToolCall;

/// Receives a turn's output as it happens. Every method defaults to doing
/// nothing.
pub trait TurnSink: Send + Sync {
    /// Whether this sink wants the reply as it is generated. When false the
    /// provider is not asked to stream and [`TurnSink::text_delta`] is never
    /// called; the reply arrives whole with the turn's outcome.
    fn streams_text(&self) -> bool {
        false
    }

    /// The model is about to be asked (the turn passed its commands and
    /// built its prompt).
    fn run_started(&self) {}

    /// A piece of the reply, in order.
    fn text_delta(&self, _delta: &str) {}

    /// A tool call is about to run (also for a call that is refused: it
    /// finishes at once with `ok == false`). `call` holds the model's
    /// arguments; show them through [`args_preview`].
    fn tool_started(&self, _call: &ToolCall) {}

    /// The plugin running `call` reported `text` through `host.progress`,
    /// already budgeted and escaped by the sandbox. `call` carries the name
    /// and id only (its arguments may be megabytes and are left out).
    fn tool_progress(&self, _call: &ToolCall, _text: &str) {}

    /// `call` finished; `ok` is false for an error or a refusal.
    fn tool_finished(&self, _call: &ToolCall, _ok: bool) {}

    /// While a sustained goal is active, the model answered without tools
    /// and the run goes on (`agent::goal`): `text` is that interim answer
    /// (the model's; escape it for the medium). When the sink streams, its
    /// text already came as deltas; the next deltas belong to the next
    /// answer.
    fn interim_answer(&self, _text: &str) {}

    /// A short status from the host before a slow reply (`/dream`'s
    /// `crate::features::dream::DREAMING`): the host's own text, delivered
    /// like a message in a chat, shown as progress in the terminal.
    fn notice(&self, _text: &str) {}

    /// The model's reasoning for the answer it just gave, when the API
    /// returns it (DeepSeek's `reasoning_content`, Anthropic's thinking):
    /// progress, not part of the reply. The model's text: escape it.
    fn reasoning(&self, _text: &str) {}
}

/// A sink that shows nothing (benches, internal turns, tests that do not
/// look).
pub struct Silent;

impl TurnSink for Silent {}

/// A shared [`Silent`] sink.
pub fn silent() -> Arc<dyn TurnSink> {
    Arc::new(Silent)
}

/// Characters of a call's arguments in a tool hint.
pub const ARGS_PREVIEW_CHARS: usize = 80;

/// The first [`ARGS_PREVIEW_CHARS`] characters of `call`'s arguments on one
/// line (newlines as spaces), `…` when cut, control characters escaped.
pub fn args_preview(call: &ToolCall) -> String {
    let arguments = &call.function.arguments;
    let mut preview: String = arguments.chars().take(ARGS_PREVIEW_CHARS).map(|c| if c == '\n' || c == '\t' { ' ' } else { c }).collect();
    if preview.len() < arguments.len() {
        preview.push('…');
    }
    crate::text::for_terminal(&preview).into_owned()
}

/// `name` of a call as shown in a hint: clipped, escaped, one line (the
/// model chose it; the runner has already bounded it to 256 bytes).
pub fn tool_name(call: &ToolCall) -> String {
    crate::text::clip_for_terminal(&call.function.name, 64, "name").replace('\n', "\\n").replace('\t', "\\t")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_one_short_escaped_line() {
        let call = ToolCall::new("c1", "write_file", format!("{{\"path\":\"a\\n\",\n\"content\":\"\x1b[2J{}\"}}", "x".repeat(500)));
        let preview = args_preview(&call);
        assert!(!preview.contains('\n') && !preview.contains('\x1b'), "{preview}");
        assert!(preview.contains("\\x1b[2J") && preview.ends_with('…'), "{preview}");
        assert!(preview.chars().count() <= ARGS_PREVIEW_CHARS + 4, "{preview}");
        let short = ToolCall::new("c2", "list\ndir", "{}");
        assert_eq!(args_preview(&short), "{}");
        assert_eq!(tool_name(&short), "list\\ndir");
    }
}
