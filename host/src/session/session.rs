//! `Session`: one chat's messages and state, and the history rules (spec §6).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::message::{Message, Role};

/// Messages always replayed, even when archived (spec §6).
pub const MIN_RECENT_MESSAGES: usize = 8;

/// Metadata key: the user message of the running turn was persisted early
/// and has not been answered yet.
pub const PENDING_USER_TURN: &str = "pending_user_turn";

/// Metadata key: the runner's last checkpoint (see `agent::checkpoint`).
pub const RUNTIME_CHECKPOINT: &str = "runtime_checkpoint";

/// Metadata key: the inbox id (`crate::durable::InboxRef`) of the user
/// message persisted by the running turn (set with [`PENDING_USER_TURN`]).
/// A restart that finds it still open resumes that turn from its checkpoint.
pub const PENDING_INBOX: &str = "pending_inbox";

/// Metadata key: `{id, also, reply}` of the last turn committed with an inbox
/// row, stamped in the same save as its messages. If the process dies before
/// the row is marked done, the restart finishes it from here (one reply, the
/// turn not run again).
pub const ANSWERED_INBOX: &str = "answered_inbox";

/// Metadata key: tails cleared by `/new` whose archive is not written yet,
/// `[{cursor, at, messages}]`; removed once archived (also after a crash).
pub const PENDING_ARCHIVES: &str = "pending_archives";

/// Metadata key: tokens of the last prompt sent (shown by `/status`).
pub const LAST_PROMPT_TOKENS: &str = "last_prompt_tokens";

/// Metadata key: present (`true`) when [`LAST_PROMPT_TOKENS`] is only an
/// upper bound (the prompt was far below the budget, so nothing counted it).
pub const LAST_PROMPT_TOKENS_BOUND: &str = "last_prompt_tokens_bound";

/// One conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// `{channel}:{chat_id}` or an override.
    pub key: String,
    /// Every message ever added; archiving only moves `last_consolidated`.
    pub messages: Vec<Message>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Titles, summaries, checkpoints, flags.
    pub metadata: Map<String, Value>,
    /// Length of the archived prefix of `messages`.
    pub last_consolidated: usize,
    /// How many of `messages` are already on disk; the rest are appended on
    /// the next save. Maintained by the store.
    pub(crate) persisted: usize,
    /// The disk copy no longer matches a prefix (the session was cleared):
    /// the next save rewrites it whole.
    pub(crate) needs_rewrite: bool,
}

impl Session {
    /// A new, empty session.
    pub fn new(key: impl Into<String>) -> Self {
        let now = Utc::now();
        Session {
            key: key.into(),
            messages: Vec::new(),
            created_at: now,
            updated_at: now,
            metadata: Map::new(),
            last_consolidated: 0,
            persisted: 0,
            needs_rewrite: true,
        }
    }

