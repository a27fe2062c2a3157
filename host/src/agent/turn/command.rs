//! COMMAND: slash commands. A handled command is a shortcut to DONE; it and
//! its reply are saved with the `_command` marker (never replayed to the
//! model), except `/new`, which empties the session.

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::commands::{self, Command, Parsed};
use crate::agent::core::AgentCore;
use crate::agent::subagents;
use crate::agent::goals;
use crate::bus::OutboundMessage;
use crate::session::{COMMAND_MARKER, Message};

/// Reply to `/new`.
pub const NEW_SESSION_TEXT: &str = "Started a new conversation. The previous one is archived.";

pub async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    // A resumed turn passed COMMAND before its process died.
    if ctx.resume {
        return Ok(TurnEvent::Dispatch);
    }
    // A SYSTEM turn (a subagent's result) is never a command. The session
    // takes each result once: a second delivery ends here, unanswered.
    if ctx.inbound.channel == crate::bus::SYSTEM_CHANNEL {
        if let Some(id) = subagents::task_id(&ctx.inbound).map(str::to_string)
            && subagents::already_delivered(ctx.session_mut()?, &id)
        {
            tracing::info!(session = %ctx.session_key, subagent = %id, "subagent result already in the session; not handled again");
            return Ok(TurnEvent::Shortcut);
        }
        return Ok(TurnEvent::Dispatch);
    }
    if ctx.internal {
        return Ok(TurnEvent::Dispatch);
    }
    let reply = match commands::parse(&ctx.inbound.content) {
        Parsed::NotACommand => return Ok(TurnEvent::Dispatch),
        Parsed::Unknown { name, suggestion } => commands::unknown_text(&name, suggestion),
        Parsed::Known(Command::Help) => commands::help_text(),
        Parsed::Known(Command::Status) => core.status_text(ctx.session_mut()?),
        // A /stop that reaches a turn found no turn running (a running turn
        // is stopped by the loop before any lock is taken); subagents of the
        // session may still be.
        Parsed::Known(Command::Stop) => match core.services.subagents().map(|m| m.cancel_session(&ctx.session_key)).unwrap_or(0) {
            0 => "No task is running.".to_string(),
            n => format!("Stopped {n} subagent(s)."),
        },
        Parsed::Known(Command::Goal) => {
            let task = commands::args(&ctx.inbound.content).to_string();
            let ephemeral = ctx.ephemeral;
            let session = ctx.session_mut()?;
            if task.is_empty() {
                match goals::goal_of(session) {
                    Some(goal) => goals::describe(&goal),
                    None => format!("No goal is set. {}", goals::GOAL_USAGE),
                }
            } else {
                match goals::command_set(session, &task) {
                    Ok(_) => {
                        // The goal is set; the message goes on to the model,
                        // which starts working on it (nanobot's `/goal`).
                        if !ephemeral {
                            core.sessions.save(session)?;
                        }
                        tracing::info!(session = %ctx.session_key, "goal set by /goal");
                        return Ok(TurnEvent::Dispatch);
                    }
                    Err(e) => format!("{e}. {}", goals::GOAL_USAGE),
                }
            }
        }
        Parsed::Known(Command::Dream) => {
            // Dream runs after this turn has let go of the session's lock and
            // its concurrency slot (`AgentLoop::process`): it is a turn of
            // its own, which must not wait for this one. Like `/new`, the
            // command is not stored in the conversation.
            ctx.follow_up = Some(super::FollowUp::Dream);
            return Ok(TurnEvent::Shortcut);
        }
        Parsed::Known(Command::DreamLog) => core.dream.log_text(),
        Parsed::Known(Command::DreamRestore) => match commands::args(&ctx.inbound.content).trim_start_matches('#').parse::<u64>() {
            Ok(number) => core.dream.restore(number),
            Err(_) => "Usage: /dream-restore <n>, with n a run number from /dream-log.".to_string(),
        },
        Parsed::Known(Command::New) => {
            let ephemeral = ctx.ephemeral;
            let session = ctx.session_mut()?;
            let tail: Vec<Message> = session.recent().iter().filter(|m| !m.is_command()).cloned().collect();
            let cursor = session.messages.len();
            session.clear();
            if !ephemeral {
                // The cleared tail stays in the session until the archive
                // has it (`agent::archives`): the same save clears and keeps
                // it, so no crash loses the conversation from both.
                crate::agent::archives::push(session, tail, cursor);
                core.sessions.save(session)?;
                crate::crash_point!("new", &ctx.inbound.content);
                ctx.follow_up = Some(super::FollowUp::Archive);
            }
            ctx.outbound = Some(OutboundMessage::reply(&ctx.inbound.channel, &ctx.inbound.chat_id, NEW_SESSION_TEXT));
            return Ok(TurnEvent::Shortcut);
        }
    };
    let content = ctx.inbound.content.clone();
    let session = ctx.session_mut()?;
    session.push(Message::user(content).with_meta(COMMAND_MARKER, true));
    session.push(Message::assistant(reply.clone()).with_meta(COMMAND_MARKER, true));
    if !ctx.ephemeral {
        core.sessions.save(ctx.session_mut()?)?;
    }
    ctx.outbound = Some(OutboundMessage::reply(&ctx.inbound.channel, &ctx.inbound.chat_id, reply));
    Ok(TurnEvent::Shortcut)
}
