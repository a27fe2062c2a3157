//! What a chat sees of a running turn besides "typing": the tool calls
//! (`send_tool_hints`) and the plugins' progress texts (`send_progress`),
//! as one progress message per turn that the deliver loop edits in place
//! (the [`super::stream::Lane::Progress`] lane, paced with the reply).
//!
//! nanobot sends each hint as a message of its own; a chat platform's rate
//! limit (Telegram: about 20 messages a minute in a group) makes that a
//! flood on a turn with many calls. Here the hints of a turn are lines of
//! one message: each call is a line (`↳ read_file(notes.md)`), its latest
//! progress text follows it (`… fs: page 3 of 12`), a ✓ or ✗ is added when
//! it ends, and only the last [`MAX_LINES`] calls are kept. The text is the
//! model's arguments and a plugin's words, so every line is clipped, loses
//! its control characters and has its Markdown escaped: a hint renders as
//! the text it is and can never format (or break) the message.

use std::collections::HashMap;


use crate::bus::{ToolPhase, ToolProgress};

use super::stream::Key;

/// Calls shown per turn; older ones are folded into a count.
pub const MAX_LINES: usize = 8;

/// Longest hint or progress text shown, in characters.
const MAX_LINE_CHARS: usize = 120;

/// Which hints a channel shows (`[channels.<name>]`).
#[derive(Debug, Clone, Copy)]
pub struct Show {
    /// `send_tool_hints`: each call and its outcome.
    pub tool_hints: bool,
    /// `send_progress`: the plugins' progress texts.
    pub progress: bool,
}

/// One call's line.
#[derive(Debug, Default)]
struct Call {
    id: String,
    hint: String,
    progress: Option<String>,
    ok: Option<bool>,
}

/// The calls of the running turn of each chat.
#[derive(Debug, Default)]
pub struct Hints {
    chats: HashMap<Key, (Vec<Call>, usize)>,
}

impl Hints {
    /// Takes a tool's progress event (its text is `content`); the chat's
    /// progress text when it changed what should be shown, `None` when it
    /// is not shown (a kind `show` turns off, an unknown call).
    pub fn event(&mut self, key: &Key, event: &ToolProgress, content: &str, show: Show) -> Option<String> {
        let (tool, id) = (event.tool.as_str(), event.call_id.as_str());
        let (calls, folded) = self.chats.entry(key.clone()).or_default();
        match event.phase {
            ToolPhase::Started if show.tool_hints || show.progress => {
                calls.push(Call { id: id.to_string(), hint: line(content), ..Call::default() });
                if calls.len() > MAX_LINES {
                    calls.remove(0);
                    *folded += 1;
                }
            }
            ToolPhase::Progress if show.progress => {
                let call = calls.iter_mut().rev().find(|c| c.id == id)?;
                call.progress = Some(format!("{}: {}", line(tool), line(content)));
            }
            ToolPhase::Finished if show.tool_hints => {
                let call = calls.iter_mut().rev().find(|c| c.id == id)?;
                call.ok = event.ok;
            }
            _ => return None,
        }
        let text = render(calls, *folded, show);
        (!text.is_empty()).then_some(text)
    }

    /// Forgets `key`'s calls (its turn ended, or its reply was sent).
    pub fn forget(&mut self, key: &Key) {
        self.chats.remove(key);
    }
}

fn render(calls: &[Call], folded: usize, show: Show) -> String {
    let mut lines = Vec::new();
    if folded > 0 && show.tool_hints {
        lines.push(format!("… {folded} earlier call(s)"));
    }
    for call in calls {
        if show.tool_hints {
            let mark = match call.ok {
                Some(true) => " ✓",
                Some(false) => " ✗",
                None => "",
            };
            lines.push(format!("↳ {}{mark}", call.hint));
        }
        if let Some(progress) = call.progress.as_ref().filter(|_| show.progress) {
            lines.push(format!("… {progress}"));
        }
    }
    lines.join("\n")
}

