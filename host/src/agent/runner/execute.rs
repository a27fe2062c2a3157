//! Running one assistant message's tool calls (spec §5 step 3).
//!
//! Consecutive `concurrency_safe` calls run in parallel; any other call runs
//! alone; results come back in call order. A failure of any kind becomes the
//! call's result text with a hint, so the model can try something else: tool
//! errors never end a turn. The turn's sink hears each call start and
//! finish, and the plugin's progress texts in between.

use std::collections::HashMap;
use std::path::{Component, Path};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::spec::{AgentRunSpec, ToolEvent};
use crate::plugins::ProgressSink;
use crate::session::ToolCall;

/// Preview kept inline when a result is saved to the workspace.
pub(super) const PREVIEW_CHARS: usize = 1200;

/// Tools whose results are never moved out of line: they page themselves.
const EXEMPT_FROM_SAVING: &[&str] = &["read_file"];

/// Identical fetches, or attempts outside the workspace, allowed per run.
const REPEAT_LIMIT: usize = 2;

/// What one call produced.
pub(super) struct CallOutcome {
    /// Result text for the model.
    pub text: String,
    /// Timing and status.
    pub event: ToolEvent,
    /// The plugin crashed (not its own error result): fatal with
    /// `fail_on_tool_error`.
    pub crashed: bool,
}

/// Run-long counters behind the firm refusals.
#[derive(Default)]
pub(super) struct Guards {
    fetches: HashMap<String, usize>,
    outside_attempts: usize,
}

impl Guards {
    /// A refusal for this call, if it is one repeat too many.
    fn check(&mut self, spec: &AgentRunSpec, call: &ToolCall) -> Option<String> {
        let name = &call.function.name;
        let fetches_network = spec.tools.fetches_network(name);
        if fetches_network {
            let key = format!("{name}\u{0}{}", canonical(&call.function.arguments));
            let count = self.fetches.entry(key).or_default();
            *count += 1;
            if *count > REPEAT_LIMIT {
                return Some(format!(
                    "Refused: this is attempt {count} of the same `{name}` request in this turn. Use the result you already have, or change the request."
                ));
            }
        }
        if reaches_outside(&call.function.arguments) {
            self.outside_attempts += 1;
            if self.outside_attempts > REPEAT_LIMIT {
                return Some(format!(
                    "Refused: paths outside the workspace cannot be accessed (attempt {}). Stop trying; work with files inside the workspace or ask the user.",
                    self.outside_attempts
                ));
            }
        }
        None
    }
}

/// Runs `calls` and returns their outcomes in call order. A call with a
/// refusal in `refused` (same order) is not run: the refusal is its result.
pub(super) async fn run_calls(spec: &AgentRunSpec, calls: &[ToolCall], mut refused: Vec<Option<String>>, guards: &mut Guards) -> Vec<CallOutcome> {
    refused.resize(calls.len(), None);
    let mut outcomes = Vec::with_capacity(calls.len());
    let mut i = 0;
    while i < calls.len() {
        let safe = |c: &ToolCall| spec.tools.is_concurrency_safe(&c.function.name);
        let end = if safe(&calls[i]) { i + calls[i..].iter().take_while(|c| safe(c)).count() } else { i + 1 };
        let batch: Vec<_> = calls[i..end]
            .iter()
            .zip(refused[i..end].iter_mut())
            .map(|(call, refusal)| {
                let refusal = refusal.take().or_else(|| guards.check(spec, call));
                run_one(spec, call, refusal)
            })
            .collect();
        outcomes.extend(futures::future::join_all(batch).await);
        i = end;
    }
    outcomes
}

