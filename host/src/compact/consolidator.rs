//! [`Consolidator`]: token consolidation (RUNTIME.md §7, second row).
//!
//! When the prompt estimate reaches the input budget, the oldest unarchived
//! messages are archived chunk by chunk, one summary request per chunk, until
//! the estimate is at most `target_ratio` (half) of the budget. Stopping well
//! below the trigger (hysteresis) means consolidation runs once every many
//! turns, not on every turn once the conversation is long, so the archived
//! prefix and with it the provider's prompt cache stay stable in between.
//!
//! Where a chunk may end: just before a user message, and only where no tool
//! call of the chunk has its result after the cut, so a call and its result
//! are always archived together. The last user message is never archived
//! (chunks end before user messages), so the current turn stays whole.
//! A chunk is capped at `max_chunk_ratio` of the budget (unless one turn alone
//! is larger), so its summary request fits the model next to the system
//! prompt; a large backlog therefore takes several rounds, at most
//! `max_rounds` per call, and the next call goes on where this one stopped.
//!
//! Concurrency: a `Consolidator` is shared by all sessions (`&self`), but it
//! does not lock a session. Call it under the loop's per-session lock, both
//! in BUILD and for the background pass after SAVE, so a turn and a
//! consolidation never edit one session at the same time.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};


use super::CompactError;
use super::archive::HistoryArchive;
use super::auto::{Clock, SystemClock};
use super::summarise::{ChunkOutcome, Summariser, SummaryLimits};
use crate::tokens::input_budget;
use crate::config::AgentConfig;
use crate::provider::Provider;
use crate::session::{Message, Role, Session};
use crate::tokens::{Counted, estimate_message, over_limit};

/// Settings of token consolidation; every figure is a config value.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsolidationSettings {
    /// The model's context window, in tokens.
    pub context_window: usize,
    /// The completion cap of a turn's requests.
    pub max_tokens: u32,
    /// Consolidate down to this share of the budget (0.5).
    pub target_ratio: f64,
    /// Chunks (one summary request each) per call at most (5).
    pub max_rounds: usize,
    /// Largest chunk, as a share of the budget (0.5), unless a single turn
    /// is larger: its summary request must fit next to the system prompt.
    pub max_chunk_ratio: f64,
    /// Sizes of the summary requests.
    pub summary: SummaryLimits,
}

impl ConsolidationSettings {
    /// Defaults for a model with `context_window` tokens answering with up to
    /// `max_tokens`.
    pub fn new(context_window: usize, max_tokens: u32) -> Self {
        ConsolidationSettings {
            context_window,
            max_tokens,
            target_ratio: 0.5,
            max_rounds: 5,
            max_chunk_ratio: 0.5,
            summary: SummaryLimits::new(context_window, max_tokens),
        }
    }

    /// Settings from the `[agent]` section.
    pub fn from_config(config: &AgentConfig) -> Self {
        ConsolidationSettings {
            summary: SummaryLimits::from_config(config),
            ..ConsolidationSettings::new(config.context_window, config.max_tokens)
        }
    }

    /// The input budget: `context_window − max_tokens − 1024`, the runner's
    /// own formula (`governance::input_budget`).
    pub fn budget(&self) -> usize {
        input_budget(self.context_window, self.max_tokens)
    }

    /// Where a consolidation stops: `target_ratio × budget`.
    pub fn target(&self) -> usize {
        ratio_of(self.budget(), self.target_ratio)
    }

    /// The chunk cap in tokens.
    pub fn max_chunk_tokens(&self) -> usize {
        ratio_of(self.budget(), self.max_chunk_ratio).max(1)
    }
}

fn ratio_of(total: usize, ratio: f64) -> usize {
    (total as f64 * ratio.clamp(0.0, 1.0)).floor() as usize
}

