//! [`Summariser`]: one model call that turns a run of messages into an
//! archive entry, shared by token consolidation and idle compaction.
//!
//! The request is the caller's normal system prompt with the archiving
//! instruction appended, then the messages as a plain transcript in one user
//! message, without tools. Reusing the system prompt as the prefix lets the
//! provider serve it from its prompt cache (it was just sent for the turn),
//! and gives the model the same identity, memory and workspace facts it had
//! when the conversation happened. A transcript rather than the raw messages
//! because the model must not answer or continue the conversation, only
//! describe it, and because tool-call pairs then cannot be rejected by the API.
//!
//! Three outcomes, each written (or not) by [`Summariser::archive_chunk`]:
//! a summary is appended; an answer of exactly [`NOTHING`] writes nothing; a
//! failed request appends the transcript itself, bounded, so the archive
//! still holds what left the prompt.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::CompactError;
use super::archive::{HistoryArchive, HistoryEntry};
use crate::tokens::input_budget;
use crate::config::AgentConfig;
use crate::provider::{ChatRequest, Provider};
use crate::session::{Message, Role};
use crate::tokens::{PER_MESSAGE_OVERHEAD, estimate_text};

/// The answer that means "nothing worth keeping" (trimmed, any case).
pub const NOTHING: &str = "NOTHING";

/// Completion cap of a summary request, unless the model's own cap is lower.
pub const SUMMARY_MAX_TOKENS: u32 = 2048;

/// Longest raw archive entry, in characters.
pub const RAW_MAX_CHARS: usize = 8_000;

/// A user or assistant text longer than this is clipped in the transcript.
const MESSAGE_CHARS: usize = 6_000;

/// A tool result longer than this is clipped in the transcript: results are
/// bulky and the model's reply to them usually says what mattered.
const TOOL_RESULT_CHARS: usize = 1_500;

/// Tool-call arguments longer than this are clipped in the transcript.
const ARGUMENT_CHARS: usize = 300;

/// Appended to the caller's system prompt for a summary request.
const INSTRUCTION: &str = "# Archiving task\n\n\
You are not talking to the user now. The user message below is a transcript of an earlier part of this \
conversation that is about to leave your context window. Write durable notes about it for your future self: \
facts about the user and their projects, decisions and their reasons, results of the work done (files, \
commands, findings), open tasks and promises, preferences the user expressed. Be concise and specific; keep \
names, paths, numbers and dates exactly; leave out greetings, small talk and anything already in your memory. \
Write short plain-text bullet points in the language of the conversation, and nothing else.\n\n\
If nothing in it is worth keeping, answer exactly NOTHING.";

/// Sizes of a summary request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryLimits {
    /// Input tokens a request may use (the model's input budget); the
    /// transcript is cut to fit what the system prompt leaves.
    pub input_budget: usize,
    /// Completion cap of a summary request.
    pub max_tokens: u32,
    /// Longest raw archive entry, in characters.
    pub raw_max_chars: usize,
    /// Wall-clock limit of one summary request; past it, the chunk is
    /// archived raw.
    pub timeout: Duration,
}

impl SummaryLimits {
    /// Limits for a model with `context_window` tokens answering with up to
    /// `max_tokens` (the same budget formula as the runner's governance).
    pub fn new(context_window: usize, max_tokens: u32) -> Self {
        SummaryLimits {
            input_budget: input_budget(context_window, max_tokens),
            max_tokens: max_tokens.clamp(1, SUMMARY_MAX_TOKENS),
            raw_max_chars: RAW_MAX_CHARS,
            timeout: Duration::from_secs(300),
        }
    }

    /// Limits from the `[agent]` settings.
    pub fn from_config(config: &AgentConfig) -> Self {
        SummaryLimits {
            timeout: Duration::from_secs(config.llm_timeout_secs.max(1)),
            ..SummaryLimits::new(config.context_window, config.max_tokens)
        }
    }
}

impl Default for SummaryLimits {
    fn default() -> Self {
        SummaryLimits::from_config(&AgentConfig::default())
    }
}

/// What [`Summariser::archive_chunk`] did with a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// The model's summary, appended to the archive.
    Summary(String),
    /// The model found nothing worth keeping; nothing was written.
    Nothing,
    /// The request failed (the error); the bounded transcript was appended.
    Raw(String),
    /// Nothing to summarise (only slash commands): no request, no entry.
    Empty,
}

/// Summarises runs of messages into the archive. Cheap to clone; shareable
/// across sessions.
#[derive(Clone)]
pub struct Summariser {
    provider: Arc<dyn Provider>,
    model: String,
    archive: HistoryArchive,
    limits: SummaryLimits,
}

