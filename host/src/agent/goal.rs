//! Sustained goals (issue 11 §4, nanobot's `/goal` mode): the goal record a
//! turn carries. The `/goal` command is a feature
//! (`crate::features::goals`); the record stays in the engine because every
//! turn reads and writes it: BUILD puts it in the prompt, RUN hands the
//! runner its [`TurnGoal`] driver, the turn's [`GoalSlot`] is what the
//! plugins' `goals` interface changes mid-run, each checkpoint stores it,
//! `/status` shows it and the loop resumes an interrupted one at start.
//!
//! A session may have one goal: an objective with a status (`active`,
//! `complete`, `cancelled`, `blocked`), the last recap and its times. It is
//! stored in the session's metadata under [`GOAL_STATE`] and so persisted
//! with it. While it is `active`:
//! - BUILD adds it to the system prompt ([`prompt_block`]);
//! - the runner does not end the turn on an answer without tool calls: the
//!   [`TurnGoal`] driver hands it a continuation message
//!   ([`continue_message`]) and the run goes on, until the model calls
//!   `update_goal` (complete, cancel, block), or the turn's wall-clock
//!   budget (`[agent] goal_budget_secs`) or `max_iterations` runs out: then
//!   the goal is marked `blocked` with the reason as its recap and the
//!   reply says so, so a goal that never completes cannot burn tokens on
//!   every later message.
//!
//! During a turn the goal lives in the turn's [`GoalSlot`] (on its
//! `ActiveTurn`), where the `goals` interface changes it; every runner
//! checkpoint copies it into the session before the session is saved, so
//! the goal on disk is never older than the messages on disk. A process
//! killed mid-goal therefore restarts with the goal still `active` and the
//! run's messages up to the last continuation boundary: the next turn of
//! that session (any message, or the resume message the loop publishes at
//! start, [`resume_message`]) continues it.
//!
//! Everything a plugin hands in is the model's: texts are checked here
//! (blank, length, control characters) and refused with an error it can act
//! on.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::agent::hooks::{GoalDriver, GoalStep};
use crate::plugins::{GoalAction, GoalStatus, GoalUpdate, GoalView};
use crate::session::Session;

/// Session metadata key of the goal.
pub const GOAL_STATE: &str = "goal_state";

/// Message metadata key marking the runner's continuation messages (kept
/// in history so the conversation reads as it happened; front ends may
/// hide them).
pub const GOAL_CONTINUATION: &str = "_goal_continuation";

/// Longest objective or recap, in characters.
pub const MAX_GOAL_TEXT: usize = 4000;

/// Longest `ui_summary`, in characters.
pub const MAX_UI_SUMMARY: usize = 120;

/// A session's goal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// What the agent works towards.
    pub objective: String,
    /// A short label for status displays (at most [`MAX_UI_SUMMARY`] characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui_summary: Option<String>,
    /// Where the goal stands.
    pub status: GoalStatus,
    /// What was done, given when the goal is completed, cancelled or blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recap: Option<String>,
    /// When the goal was set.
    pub created_at: DateTime<Utc>,
    /// When the goal last changed.
    pub updated_at: DateTime<Utc>,
}

impl Goal {
    /// A new active goal.
    pub fn new(objective: String, ui_summary: Option<String>) -> Goal {
        let now = Utc::now();
        Goal { objective, ui_summary, status: GoalStatus::Active, recap: None, created_at: now, updated_at: now }
    }

    /// Whether the goal is still [`GoalStatus::Active`].
    pub fn is_active(&self) -> bool {
        self.status == GoalStatus::Active
    }

    /// As the `goals` interface returns it.
    pub fn view(&self) -> GoalView {
        GoalView {
            objective: self.objective.clone(),
            ui_summary: self.ui_summary.clone(),
            status: self.status,
            recap: self.recap.clone(),
            created_at: self.created_at.to_rfc3339(),
            updated_at: self.updated_at.to_rfc3339(),
        }
    }

    fn set_status(&mut self, status: GoalStatus, recap: Option<String>) {
        self.status = status;
        if recap.is_some() {
            self.recap = recap;
        }
        self.updated_at = Utc::now();
    }
}

/// The goal stored on `session`; an unreadable record is logged and
/// treated as none (it is overwritten by the next goal).
pub fn goal_of(session: &Session) -> Option<Goal> {
    let raw = session.metadata.get(GOAL_STATE)?;
    match serde_json::from_value(raw.clone()) {
        Ok(goal) => Some(goal),
        Err(e) => {
            tracing::warn!(session = %session.key, "ignoring an unreadable goal record: {e}");
            None
        }
    }
}

/// Stores `goal` on `session` (`None` removes it).
pub fn set_goal(session: &mut Session, goal: Option<&Goal>) {
    let value = goal.and_then(|g| serde_json::to_value(g).ok());
    session.set_meta(GOAL_STATE, value);
}