/// `text` as one safe line of Markdown: control characters (newlines
/// included) become spaces, at most [`MAX_LINE_CHARS`] characters, and
/// every ASCII punctuation character backslash-escaped.
fn line(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().map(|c| if c.is_control() { ' ' } else { c });
    for c in chars.by_ref().take(MAX_LINE_CHARS) {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool event and its text.
    fn event(phase: &str, id: &str, content: &str, ok: Option<bool>) -> (ToolProgress, String) {
        let phase = match phase {
            "started" => ToolPhase::Started,
            "progress" => ToolPhase::Progress,
            _ => ToolPhase::Finished,
        };
        (ToolProgress { tool: "read_file".into(), call_id: id.into(), phase, ok }, content.to_string())
    }

    /// [`Hints::event`] over a pair from [`event`].
    fn take(hints: &mut Hints, key: &Key, (event, content): (ToolProgress, String), show: Show) -> Option<String> {
        hints.event(key, &event, &content, show)
    }

    const ALL: Show = Show { tool_hints: true, progress: true };

    #[test]
    fn calls_are_lines_with_their_progress_and_outcome() {
        let key: Key = ("1".into(), None);
        let mut hints = Hints::default();
        // The turn's own "running" hint is `OutboundKind::Progress`, not a
        // tool event: it never reaches `Hints` (the typing indicator shows it).
        assert_eq!(take(&mut hints, &key, event("started", "c1", "read_file(notes.md)", None), ALL).unwrap(), "↳ read\\_file\\(notes\\.md\\)");
        let text = take(&mut hints, &key, event("progress", "c1", "page 3\nof 12", None), ALL).unwrap();
        assert_eq!(text, "↳ read\\_file\\(notes\\.md\\)\n… read\\_file: page 3 of 12");
        let text = take(&mut hints, &key, event("finished", "c1", "", Some(true)), ALL).unwrap();
        assert!(text.starts_with("↳ read\\_file\\(notes\\.md\\) ✓\n"), "{text}");
        assert_eq!(take(&mut hints, &key, event("progress", "unknown", "x", None), ALL), None);

        let hints_only = Show { tool_hints: true, progress: false };
        let mut other = Hints::default();
        take(&mut other, &key, event("started", "c1", "f()", None), hints_only);
        assert_eq!(take(&mut other, &key, event("progress", "c1", "half", None), hints_only), None, "progress texts off");
        let progress_only = Show { tool_hints: false, progress: true };
        let mut third = Hints::default();
        assert_eq!(take(&mut third, &key, event("started", "c1", "f()", None), progress_only), None, "nothing to show yet");
        assert_eq!(take(&mut third, &key, event("progress", "c1", "half", None), progress_only).unwrap(), "… read\\_file: half");
        assert_eq!(take(&mut third, &key, event("finished", "c1", "", Some(false)), progress_only), None);
    }

    #[test]
    fn a_long_turn_keeps_its_last_calls_and_lines_stay_short_and_inert() {
        let key: Key = ("1".into(), None);
        let mut hints = Hints::default();
        let mut text = String::new();
        for i in 0..20 {
            text = take(&mut hints, &key, event("started", &format!("c{i}"), &format!("f{i}()"), None), ALL).unwrap();
        }
        assert_eq!(text.lines().count(), MAX_LINES + 1);
        assert!(text.starts_with("… 12 earlier call(s)\n↳ f12\\(\\)"), "{text}");
        let hostile = format!("**bold** [x](http://evil) `code` <b> {}", "y".repeat(500));
        let shown = line(&hostile);
        assert!(shown.starts_with("\\*\\*bold\\*\\* \\[x\\]\\(http\\:\\/\\/evil\\) \\`code\\` \\<b\\>"), "{shown}");
        assert!(shown.ends_with('…') && shown.chars().filter(|c| *c != '\\').count() <= MAX_LINE_CHARS + 1);
        hints.forget(&key);
        assert_eq!(take(&mut hints, &key, event("finished", "c19", "", Some(true)), ALL), None, "forgotten");
    }
}
