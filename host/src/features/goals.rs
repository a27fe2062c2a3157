//! The `/goal` command (nanobot's `/goal` mode), registered with the engine
//! ([`CommandHandler`]): `/goal <task>` sets the session's goal and lets
//! the message go on to the model, which starts working on it; `/goal`
//! alone shows the goal. The goal itself (record, slot, runner driver,
//! resume) is the engine's, [`crate::agent::goal`], re-exported here.

use crate::agent::hooks::{CommandCall, CommandHandler, CommandReply};
use crate::agent::turn::TurnError;

pub use crate::agent::goal::*;

/// The `/goal` usage line.
pub const GOAL_USAGE: &str = "Usage: /goal <long-running task description>. The agent works on it until it is done (or blocked); /goal alone shows the current goal.";

/// `/goal`.
pub struct GoalCommand;

impl CommandHandler for GoalCommand {
    fn name(&self) -> &'static str {
        "goal"
    }

    fn help(&self) -> &'static str {
        "<task>: work on a long-running task until it is done; alone: show the goal"
    }

    fn handle(&self, call: CommandCall<'_>) -> Result<CommandReply, TurnError> {
        let session = call.session;
        if call.args.is_empty() {
            return Ok(CommandReply::Reply(match goal_of(session) {
                Some(goal) => describe(&goal),
                None => format!("No goal is set. {GOAL_USAGE}"),
            }));
        }
        match command_set(session, call.args) {
            Ok(_) => {
                // The goal is set; the message goes on to the model, which
                // starts working on it.
                if !call.ephemeral {
                    call.core.sessions.save(session)?;
                }
                tracing::info!(session = %session.key, "goal set by /goal");
                Ok(CommandReply::Dispatch)
            }
            Err(e) => Ok(CommandReply::Reply(format!("{e}. {GOAL_USAGE}"))),
        }
    }
}