/// The goal of a running turn. The `goals` interface writes it; the runner
/// reads it after each answer; checkpoints and SAVE copy it into the
/// session.
#[derive(Debug, Default)]
pub struct GoalSlot {
    goal: Mutex<Option<Goal>>,
}

impl GoalSlot {
    /// Starts the turn with the session's goal.
    pub fn load(&self, goal: Option<Goal>) {
        *self.goal.lock().expect("goal lock") = goal;
    }

    /// The goal now.
    pub fn get(&self) -> Option<Goal> {
        self.goal.lock().expect("goal lock").clone()
    }

    /// Copies the goal into `session`'s metadata when it differs.
    pub fn store_into(&self, session: &mut Session) {
        let goal = self.get();
        if goal != goal_of(session) {
            set_goal(session, goal.as_ref());
        }
    }

    /// `goals.create`.
    pub fn create(&self, objective: String, ui_summary: Option<String>) -> Result<Goal, String> {
        let objective = check_text("objective", &objective, MAX_GOAL_TEXT)?;
        let ui_summary = ui_summary.map(|s| check_summary(&s)).transpose()?.flatten();
        let mut slot = self.goal.lock().expect("goal lock");
        if let Some(current) = slot.as_ref().filter(|g| g.is_active()) {
            return Err(format!(
                "a goal is already active: \"{}\". Finish it with update_goal (complete, cancel or block), or call update_goal with action `replace` and the new objective",
                clip(&current.objective, 200)
            ));
        }
        let goal = Goal::new(objective, ui_summary);
        *slot = Some(goal.clone());
        Ok(goal)
    }

    /// `goals.update`.
    pub fn update(&self, update: GoalUpdate) -> Result<Goal, String> {
        let recap = update.recap.as_deref().filter(|r| !r.trim().is_empty()).map(|r| check_text("recap", r, MAX_GOAL_TEXT)).transpose()?;
        let ui_summary = update.ui_summary.map(|s| check_summary(&s)).transpose()?.flatten();
        let mut slot = self.goal.lock().expect("goal lock");
        let Some(goal) = slot.as_mut() else {
            return Err("there is no goal in this session: start one with create_goal".into());
        };
        let status = match update.action {
            GoalAction::Complete => GoalStatus::Complete,
            GoalAction::Cancel => GoalStatus::Cancelled,
            GoalAction::Block => GoalStatus::Blocked,
            GoalAction::Replace => {
                let objective = update.objective.as_deref().ok_or("action `replace` needs the new `objective`")?;
                goal.objective = check_text("objective", objective, MAX_GOAL_TEXT)?;
                if ui_summary.is_some() {
                    goal.ui_summary = ui_summary;
                }
                goal.recap = None;
                goal.set_status(GoalStatus::Active, recap);
                return Ok(goal.clone());
            }
        };
        if !goal.is_active() {
            return Err(format!("the goal is already {}; nothing to {}", goal.status.name(), action_name(update.action)));
        }
        if ui_summary.is_some() {
            goal.ui_summary = ui_summary;
        }
        goal.set_status(status, recap);
        Ok(goal.clone())
    }

    /// Marks an active goal blocked with `reason` as its recap (a budget ran
    /// out); false when no goal is active.
    fn block(&self, reason: &str) -> bool {
        let mut slot = self.goal.lock().expect("goal lock");
        match slot.as_mut().filter(|g| g.is_active()) {
            Some(goal) => {
                goal.set_status(GoalStatus::Blocked, Some(reason.to_string()));
                true
            }
            None => false,
        }
    }
}

fn action_name(action: GoalAction) -> &'static str {
    match action {
        GoalAction::Complete => "complete",
        GoalAction::Cancel => "cancel",
        GoalAction::Block => "block",
        GoalAction::Replace => "replace",
    }
}

/// A required text: trimmed, not blank, at most `max` characters, no
/// control characters besides newline and tab.
fn check_text(field: &str, text: &str, max: usize) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("`{field}` is empty: say what the goal is"));
    }
    let count = text.chars().count();
    if count > max {
        return Err(format!("`{field}` is {count} characters; the limit is {max}: say it shorter"));
    }
    if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\n' && *c != '\t') {
        return Err(format!("`{field}` contains the control character U+{:04X}; send plain text", c as u32));
    }
    Ok(text.to_string())
}

/// An optional one-line summary; blank counts as none.
fn check_summary(text: &str) -> Result<Option<String>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let text = check_text("ui_summary", text, MAX_UI_SUMMARY)?;
    if text.contains(['\n', '\t']) {
        return Err("`ui_summary` must be one line".into());
    }
    Ok(Some(text))
}