impl std::fmt::Debug for Summariser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summariser")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .field("archive", &self.archive)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Summariser {
    /// A summariser asking `model` on `provider`, writing to `archive`.
    pub fn new(provider: Arc<dyn Provider>, model: impl Into<String>, archive: HistoryArchive, limits: SummaryLimits) -> Self {
        Summariser { provider, model: model.into(), archive, limits }
    }

    /// The same summariser with other request sizes.
    pub fn with_limits(mut self, limits: SummaryLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The archive entries go to.
    pub fn archive(&self) -> &HistoryArchive {
        &self.archive
    }

    /// The request sizes.
    pub fn limits(&self) -> &SummaryLimits {
        &self.limits
    }

    /// Summarises `messages` of `session_key` (slash commands left out) and
    /// archives the result as an entry with `cursor` and timestamp `at`:
    /// see [`ChunkOutcome`]. Errors only when the archive cannot be written.
    ///
    /// Also what `/new` uses for the tail it clears: snapshot
    /// `session.recent()`, clear and save the session, then archive the
    /// snapshot in the background.
    pub async fn archive_chunk(
        &self,
        session_key: &str,
        messages: &[Message],
        cursor: usize,
        system_prompt: &str,
        at: DateTime<Utc>,
    ) -> Result<ChunkOutcome, CompactError> {
        let transcript = render_transcript(messages);
        if transcript.trim().is_empty() {
            return Ok(ChunkOutcome::Empty);
        }
        match self.summarise(system_prompt, &transcript).await {
            Ok(Some(summary)) => {
                self.archive.append(&HistoryEntry::new(session_key, cursor, summary.clone(), at))?;
                Ok(ChunkOutcome::Summary(summary))
            }
            Ok(None) => Ok(ChunkOutcome::Nothing),
            Err(error) => {
                tracing::warn!(session = session_key, error = %error, "summarising failed; archiving the chunk raw");
                let content = format!(
                    "[Raw transcript: summarising failed ({error}).]\n{}",
                    cut_middle(&transcript, self.limits.raw_max_chars)
                );
                self.archive.append(&HistoryEntry::new(session_key, cursor, content, at))?;
                Ok(ChunkOutcome::Raw(error))
            }
        }
    }

    /// One request: `Ok(Some(summary))`, `Ok(None)` for [`NOTHING`], or the
    /// reason it failed.
    async fn summarise(&self, system_prompt: &str, transcript: &str) -> Result<Option<String>, String> {
        let system = if system_prompt.trim().is_empty() {
            INSTRUCTION.to_string()
        } else {
            format!("{system_prompt}\n\n---\n\n{INSTRUCTION}")
        };
        let header = "Transcript to archive:\n\n";
        let room = self
            .limits
            .input_budget
            .saturating_sub(estimate_text(&system) + estimate_text(header) + 2 * PER_MESSAGE_OVERHEAD + 16)
            .max(256);
        let request = ChatRequest {
            model: self.model.clone(),
            messages: vec![Message::system(system), Message::user(format!("{header}{}", fit_tokens(transcript, room)))],
            tools: Arc::from(Vec::<Value>::new()),
            max_tokens: self.limits.max_tokens,
            temperature: None,
        };
        let response = tokio::time::timeout(self.limits.timeout, self.provider.chat(&request, None))
            .await
            .map_err(|_| format!("no answer within {} s", self.limits.timeout.as_secs()))?;
        if response.is_error() {
            return Err(response.error.map_or_else(|| "the request failed".to_string(), |e| e.message));
        }
        let text = response.content.as_deref().unwrap_or_default().trim();
        if text.is_empty() {
            return Err("the model returned an empty summary".into());
        }
        if is_nothing(text) {
            return Ok(None);
        }
        Ok(Some(text.to_string()))
    }
}

/// True for `NOTHING`, in any case, with stray quotes, stars or a full stop.
fn is_nothing(answer: &str) -> bool {
    answer.trim_matches(|c: char| c.is_whitespace() || "\"'`*.".contains(c)).eq_ignore_ascii_case(NOTHING)
}