async fn run_one(spec: &AgentRunSpec, call: &ToolCall, refusal: Option<String>) -> CallOutcome {
    spec.sink.tool_started(call);
    let started = Instant::now();
    let name = &call.function.name;
    let mut crashed = false;
    let (text, ok) = match refusal {
        Some(refusal) => (refusal, false),
        None => {
            let ctx = crate::plugins::CallContext { call_id: call.id.clone(), ..spec.call_context.clone() };
            // A crash while the tool runs (the match is on the tool's name).
            crate::crash_point!("tool", name);
            let args = Value::String(call.function.arguments.clone());
            match spec.tools.call(name, &args, &ctx, Some(progress_to_sink(spec, call))).await {
                Ok(text) => (save_if_oversized(spec, call, text), true),
                Err(e) => {
                    crashed = matches!(&e, crate::tools::ToolError::Plugin(p) if !matches!(p, crate::plugins::PluginError::Tool { .. }));
                    (format!("Error: {e}\n\n[Analyze the error above and try a different approach.]"), false)
                }
            }
        }
    };
    spec.sink.tool_finished(call, ok);
    CallOutcome { event: ToolEvent { name: name.clone(), call_id: call.id.clone(), ok, duration: started.elapsed() }, text, crashed }
}

/// Hands the plugin's `host.progress` texts (budgeted and escaped by the
/// sandbox) to the turn's sink, naming the call. The call goes without its
/// arguments: they may be megabytes, and progress needs only who is talking.
fn progress_to_sink(spec: &AgentRunSpec, call: &ToolCall) -> ProgressSink {
    let sink = spec.sink.clone();
    let who = ToolCall::new(&call.id, &call.function.name, "");
    Arc::new(move |text: &str| sink.tool_progress(&who, text))
}

/// Keeps the context small: a result over the limit is written to the
/// workspace in full and replaced by its path and a preview.
fn save_if_oversized(spec: &AgentRunSpec, call: &ToolCall, text: String) -> String {
    let chars = text.chars().count();
    if chars <= spec.max_tool_result_chars || EXEMPT_FROM_SAVING.contains(&call.function.name.as_str()) {
        return text;
    }
    let dir_rel = Path::new(".chitin").join("tool-results").join(crate::session::encode_key(&spec.call_context.session_key));
    let file_rel = dir_rel.join(format!("{}.txt", crate::session::encode_key(&call.id)));
    let preview: String = text.chars().take(PREVIEW_CHARS).collect();
    // Through the workspace handle: a plugin may have planted a symlink or a
    // FIFO at this path to make the host write outside; that is refused and
    // the result is shown truncated instead.
    match spec.workspace.write(&file_rel, text.as_bytes()) {
        Ok(()) => format!(
            "[The result is {chars} characters, too long to show in full. It is saved at `{}` in the workspace; read parts of it with read_file if you need more.]\n\nPreview:\n{preview}",
            file_rel.display()
        ),
        Err(e) => {
            tracing::warn!("could not save an oversized tool result: {e}");
            let head: String = text.chars().take(spec.max_tool_result_chars).collect();
            format!("{head}\n\n[truncated: {chars} characters in all]")
        }
    }
}

/// Arguments as canonical JSON (keys sorted), so `{"a":1,"b":2}` and
/// `{"b":2,"a":1}` count as the same request.
fn canonical(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments).map(|v| v.to_string()).unwrap_or_else(|_| arguments.trim().to_string())
}

/// True when a path-like argument points outside the workspace.
fn reaches_outside(arguments: &str) -> bool {
    let Ok(Value::Object(args)) = serde_json::from_str::<Value>(arguments) else { return false };
    args.iter().any(|(key, value)| {
        let pathish = ["path", "file", "dir"].iter().any(|k| key.to_ascii_lowercase().contains(k));
        let Some(text) = value.as_str().filter(|_| pathish) else { return false };
        let path = Path::new(text);
        if path.is_absolute() || text.starts_with('~') {
            return true;
        }
        let mut depth = 0i32;
        for component in path.components() {
            match component {
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                _ => {}
            }
            if depth < 0 {
                return true;
            }
        }
        false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_detection() {
        assert!(reaches_outside(r#"{"path": "/etc/passwd"}"#));
        assert!(reaches_outside(r#"{"file_path": "../x"}"#));
        assert!(reaches_outside(r#"{"dir": "~/.ssh"}"#));
        assert!(!reaches_outside(r#"{"path": "a/../b"}"#));
        assert!(!reaches_outside(r#"{"pattern": "/regex/"}"#));
    }

    #[test]
    fn canonical_ignores_key_order() {
        assert_eq!(canonical(r#"{"b":2,"a":1}"#), canonical(r#"{"a":1, "b":2}"#));
    }
}