/// What one [`Consolidator::maybe_consolidate`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsolidationReport {
    /// The input budget.
    pub budget: usize,
    /// The estimate it consolidates down to.
    pub target: usize,
    /// The estimate had reached the budget.
    pub triggered: bool,
    /// Rounds run; each archives one chunk.
    pub rounds: usize,
    /// Chunks archived (the cursor moved past them).
    pub chunks: usize,
    /// Messages the cursor moved past.
    pub archived_messages: usize,
    /// Chunks whose summary was written.
    pub summaries: usize,
    /// Chunks written raw because the model failed.
    pub raw: usize,
    /// Chunks the model found nothing in: nothing written.
    pub nothing: usize,
    /// The estimate before (overhead + unarchived messages).
    pub tokens_before: usize,
    /// The estimate after.
    pub tokens_after: usize,
    /// `last_consolidated` before.
    pub cursor_before: usize,
    /// `last_consolidated` after.
    pub cursor_after: usize,
}

impl ConsolidationReport {
    /// The session changed (the cursor moved): save it, rebuild the prompt.
    pub fn changed(&self) -> bool {
        self.cursor_after != self.cursor_before
    }
}

/// Tokens of the session's unarchived messages as the prompt would carry
/// them: slash-command rows are never replayed, so they do not count.
pub fn estimate_unarchived(session: &Session) -> usize {
    unarchived(session).map(estimate_message).sum()
}

/// The session's unarchived messages a prompt carries: slash-command rows
/// are never replayed.
fn unarchived(session: &Session) -> impl Iterator<Item = &Message> + Clone {
    session.recent().iter().filter(|m| !m.is_command())
}

/// The part of a prompt estimate that is not the session's unarchived
/// messages: the system prompt (with memory, skills, archived history and
/// summary), the tool definitions, and a probe user message standing for
/// the current one (`tools_tokens`: `ToolRegistry::definitions_tokens`).
/// What [`Consolidator::maybe_consolidate`] takes as
/// `overhead_tokens`.
pub fn prompt_overhead(system_prompt: &str, tools_tokens: usize, probe: &Message) -> usize {
    PromptOverhead::new(system_prompt, tools_tokens, probe).exact()
}

/// [`prompt_overhead`] counted only when a decision needs it (see
/// [`crate::tokens::Counted`]): a turn far below its budget never counts.
pub struct PromptOverhead {
    system: Message,
    probe: Message,
    tools: Box<dyn Counted + Send + Sync>,
    exact: OnceLock<usize>,
}

impl PromptOverhead {
    /// The overhead of a prompt with `system_prompt`, the `tools` sent with
    /// it and `probe` standing for the current message.
    pub fn new(system_prompt: &str, tools: impl Counted + Send + Sync + 'static, probe: &Message) -> PromptOverhead {
        PromptOverhead { system: Message::system(system_prompt), probe: probe.clone(), tools: Box::new(tools), exact: OnceLock::new() }
    }
}

impl Counted for PromptOverhead {
    fn bound(&self) -> usize {
        self.system.bound() + self.tools.bound() + self.probe.bound()
    }
    fn exact(&self) -> usize {
        *self.exact.get_or_init(|| self.system.exact() + self.tools.exact() + self.probe.exact())
    }
}

impl std::fmt::Debug for PromptOverhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptOverhead").field("bound", &self.bound()).field("exact", &self.exact.get()).finish()
    }
}

fn cost(message: &Message) -> usize {
    if message.is_command() { 0 } else { estimate_message(message) }
}

/// Token consolidation for every session of an agent (shared by reference).
#[derive(Clone)]
pub struct Consolidator {
    summariser: Summariser,
    settings: ConsolidationSettings,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Consolidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consolidator").field("summariser", &self.summariser).field("settings", &self.settings).finish()
    }
}

impl Consolidator {
    /// Consolidates with `model` on `provider` into `archive`.
    pub fn new(provider: Arc<dyn Provider>, model: String, archive: HistoryArchive, settings: ConsolidationSettings) -> Self {
        Consolidator {
            summariser: Summariser::new(provider, model, archive, settings.summary.clone()),
            settings,
            clock: Arc::new(SystemClock),
        }
    }

    /// Stamps archive entries with `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The settings.
    pub fn settings(&self) -> &ConsolidationSettings {
        &self.settings
    }

    /// The summariser (also what `/new` archives its cleared tail with).
    pub fn summariser(&self) -> &Summariser {
        &self.summariser
    }

