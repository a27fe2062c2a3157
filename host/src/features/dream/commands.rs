//! Dream's slash commands, registered with the engine
//! ([`CommandHandler`]): `/dream` runs it now, `/dream-log` lists its
//! recorded edits, `/dream-restore <n>` puts back what run `n` replaced.
//! Each also adds Dream's line to `/status` once (the `/dream` handler).

use std::sync::Arc;

use super::{DREAMING, Dream, Trigger};
use crate::agent::hooks::{CommandAnswer, CommandCall, CommandHandler, CommandReply};
use crate::agent::turn::TurnError;
use crate::bus::StopReason;

/// The three handlers over one `dream`, in `/help` order.
pub fn handlers(dream: &Arc<Dream>) -> [Arc<dyn CommandHandler>; 3] {
    [Arc::new(DreamNow(dream.clone())), Arc::new(DreamLog(dream.clone())), Arc::new(DreamRestore(dream.clone()))]
}

/// `/dream`.
struct DreamNow(Arc<Dream>);

impl CommandHandler for DreamNow {
    fn name(&self) -> &'static str {
        "dream"
    }

    fn help(&self) -> &'static str {
        "fold the conversation history archived since the last Dream into MEMORY.md, USER.md, SOUL.md and skills/"
    }

    fn handle(&self, _: CommandCall<'_>) -> Result<CommandReply, TurnError> {
        // Dream is a turn of its own: it runs after this turn has let go of
        // the session's lock and its slot.
        let dream = self.0.clone();
        Ok(CommandReply::AfterTurn(Box::new(move |agent, sink| {
            Box::pin(async move {
                // A run takes a while: the chat hears at once that it started.
                sink.notice(DREAMING);
                let report = dream.run(&agent, Trigger::Manual).await;
                CommandAnswer { text: report.text, stop: report.stop_reason.unwrap_or(StopReason::Command) }
            })
        })))
    }

    fn status_line(&self) -> Option<String> {
        Some(self.0.status_line())
    }
}

/// `/dream-log`.
struct DreamLog(Arc<Dream>);

impl CommandHandler for DreamLog {
    fn name(&self) -> &'static str {
        "dream-log"
    }

    fn help(&self) -> &'static str {
        "Dream's recorded edits: when, which files, lines added and removed"
    }

    fn handle(&self, _: CommandCall<'_>) -> Result<CommandReply, TurnError> {
        Ok(CommandReply::Reply(self.0.log_text()))
    }
}

/// `/dream-restore <n>`.
struct DreamRestore(Arc<Dream>);

impl CommandHandler for DreamRestore {
    fn name(&self) -> &'static str {
        "dream-restore"
    }

    fn help(&self) -> &'static str {
        "<n>: put back the versions Dream run n replaced (see /dream-log)"
    }

    fn handle(&self, call: CommandCall<'_>) -> Result<CommandReply, TurnError> {
        Ok(CommandReply::Reply(match call.args.trim_start_matches('#').parse::<u64>() {
            Ok(number) => self.0.restore(number),
            Err(_) => "Usage: /dream-restore <n>, with n a run number from /dream-log.".to_string(),
        }))
    }
}