/// Messages as a readable transcript, one entry per message, slash commands
/// left out; long texts, tool results and arguments clipped.
///
/// ```text
/// [2025-01-01T10:00] USER: what is in notes.txt?
/// ASSISTANT called read_file({"path":"notes.txt"})
/// TOOL read_file: buy milk
/// ASSISTANT: It says "buy milk".
/// ```
pub fn render_transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages.iter().filter(|m| !m.is_command()) {
        let stamp = message
            .meta
            .get("timestamp")
            .and_then(Value::as_str)
            .map(|t| format!("[{}] ", t.chars().take(16).collect::<String>()))
            .unwrap_or_default();
        let text = message.text().trim();
        let mut lines = Vec::new();
        match message.role {
            Role::User => lines.push(format!("{stamp}USER: {}", clip(text, MESSAGE_CHARS))),
            Role::System => lines.push(format!("{stamp}SYSTEM: {}", clip(text, MESSAGE_CHARS))),
            Role::Assistant => {
                if !text.is_empty() {
                    lines.push(format!("{stamp}ASSISTANT: {}", clip(text, MESSAGE_CHARS)));
                }
                for call in &message.tool_calls {
                    lines.push(format!(
                        "{stamp}ASSISTANT called {}({})",
                        call.function.name,
                        clip(call.function.arguments.trim(), ARGUMENT_CHARS)
                    ));
                }
            }
            Role::Tool => {
                let name = message.name.as_deref().unwrap_or("tool");
                lines.push(format!("{stamp}TOOL {name}: {}", clip(text, TOOL_RESULT_CHARS)));
            }
        }
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// The first `max` characters of `text`, marked when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}… [{} more characters]", &text[..cut], text[cut..].chars().count()),
    }
}

/// `text` cut to about `max` characters: two thirds from the start, one
/// third from the end (where a chunk's conclusions usually are), and a
/// marker in between.
fn cut_middle(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_string();
    }
    let head = max * 2 / 3;
    let tail = max - head;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text.char_indices().nth(total - tail).map_or(text.len(), |(i, _)| i);
    format!("{}\n[… {} characters left out …]\n{}", &text[..head_end], total - head - tail, &text[tail_start..])
}

/// `text` cut in the middle until its token estimate fits `max_tokens`.
fn fit_tokens(text: &str, max_tokens: usize) -> String {
    let estimate = estimate_text(text);
    if estimate <= max_tokens {
        return text.to_string();
    }
    let total = text.chars().count();
    // Start from the proportional guess and shrink: the estimator may be a
    // real tokenizer, whose tokens-per-character ratio varies with the text.
    let mut keep = total * max_tokens / estimate.max(1);
    loop {
        let cut = cut_middle(text, keep);
        if keep == 0 || estimate_text(&cut) <= max_tokens {
            return cut;
        }
        keep = keep * 9 / 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{COMMAND_MARKER, ToolCall};

    #[test]
    fn nothing_is_recognised_loosely() {
        for answer in ["NOTHING", "nothing", "  Nothing.\n", "**NOTHING**", "\"NOTHING\""] {
            assert!(is_nothing(answer), "{answer:?}");
        }
        for answer in ["Nothing much happened", "NOTHING NEW: the user is Ann", ""] {
            assert!(!is_nothing(answer), "{answer:?}");
        }
    }

    #[test]
    fn transcript_renders_roles_calls_and_skips_commands() {
        let messages = vec![
            Message::user("what is in notes.txt?").with_meta("timestamp", "2025-01-01T10:00:59+00:00"),
            Message::assistant_calls(None, vec![ToolCall::new("c1", "read_file", "{\"path\":\"notes.txt\"}")]),
            Message::tool_result("c1", "read_file", "x".repeat(TOOL_RESULT_CHARS + 10)),
            Message::user("/help").with_meta(COMMAND_MARKER, true),
            Message::assistant("It says x.\n(lots)"),
        ];
        let t = render_transcript(&messages);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "[2025-01-01T10:00] USER: what is in notes.txt?");
        assert_eq!(lines[1], "ASSISTANT called read_file({\"path\":\"notes.txt\"})");
        assert!(lines[2].starts_with("TOOL read_file: xxx") && lines[2].ends_with("… [10 more characters]"));
        assert_eq!(lines[3], "ASSISTANT: It says x.");
        assert!(!t.contains("/help"));
        assert!(render_transcript(&[Message::user("/new").with_meta(COMMAND_MARKER, true)]).is_empty());
    }

    #[test]
    fn cutting_keeps_head_and_tail_and_fits() {
        let text: String = (0..2000).map(|i| format!("word{i} ")).collect();
        let cut = cut_middle(&text, 300);
        assert!(cut.starts_with("word0 ") && cut.ends_with("word1999 "));
        assert!(cut.chars().count() < 400);
        let fitted = fit_tokens(&text, 100);
        assert!(estimate_text(&fitted) <= 100);
        assert_eq!(fit_tokens("short", 100), "short");
        assert_eq!(cut_middle("héllo wörld", 100), "héllo wörld");
    }

    #[test]
    fn limits_use_the_runner_budget() {
        let limits = SummaryLimits::new(65_536, 8192);
        assert_eq!(limits.input_budget, 65_536 - 8192 - 1024);
        assert_eq!(limits.max_tokens, SUMMARY_MAX_TOKENS);
        assert_eq!(SummaryLimits::new(10_000, 500).max_tokens, 500);
    }
}
