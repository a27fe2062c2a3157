//! The `agent-plugin` world: the `tool` export over `messaging`.

use crate::message::{self, MessageArgs};
use crate::spawn::{self, SpawnArgs};

wit_bindgen::generate!({ path: "../../wit/v0.2", world: "agent-plugin" });

use chitin::plugin::{agents, messaging};
use exports::chitin::plugin::tool::Guest;
use chitin::plugin::types::{CallContext, ToolError};

/// The manifest the host reads without running any code (wit/README.md).
#[used]
#[unsafe(link_section = "chitin:manifest")]
static MANIFEST: [u8; include_bytes!("../manifest.json").len()] = *include_bytes!("../manifest.json");

struct Agent;

impl Guest for Agent {
    fn invoke(name: String, args_json: String, _ctx: CallContext) -> Result<String, ToolError> {
        match name.as_str() {
            "message" => {
                let args = MessageArgs::parse(&args_json).map_err(ToolError::InvalidArgs)?;
                let request = messaging::Message { text: args.content, channel: args.channel, chat_id: args.chat_id, media: args.media };
                match messaging::send(&request) {
                    Ok(d) => Ok(message::sent_text(&d.channel, &d.chat_id, d.attachments)),
                    Err(e) if message::is_denial(&e) => Err(ToolError::Denied(e)),
                    Err(e) => Err(ToolError::Failed(e)),
                }
            }
            "spawn" => {
                let args = SpawnArgs::parse(&args_json).map_err(ToolError::InvalidArgs)?;
                match agents::spawn(&args.task, args.label.as_deref(), args.wait) {
                    Ok(s) if args.wait => Ok(spawn::waited_text(&s.label, state_name(s.state), s.answer.as_deref())),
                    Ok(s) => Ok(spawn::started_text(&s.label, &s.id)),
                    Err(e) if spawn::is_denial(&e) => Err(ToolError::Denied(e)),
                    Err(e) => Err(ToolError::Failed(e)),
                }
            }
            other => Err(ToolError::UnknownTool(format!("no tool `{other}` in plugin `agent`"))),
        }
    }
}

fn state_name(state: agents::SubagentState) -> &'static str {
    match state {
        agents::SubagentState::Running => "running",
        agents::SubagentState::Completed => "completed",
        agents::SubagentState::Failed => "failed",
        agents::SubagentState::Cancelled => "cancelled",
    }
}

export!(Agent);