    /// Appends a message.
    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
        self.updated_at = Utc::now();
    }

    /// Empties the session (`/new`); the file is rewritten on the next save.
    pub fn clear(&mut self) {
        self.messages.clear();
        self.last_consolidated = 0;
        self.metadata.remove(PENDING_USER_TURN);
        self.metadata.remove(PENDING_INBOX);
        self.metadata.remove(RUNTIME_CHECKPOINT);
        self.needs_rewrite = true;
        self.updated_at = Utc::now();
    }

    /// The unarchived messages.
    pub fn recent(&self) -> &[Message] {
        &self.messages[self.last_consolidated.min(self.messages.len())..]
    }

    /// Sets or removes a metadata key.
    pub fn set_meta(&mut self, key: &str, value: Option<Value>) {
        match value {
            Some(v) => self.metadata.insert(key.to_string(), v),
            None => self.metadata.remove(key),
        };
        self.updated_at = Utc::now();
    }

    /// The messages to replay to the model (spec §6): from the archive
    /// cursor, but at least the last [`MIN_RECENT_MESSAGES`] (extended back to
    /// a user message); starting at a user message; without leading orphan
    /// tool results or `_command` rows; with attachment breadcrumbs; and cut
    /// from the front to fit `max_tokens` (keeping at least one message, and
    /// again starting at a user message). `max_messages` caps the count.
    pub fn get_history(&self, max_messages: usize, max_tokens: usize, estimate: impl Fn(&Message) -> usize) -> Vec<Message> {
        self.get_history_bounded(max_messages, max_tokens, &estimate, &estimate)
    }

    /// [`Session::get_history`] with a cheap upper `bound` of `estimate`:
    /// when the bounds of the candidate messages fit `max_tokens`, nothing
    /// is cut and `estimate` is never called.
    pub fn get_history_bounded(
        &self,
        max_messages: usize,
        max_tokens: usize,
        bound: &dyn Fn(&Message) -> usize,
        estimate: &dyn Fn(&Message) -> usize,
    ) -> Vec<Message> {
        let visible: Vec<&Message> = self.messages.iter().filter(|m| !m.is_command()).collect();
        // Index in `visible` of the archive cursor.
        let archived_visible = self.messages[..self.last_consolidated.min(self.messages.len())].iter().filter(|m| !m.is_command()).count();
        let mut start = archived_visible.min(visible.len().saturating_sub(MIN_RECENT_MESSAGES));
        if start < archived_visible {
            // The forced tail must begin where a user spoke.
            while start > 0 && visible[start].role != Role::User {
                start -= 1;
            }
            if start > 0 && is_delivery(visible[start - 1]) {
                start -= 1;
            }
        }
        start = start.max(visible.len().saturating_sub(max_messages.max(1)));
        let mut tail = &visible[start..];
        tail = start_at_user(tail);

        // Fit the token budget from the end.
        let mut keep_from = tail.len();
        if tail.iter().map(|m| bound(m)).sum::<usize>() <= max_tokens {
            keep_from = 0;
        } else {
            let mut used = 0;
            for (i, m) in tail.iter().enumerate().rev() {
                let cost = estimate(m);
                if used + cost > max_tokens && keep_from < tail.len() {
                    break;
                }
                used += cost;
                keep_from = i;
            }
        }
        let mut fitted = &tail[keep_from..];
        let recut = start_at_user(fitted);
        if !recut.is_empty() {
            fitted = recut;
        }
        fitted.iter().map(|m| with_breadcrumbs(m)).collect()
    }
}

