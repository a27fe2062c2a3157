//! COMMAND: slash commands. A handled command is a shortcut to DONE; it and
//! its reply are saved with the `_command` marker (never replayed to the
//! model), except `/new`, which empties the session.

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::commands::{self, Command, Parsed};
use crate::agent::core::AgentCore;
use crate::agent::hooks::{CommandCall, CommandReply};
use crate::bus::OutboundMessage;
use crate::session::{COMMAND_MARKER, Message};

/// Reply to `/new`.
pub(super) const NEW_SESSION_TEXT: &str = "Started a new conversation. The previous one is archived.";

pub(super) async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    // A resumed turn passed COMMAND before its process died.
    if ctx.resume {
        return Ok(TurnEvent::Dispatch);
    }
    // A SYSTEM turn (a subagent's result) is never a command. The session
    // takes each result once: a second delivery ends here, unanswered.
    if ctx.inbound.channel == crate::bus::SYSTEM_CHANNEL {
        if let Some(id) = crate::bus::subagent_task_id(&ctx.inbound).map(str::to_string)
            && crate::session::holds_subagent_result(ctx.session_mut()?, &id)
        {
            tracing::info!(session = %ctx.session_key, subagent = %id, "subagent result already in the session; not handled again");
            return Ok(TurnEvent::Shortcut);
        }
        return Ok(TurnEvent::Dispatch);
    }
    if ctx.internal {
        return Ok(TurnEvent::Dispatch);
    }
    let reply = match core.commands.parse(&ctx.inbound.content) {
        Parsed::NotACommand => return Ok(TurnEvent::Dispatch),
        Parsed::Unknown { name, suggestion } => commands::unknown_text(&name, suggestion),
        Parsed::Known(Command::Help) => core.commands.help_text(),
        Parsed::Known(Command::Status) => core.status_text(ctx.session_mut()?),
        // A /stop that reaches a turn found no turn running (a running turn
        // is stopped by the loop before any lock is taken); subagents of the
        // session may still be.
        Parsed::Known(Command::Stop) => match core.subagents.as_ref().map(|m| m.cancel_session(&ctx.session_key)).unwrap_or(0) {
            0 => "No task is running.".to_string(),
            n => format!("Stopped {n} subagent(s)."),
        },
        Parsed::Registered(name) => {
            let handler = core.commands.get(name).expect("parsed from the registry").clone();
            let args = commands::args(&ctx.inbound.content).to_string();
            let ephemeral = ctx.ephemeral;
            let call = CommandCall { core, args: &args, session: ctx.session_mut()?, ephemeral };
            match handler.handle(call)? {
                CommandReply::Reply(text) => text,
                CommandReply::Dispatch => {
                    tracing::info!(session = %ctx.session_key, command = name, "command handled; the message goes on to the model");
                    return Ok(TurnEvent::Dispatch);
                }
                CommandReply::AfterTurn(work) => {
                    // The work runs after this turn has let go of the
                    // session's lock and its concurrency slot
                    // (`AgentLoop::process`): it may run turns of its own,
                    // which must not wait for this one. Like `/new`, the
                    // command is not stored in the conversation.
                    ctx.follow_up = Some(super::FollowUp::Command(work));
                    return Ok(TurnEvent::Shortcut);
                }
            }
        }
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