fn clip(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// The continuation message (after nanobot's `goal_continue_message`).
pub fn continue_message(goal: &Goal) -> String {
    format!(
        "[Goal continuation] The goal of this session is still active:\n{}\n\nKeep working on it: take the next concrete step with your tools. \
         When it is achieved, call update_goal with action `complete` and a short recap; if you cannot go on without the user, call update_goal \
         with action `block` and say what you need; if it should be abandoned, action `cancel`. Do not just describe what you would do.",
        goal.objective
    )
}

/// The user message a restarted agent sends itself for a session whose
/// goal was active when the process died.
pub fn resume_message(goal: &Goal) -> String {
    format!("[Goal resumed after a restart] Continue working on the active goal:\n{}", goal.objective)
}

/// Sessions whose goal was active when their turn was interrupted (the
/// process died mid-turn: the turn's crash-recovery marks are still on
/// disk), as `(key, goal)`. Reads every stored session once; a session that
/// cannot be read is logged and skipped.
pub fn interrupted_goals(sessions: &dyn crate::session::SessionStore) -> Vec<(String, Goal)> {
    interrupted_goals_and(sessions, |_| {})
}

/// [`interrupted_goals`], showing every session it reads to `each` too, so
/// other start-up checks share its one pass over the store.
pub fn interrupted_goals_and(sessions: &dyn crate::session::SessionStore, mut each: impl FnMut(&crate::session::Session)) -> Vec<(String, Goal)> {
    let keys = match sessions.list() {
        Ok(keys) => keys,
        Err(e) => {
            tracing::warn!("goal resume: cannot list sessions: {e}");
            return Vec::new();
        }
    };
    let mut found = Vec::new();
    for key in keys {
        match sessions.load(&key) {
            Ok(session) => {
                each(&session);
                let interrupted = session.metadata.contains_key(crate::session::PENDING_USER_TURN)
                    || session.metadata.contains_key(crate::session::RUNTIME_CHECKPOINT);
                if let Some(goal) = goal_of(&session).filter(|g| interrupted && g.is_active()) {
                    found.push((key, goal));
                }
                sessions.release(session);
            }
            Err(e) => tracing::warn!(session = %key, "goal resume: cannot read the session: {e}"),
        }
    }
    found
}

/// The system prompt block of an active goal.
pub fn prompt_block(goal: &Goal) -> String {
    let mut block = format!(
        "\n\n# Active goal\n\nThis session has a sustained goal. Work on it until it is done, then call update_goal (action `complete`, with a recap). \
         Use update_goal `block` when you need the user, `cancel` to abandon it, `replace` to change it.\n\nObjective: {}",
        goal.objective
    );
    if let Some(recap) = &goal.recap {
        block.push_str(&format!("\nLast recap: {recap}"));
    }
    block
}

/// The goal's lines in `/status` and `/goal`.
pub fn describe(goal: &Goal) -> String {
    let mut text = format!("Goal ({}): {}", goal.status.name(), goal.objective);
    if let Some(summary) = &goal.ui_summary {
        text.push_str(&format!("\nSummary: {summary}"));
    }
    if let Some(recap) = &goal.recap {
        text.push_str(&format!("\nRecap: {recap}"));
    }
    text.push_str(&format!("\nSet {}, updated {}", goal.created_at.format("%Y-%m-%d %H:%M:%S UTC"), goal.updated_at.format("%Y-%m-%d %H:%M:%S UTC")));
    text
}

/// `/goal <task>`: the session's goal becomes `task` (replacing any other).
pub fn command_set(session: &mut Session, task: &str) -> Result<Goal, String> {
    let objective = check_text("goal", task, MAX_GOAL_TEXT)?;
    let goal = Goal::new(objective, None);
    set_goal(session, Some(&goal));
    Ok(goal)
}

/// The runner's view of the turn's goal: continue while it is active and
/// the turn's budget lasts.
pub struct TurnGoal {
    slot: std::sync::Arc<GoalSlot>,
    deadline: Instant,
    budget: Duration,
}

impl TurnGoal {
    /// A driver for a turn starting now with `budget` of wall-clock time.
    pub fn new(slot: std::sync::Arc<GoalSlot>, budget: Duration) -> TurnGoal {
        TurnGoal { slot, deadline: Instant::now() + budget, budget }
    }
}

impl GoalDriver for TurnGoal {
    fn after_answer(&self) -> GoalStep {
        let Some(goal) = self.slot.get().filter(Goal::is_active) else { return GoalStep::Finish };
        if Instant::now() >= self.deadline {
            let secs = self.budget.as_secs();
            let reason = format!("stopped: the time budget of {secs} s for one turn ran out (config [agent] goal_budget_secs)");
            self.slot.block(&reason);
            tracing::info!(secs, "goal stopped by its time budget");
            return GoalStep::Stop(format!(
                "(I stopped working on the goal: the time budget of {secs} s ran out before it was complete. The goal is marked blocked; send /goal <task> to start it again.)"
            ));
        }
        GoalStep::Continue(continue_message(&goal))
    }

    fn at_limit(&self, max_iterations: usize) -> Option<String> {
        let reason = format!("stopped: the limit of {max_iterations} iterations for one turn was reached (config [agent] max_iterations)");
        self.slot.block(&reason).then(|| {
            format!("(I stopped working on the goal after {max_iterations} iterations, the limit for one turn. The goal is marked blocked; send /goal <task> to start it again.)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(action: GoalAction) -> GoalUpdate {
        GoalUpdate { action, recap: Some("did it".into()), objective: None, ui_summary: None }
    }

    #[test]
    fn create_update_and_refusals() {
        let slot = GoalSlot::default();
        assert!(slot.update(update(GoalAction::Complete)).unwrap_err().contains("create_goal"));
        let goal = slot.create("  Write the report  ".into(), Some("report".into())).unwrap();
        assert_eq!((goal.objective.as_str(), goal.status), ("Write the report", GoalStatus::Active));
        assert!(slot.create("another".into(), None).unwrap_err().contains("replace"));
        let done = slot.update(update(GoalAction::Complete)).unwrap();
        assert_eq!((done.status, done.recap.as_deref()), (GoalStatus::Complete, Some("did it")));
        assert!(slot.update(update(GoalAction::Cancel)).unwrap_err().contains("already complete"));
        assert!(slot.update(update(GoalAction::Replace)).unwrap_err().contains("objective"));
        let replaced = slot.update(GoalUpdate { objective: Some("New one".into()), ..update(GoalAction::Replace) }).unwrap();
        assert_eq!((replaced.objective.as_str(), replaced.status), ("New one", GoalStatus::Active));
        // A new goal after the old one ended.
        slot.update(update(GoalAction::Block)).unwrap();
        assert!(slot.create("third".into(), None).is_ok());
    }

    #[test]
    fn hostile_texts_are_refused_with_a_reason() {
        let slot = GoalSlot::default();
        assert!(slot.create("   ".into(), None).unwrap_err().contains("empty"));
        assert!(slot.create("x".repeat(MAX_GOAL_TEXT + 1), None).unwrap_err().contains("limit is 4000"));
        assert!(slot.create("a\x1b[2Jb".into(), None).unwrap_err().contains("U+001B"));
        assert!(slot.create("ok".into(), Some("two\nlines".into())).unwrap_err().contains("one line"));
        assert!(slot.create("ok".into(), Some("s".repeat(121))).unwrap_err().contains("120"));
        assert!(slot.get().is_none(), "nothing was stored");
        slot.create("line one\nline two".into(), Some(" ".into())).unwrap();
        let e = slot.update(GoalUpdate { recap: Some("\u{0}".into()), ..update(GoalAction::Complete) }).unwrap_err();
        assert!(e.contains("U+0000"), "{e}");
        assert!(slot.get().unwrap().is_active(), "a refused update changes nothing");
    }

    #[test]
    fn the_goal_round_trips_through_the_session() {
        let mut session = Session::new("t:1");
        assert!(goal_of(&session).is_none());
        let goal = command_set(&mut session, "ship it").unwrap();
        assert_eq!(goal_of(&session), Some(goal.clone()));
        session.set_meta(GOAL_STATE, Some(serde_json::json!({"objective": 5})));
        assert!(goal_of(&session).is_none(), "unreadable: none");
        let slot = GoalSlot::default();
        slot.load(Some(goal));
        slot.store_into(&mut session);
        assert!(goal_of(&session).unwrap().is_active());
        assert!(command_set(&mut session, " ").is_err());
    }

    #[test]
    fn the_driver_continues_then_blocks_at_the_budget() {
        let slot = std::sync::Arc::new(GoalSlot::default());
        let driver = TurnGoal::new(slot.clone(), Duration::from_secs(3600));
        assert_eq!(driver.after_answer(), GoalStep::Finish, "no goal");
        slot.create("count to ten".into(), None).unwrap();
        match driver.after_answer() {
            GoalStep::Continue(text) => assert!(text.contains("count to ten") && text.contains("update_goal"), "{text}"),
            other => panic!("{other:?}"),
        }
        let expired = TurnGoal::new(slot.clone(), Duration::ZERO);
        match expired.after_answer() {
            GoalStep::Stop(text) => assert!(text.contains("time budget of 0 s"), "{text}"),
            other => panic!("{other:?}"),
        }
        let goal = slot.get().unwrap();
        assert_eq!(goal.status, GoalStatus::Blocked);
        assert!(goal.recap.unwrap().contains("goal_budget_secs"));
        assert_eq!(driver.at_limit(5), None, "no longer active");
    }
}
