//! Context governance: the passes that make a conversation fit to send
//! (spec §5 step 1). They work on a copy made for the model; the run's own
//! message list, which is persisted, is never edited here.

use std::collections::HashSet;

use crate::session::{Message, Role};
use crate::tokens::{Counted, estimate_message, over_limit};

/// Tokens of `messages` plus tool definitions worth `tools_tokens`.
fn estimate(messages: &[Message], tools_tokens: usize) -> usize {
    messages.iter().map(estimate_message).sum::<usize>() + tools_tokens
}

/// Result text for a call whose result is missing.
pub const INTERRUPTED_RESULT: &str = "Error: result unavailable, the call was interrupted before it finished.";

/// Result text for a call that produced nothing.
pub const EMPTY_RESULT: &str = "(tool completed with no output)";

/// Results at least this long are candidates for compaction.
pub const COMPACTABLE_CHARS: usize = 500;

/// Compaction stops once the estimate is at most this share of the budget.
pub const COMPACTION_TARGET: f64 = 0.85;

pub use crate::tokens::{BUDGET_SLACK, input_budget};

/// Run-long governance state: results compacted once stay compacted, so the
/// prompt does not flip between full and compacted forms.
#[derive(Debug, Default)]
pub struct Governance {
    /// Call ids whose results are sent compacted.
    pub compacted: HashSet<String>,
}

impl Governance {
    /// Prepares the copy of `messages` to send. `compactable(tool_name)` says
    /// whether a tool's results may be compacted (read-only tools: the model
    /// can fetch again); `run_start` is the index where this run's messages
    /// begin, since only this run's results are compacted.
    pub fn prepare(
        &mut self,
        messages: &[Message],
        tools: &dyn Counted,
        budget: usize,
        run_start: usize,
        compactable: impl Fn(&str) -> bool,
    ) -> Vec<Message> {
        let mut copy: Vec<Message> = messages.iter().map(Message::for_provider).collect();
        repair_pairs(&mut copy);
        for m in &mut copy {
            if m.role == Role::Tool && m.text().trim().is_empty() {
                m.content = Some(EMPTY_RESULT.into());
            }
        }
        self.apply_compaction(&mut copy);
        // The passes below need exact counts; most requests are far below
        // the budget and skip them on the byte bound alone.
        if over_limit(&copy, tools, budget) {
            let tools_tokens = tools.exact();
            let target = (budget as f64 * COMPACTION_TARGET) as usize;
            let run_start = run_start.min(copy.len());
            let candidates: Vec<usize> = (run_start..copy.len())
                .filter(|&i| {
                    let m = &copy[i];
                    m.role == Role::Tool
                        && m.text().len() >= COMPACTABLE_CHARS
                        && !self.compacted.contains(m.tool_call_id.as_deref().unwrap_or_default())
                        && compactable(m.name.as_deref().unwrap_or_default())
                })
                .collect();
            for i in candidates {
                if estimate(&copy, tools_tokens) <= target {
                    break;
                }
                if let Some(id) = copy[i].tool_call_id.clone() {
                    self.compacted.insert(id);
                }
                compact(&mut copy[i]);
            }
        }
        if over_limit(&copy, tools, budget) {
            snip(&mut copy, tools.exact(), budget);
            repair_pairs(&mut copy);
        }
        copy
    }

    fn apply_compaction(&self, copy: &mut [Message]) {
        for m in copy.iter_mut() {
            if m.role == Role::Tool && m.tool_call_id.as_ref().is_some_and(|id| self.compacted.contains(id)) {
                compact(m);
            }
        }
    }
}

fn compact(message: &mut Message) {
    let name = message.name.clone().unwrap_or_else(|| "tool".into());
    let size = message.text().len();
    message.content = Some(format!(
        "Error: this {name} result ({size} chars) was compacted to fit the context window. Narrow your query (a smaller range, a more specific pattern) and call the tool again if you still need it."
    ));
}

/// Drops tool results whose call is not in the conversation (or already
/// answered), and adds an "interrupted" result for every call without one,
/// right after its assistant message's other results.
pub fn repair_pairs(messages: &mut Vec<Message>) {
    // The usual case, checked without copying an id: nothing to repair.
    if pairs_intact(messages) {
        return;
    }
    let mut answered: HashSet<String> = HashSet::new();
    let mut open: HashSet<String> = HashSet::new();
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut pending: Vec<(String, String)> = Vec::new();
    let flush = |out: &mut Vec<Message>, pending: &mut Vec<(String, String)>, answered: &HashSet<String>| {
        for (id, name) in pending.drain(..) {
            if !answered.contains(&id) {
                out.push(Message::tool_result(id, name, INTERRUPTED_RESULT));
            }
        }
    };
    for m in messages.drain(..) {
        match m.role {
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                if open.contains(&id) && answered.insert(id) {
                    out.push(m);
                }
            }
            _ => {
                flush(&mut out, &mut pending, &answered);
                open.clear();
                for call in &m.tool_calls {
                    open.insert(call.id.clone());
                    pending.push((call.id.clone(), call.function.name.clone()));
                }
                out.push(m);
            }
        }
    }
    flush(&mut out, &mut pending, &answered);
    *messages = out;
}