    /// The archive.
    pub fn archive(&self) -> &HistoryArchive {
        self.summariser.archive()
    }

    /// The input budget ([`ConsolidationSettings::budget`]).
    pub fn budget(&self) -> usize {
        self.settings.budget()
    }

    /// Whether [`Consolidator::maybe_consolidate`] would do anything: the
    /// estimate (`overhead_tokens` + unarchived messages) reached the budget.
    /// Cheap; for deciding whether to schedule the background pass.
    pub fn needs_consolidation(&self, session: &Session, overhead: &dyn Counted) -> bool {
        over_limit(unarchived(session), overhead, self.budget().saturating_sub(1))
    }

    /// Consolidates `session` if its prompt estimate reached the budget.
    ///
    /// `overhead_tokens` is what the prompt costs besides the unarchived
    /// messages (see [`prompt_overhead`]); `system_prompt` is the turn's
    /// system prompt, reused as the prefix of the summary requests so the
    /// provider can serve it from its cache. Each round archives one chunk
    /// (see the module docs), advances `session.last_consolidated` past it
    /// whatever the model answered, and re-estimates; rounds stop at the
    /// target, after `max_rounds`, or when no chunk can be cut without
    /// touching the last user turn. No message is removed.
    ///
    /// Errors only when the archive cannot be written; the rounds before
    /// have already moved the cursor. Call under the session lock, and save
    /// the session afterwards when [`ConsolidationReport::changed`].
    pub async fn maybe_consolidate(
        &self,
        session: &mut Session,
        system_prompt: &str,
        overhead_tokens: usize,
    ) -> Result<ConsolidationReport, CompactError> {
        let budget = self.budget();
        let target = self.settings.target();
        let mut estimate = overhead_tokens + estimate_unarchived(session);
        let cursor = session.last_consolidated.min(session.messages.len());
        let mut report = ConsolidationReport {
            budget,
            target,
            tokens_before: estimate,
            tokens_after: estimate,
            cursor_before: cursor,
            cursor_after: cursor,
            ..Default::default()
        };
        if estimate < budget {
            return Ok(report);
        }
        report.triggered = true;
        while report.rounds < self.settings.max_rounds && estimate > target {
            let start = session.last_consolidated.min(session.messages.len());
            let Some(end) = pick_boundary(&session.messages, start, estimate - target, self.settings.max_chunk_tokens()) else {
                break;
            };
            report.rounds += 1;
            let outcome = self
                .summariser
                .archive_chunk(&session.key, &session.messages[start..end], end, system_prompt, self.clock.now())
                .await?;
            match outcome {
                ChunkOutcome::Summary(_) => report.summaries += 1,
                ChunkOutcome::Raw(_) => report.raw += 1,
                ChunkOutcome::Nothing => report.nothing += 1,
                ChunkOutcome::Empty => {}
            }
            session.last_consolidated = end;
            report.chunks += 1;
            report.archived_messages += end - start;
            estimate = overhead_tokens + estimate_unarchived(session);
        }
        report.tokens_after = estimate;
        report.cursor_after = session.last_consolidated;
        if report.tokens_after > target {
            tracing::debug!(session = %session.key, ?report, "consolidation stopped above its target");
        }
        Ok(report)
    }
}