/// Skips to the first user message (or the proactive delivery just before
/// it, which the user may be answering); with none, drops leading tool
/// results whose call is not in the slice.
fn start_at_user<'a>(messages: &'a [&'a Message]) -> &'a [&'a Message] {
    match messages.iter().position(|m| m.role == Role::User) {
        Some(i) if i > 0 && is_delivery(messages[i - 1]) => &messages[i - 1..],
        Some(i) => &messages[i..],
        None => {
            let skip = messages.iter().take_while(|m| m.role == Role::Tool).count();
            &messages[skip..]
        }
    }
}

/// A proactive delivery row (`_channel_delivery`).
fn is_delivery(message: &Message) -> bool {
    message.role == Role::Assistant && message.meta.get(super::message::CHANNEL_DELIVERY) == Some(&Value::Bool(true))
}

/// Attachments become text the model can act on: `[attachment: path]`.
fn with_breadcrumbs(message: &Message) -> Message {
    let mut out = message.clone();
    if let Some(media) = message.meta.get("media").and_then(Value::as_array).filter(|m| !m.is_empty()) {
        let crumbs: Vec<String> = media.iter().filter_map(Value::as_str).map(|p| format!("[attachment: {p}]")).collect();
        let text = out.content.take().unwrap_or_default();
        out.content = Some(if text.is_empty() { crumbs.join("\n") } else { format!("{text}\n{}", crumbs.join("\n")) });
    }
    out
}

/// Whether `session` already holds the announcement of subagent task `id`
/// (a result is taken into a session once).
pub fn holds_subagent_result(session: &Session, id: &str) -> bool {
    session.messages.iter().any(|m| m.meta.get(crate::bus::TASK_ID).and_then(Value::as_str) == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::message::{COMMAND_MARKER, ToolCall};

    fn chars(m: &Message) -> usize {
        m.text().len()
    }

    fn convo(turns: usize) -> Session {
        let mut s = Session::new("t:1");
        for i in 0..turns {
            s.push(Message::user(format!("q{i}")));
            s.push(Message::assistant_calls(None, vec![ToolCall::new(format!("c{i}"), "read_file", "{}")]));
            s.push(Message::tool_result(format!("c{i}"), "read_file", format!("r{i}")));
            s.push(Message::assistant(format!("a{i}")));
        }
        s
    }

    #[test]
    fn history_starts_at_the_archive_cursor() {
        let mut s = convo(5); // 20 messages
        s.last_consolidated = 12;
        let h = s.get_history(500, usize::MAX, chars);
        assert_eq!(h.len(), 8);
        assert_eq!(h[0].text(), "q3");
    }

    #[test]
    fn at_least_eight_messages_extended_back_to_a_user_message() {
        let mut s = convo(5);
        s.last_consolidated = 20; // everything archived
        let h = s.get_history(500, usize::MAX, chars);
        // The last 8 messages start at q3 (a user message) already.
        assert_eq!(h.len(), 8);
        s.push(Message::user("q5"));
        let h = s.get_history(500, usize::MAX, chars);
        // The last 8 would start at a tool result: extended back to q3.
        assert_eq!(h[0].text(), "q3");
        assert_eq!(h.len(), 9);
    }

    #[test]
    fn commands_and_orphans_are_skipped() {
        let mut s = Session::new("t:1");
        s.push(Message::tool_result("gone", "x", "orphan"));
        s.push(Message::user("/help").with_meta(COMMAND_MARKER, true));
        s.push(Message::assistant("help text").with_meta(COMMAND_MARKER, true));
        s.push(Message::user("hi"));
        s.push(Message::assistant("hello"));
        let h = s.get_history(500, usize::MAX, chars);
        let texts: Vec<&str> = h.iter().map(Message::text).collect();
        assert_eq!(texts, ["hi", "hello"]);
    }

    #[test]
    fn a_delivery_the_user_answers_is_replayed_with_the_answer() {
        let mut s = Session::new("t:1");
        s.push(Message::assistant("stray reply"));
        s.push(Message::assistant("Reminder: water the plants.").with_meta(super::super::message::CHANNEL_DELIVERY, true));
        s.push(Message::user("done, thanks"));
        s.push(Message::assistant("great"));
        let texts: Vec<String> = s.get_history(500, usize::MAX, chars).iter().map(|m| m.text().to_string()).collect();
        assert_eq!(texts, ["Reminder: water the plants.", "done, thanks", "great"]);
        // An ordinary assistant row before a user message is still cut.
        let mut plain = Session::new("t:2");
        plain.push(Message::assistant("stray reply"));
        plain.push(Message::user("hi"));
        assert_eq!(plain.get_history(500, usize::MAX, chars)[0].text(), "hi");
    }

    #[test]
    fn the_token_budget_cuts_from_the_front_to_a_user_message() {
        let s = convo(5);
        // Each turn costs 2+0+2+2 = 6 "tokens"; 13 fit two turns and change.
        let h = s.get_history(500, 13, chars);
        assert_eq!(h[0].text(), "q3");
        assert_eq!(h.len(), 8);
        // A budget smaller than one message keeps the last message.
        let h = s.get_history(500, 1, chars);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn attachments_become_breadcrumbs() {
        let mut s = Session::new("t:1");
        s.push(Message::user("look").with_meta("media", serde_json::json!(["/tmp/a.pdf"])));
        let h = s.get_history(500, usize::MAX, chars);
        assert_eq!(h[0].text(), "look\n[attachment: /tmp/a.pdf]");
    }

    #[test]
    fn a_bound_changes_no_cut() {
        let s = convo(6);
        // Any upper bound: the history is the one exact counts give, whether
        // the bound fits (nothing counted) or not (exact fitting).
        let bound = |m: &Message| chars(m) * 3 + 1;
        for budget in [1, 5, 13, 20, 30, 40, 60, 1000] {
            assert_eq!(s.get_history_bounded(500, budget, &bound, &chars), s.get_history(500, budget, chars), "budget {budget}");
        }
        let never = |_: &Message| -> usize { panic!("counted although the bound fits") };
        assert_eq!(s.get_history_bounded(500, 1000, &bound, &never).len(), 24);
    }
}