/// Whether every tool result answers a call of the assistant message before
/// it, once, and every call has its result.
fn pairs_intact(messages: &[Message]) -> bool {
    let mut open: HashSet<&str> = HashSet::new();
    for m in messages {
        match m.role {
            Role::Tool => {
                if !open.remove(m.tool_call_id.as_deref().unwrap_or_default()) {
                    return false;
                }
            }
            _ => {
                if !open.is_empty() {
                    return false;
                }
                open.extend(m.tool_calls.iter().map(|c| c.id.as_str()));
                if open.len() != m.tool_calls.len() {
                    return false; // a repeated id
                }
            }
        }
    }
    open.is_empty()
}

/// Drops old history until the request fits: system messages stay, and the
/// kept tail starts at a user message. At least the last user message and
/// what follows it are kept, even if that alone is over budget.
fn snip(messages: &mut Vec<Message>, tools_tokens: usize, budget: usize) {
    let system: Vec<Message> = messages.iter().filter(|m| m.role == Role::System).cloned().collect();
    let rest: Vec<Message> = messages.iter().filter(|m| m.role != Role::System).cloned().collect();
    let user_starts: Vec<usize> = rest.iter().enumerate().filter(|(_, m)| m.role == Role::User).map(|(i, _)| i).collect();
    let mut chosen = user_starts.last().copied().unwrap_or(0);
    for &start in &user_starts {
        let mut candidate = system.clone();
        candidate.extend_from_slice(&rest[start..]);
        if estimate(&candidate, tools_tokens) <= budget {
            chosen = start;
            break;
        }
    }
    let mut kept = system;
    kept.extend_from_slice(&rest[chosen..]);
    *messages = kept;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::ToolCall;

    fn call(id: &str) -> Message {
        Message::assistant_calls(None, vec![ToolCall::new(id, "read_file", "{}")])
    }

    #[test]
    fn orphans_dropped_and_missing_results_backfilled() {
        let mut messages = vec![
            Message::user("q"),
            Message::tool_result("ghost", "x", "orphan"),
            call("a"),
            Message::tool_result("a", "read_file", "ok"),
            Message::tool_result("a", "read_file", "duplicate"),
            call("b"),
            Message::user("next"),
        ];
        repair_pairs(&mut messages);
        let texts: Vec<&str> = messages.iter().map(Message::text).collect();
        assert_eq!(texts, ["q", "", "ok", "", INTERRUPTED_RESULT, "next"]);
        assert_eq!(messages[4].tool_call_id.as_deref(), Some("b"));
    }

    #[test]
    fn only_broken_pairs_need_repair() {
        let intact = vec![Message::user("q"), call("a"), Message::tool_result("a", "read_file", "ok"), Message::assistant("done")];
        assert!(pairs_intact(&intact));
        let mut repaired = intact.clone();
        repair_pairs(&mut repaired);
        assert_eq!(repaired, intact);
        let broken = [
            vec![Message::user("q"), Message::tool_result("ghost", "x", "orphan")],
            vec![call("a"), Message::tool_result("a", "read_file", "ok"), Message::tool_result("a", "read_file", "again")],
            vec![call("a"), Message::user("next")],
            vec![call("a")],
        ];
        for messages in broken {
            assert!(!pairs_intact(&messages), "{messages:?}");
        }
    }

    #[test]
    fn large_results_are_compacted_oldest_first_and_stay_compacted() {
        let big: String = (0..800).map(|i| format!("line {i} of the file\n")).collect();
        let messages = vec![
            Message::system("s"),
            Message::user("q"),
            call("a"),
            Message::tool_result("a", "read_file", big.clone()),
            call("b"),
            Message::tool_result("b", "read_file", big.clone()),
        ];
        // A budget that one compaction brings under 85%, two are not needed for.
        let full = estimate(&messages, 0);
        let one_result = crate::tokens::estimate_text(&big);
        let budget = ((full - one_result + 200) as f64 / COMPACTION_TARGET) as usize;
        assert!(budget < full, "the request starts over budget");
        let mut gov = Governance::default();
        let copy = gov.prepare(&messages, &0, budget, 1, |_| true);
        assert!(copy[3].text().contains("compacted"), "oldest first");
        assert_eq!(copy[5].text(), big, "stops once under 85%");
        assert_eq!(messages[3].text(), big, "the original is untouched");
        // Next request, plenty of room: still compacted.
        let copy = gov.prepare(&messages, &0, 100_000, 1, |_| true);
        assert!(copy[3].text().contains("compacted"));
    }

    #[test]
    fn snipping_keeps_system_and_starts_at_a_user_message() {
        let mut messages = vec![Message::system("sys")];
        for i in 0..20 {
            messages.push(Message::user(format!("question {i} {}", "y".repeat(400))));
            messages.push(Message::assistant(format!("answer {i} {}", "z".repeat(400))));
        }
        let mut gov = Governance::default();
        let copy = gov.prepare(&messages, &0, 1000, messages.len(), |_| false);
        assert_eq!(copy[0].role, Role::System);
        assert_eq!(copy[1].role, Role::User);
        assert!(estimate(&copy, 0) <= 1000);
        assert!(copy.last().unwrap().text().starts_with("answer 19"));
    }
}