/// The end (exclusive) of the next chunk of `messages[start..]`: the index
/// of a user message, such that no tool call before it is answered at or
/// after it. The first such end that removes at least `to_remove` tokens,
/// unless the chunk would exceed `max_chunk` tokens, in which case the
/// previous end (or, when there is none, this one: a single oversized turn);
/// when neither is reached, the last possible end. `None` when no end exists
/// (the tail holds a single turn).
fn pick_boundary(messages: &[Message], start: usize, to_remove: usize, max_chunk: usize) -> Option<usize> {
    let tail = messages.get(start..)?;
    // Where each call of the tail is answered.
    let answered_at: HashMap<&str, usize> = tail
        .iter()
        .enumerate()
        .filter_map(|(i, m)| Some((m.tool_call_id.as_deref()?, start + i)))
        .collect();
    // The last index holding a result of a call seen so far: no cut up to it.
    let mut open_until = start;
    let mut removed = 0usize;
    let mut best = None;
    for (i, message) in tail.iter().enumerate() {
        let idx = start + i;
        if idx > start && message.role == Role::User && idx > open_until {
            if removed > max_chunk {
                return best.or(Some(idx));
            }
            best = Some(idx);
            if removed >= to_remove {
                return best;
            }
        }
        removed += cost(message);
        for call in &message.tool_calls {
            if let Some(&at) = answered_at.get(call.id.as_str()) {
                open_until = open_until.max(at);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::ToolCall;

    /// `turns` turns of user, tool call, result, answer; ids `c{i}`.
    fn convo(turns: usize) -> Vec<Message> {
        (0..turns)
            .flat_map(|i| {
                [
                    Message::user(format!("question {i}")),
                    Message::assistant_calls(None, vec![ToolCall::new(format!("c{i}"), "read_file", "{}")]),
                    Message::tool_result(format!("c{i}"), "read_file", format!("result {i}")),
                    Message::assistant(format!("answer {i}")),
                ]
            })
            .collect()
    }

    fn tokens(messages: &[Message]) -> usize {
        messages.iter().map(cost).sum()
    }

    #[test]
    fn boundaries_fall_just_before_user_messages() {
        let m = convo(5);
        // Removing one token: the first turn is enough.
        assert_eq!(pick_boundary(&m, 0, 1, usize::MAX), Some(4));
        // Removing exactly two turns' worth ends after the second turn.
        assert_eq!(pick_boundary(&m, 0, tokens(&m[..8]), usize::MAX), Some(8));
        // One token more needs the third turn.
        assert_eq!(pick_boundary(&m, 0, tokens(&m[..8]) + 1, usize::MAX), Some(12));
        // More than there is: the last user turn stays.
        assert_eq!(pick_boundary(&m, 0, usize::MAX, usize::MAX), Some(16));
        // From a cursor inside the history.
        assert_eq!(pick_boundary(&m, 8, 1, usize::MAX), Some(12));
        // A single turn left: nothing to cut.
        assert_eq!(pick_boundary(&m, 16, usize::MAX, usize::MAX), None);
        assert_eq!(pick_boundary(&m, 20, 1, usize::MAX), None);
    }

    #[test]
    fn the_chunk_cap_stops_at_the_previous_boundary() {
        let m = convo(5);
        let turn = tokens(&m[..4]);
        assert_eq!(pick_boundary(&m, 0, usize::MAX, turn * 2), Some(8));
        // A cap smaller than one turn still archives that turn.
        assert_eq!(pick_boundary(&m, 0, usize::MAX, 1), Some(4));
    }

    #[test]
    fn a_tool_call_is_never_separated_from_its_result() {
        // An injected user message between a call and its result.
        let m = vec![
            Message::user("q0"),
            Message::assistant_calls(None, vec![ToolCall::new("a", "exec", "{}")]),
            Message::user("injected"),
            Message::tool_result("a", "exec", "done"),
            Message::assistant("ok"),
            Message::user("q1"),
        ];
        assert_eq!(pick_boundary(&m, 0, 1, usize::MAX), Some(5));
        // A call never answered does not block cuts forever.
        let m = vec![
            Message::user("q0"),
            Message::assistant_calls(None, vec![ToolCall::new("lost", "exec", "{}")]),
            Message::user("q1"),
            Message::assistant("a1"),
            Message::user("q2"),
        ];
        assert_eq!(pick_boundary(&m, 0, 1, usize::MAX), Some(2));
    }

    #[test]
    fn settings_follow_the_runner_budget() {
        let s = ConsolidationSettings::new(10_000, 1_000);
        assert_eq!(s.budget(), 10_000 - 1_000 - 1_024);
        assert_eq!(s.budget(), input_budget(10_000, 1_000));
        assert_eq!(s.target(), (10_000 - 1_000 - 1_024) / 2);
        assert_eq!(ConsolidationSettings::from_config(&AgentConfig::default()).budget(), 65_536 - 8_192 - 1_024);
    }
}
