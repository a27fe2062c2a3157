//! The `agent-plugin` world: the `tool` export over `messaging` and `goals`.

use crate::cron::{self, CronArgs, JobText, Request};
use crate::goal::{self, Action, CreateArgs, UpdateArgs};
use crate::message::{self, MessageArgs};
use crate::spawn::{self, SpawnArgs};

wit_bindgen::generate!({ path: "../../wit/v0.2", world: "agent-plugin" });

use chitin::plugin::{agents, goals, messaging, schedule};
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
            "subagents" => match agents::status() {
                Ok(list) => Ok(spawn::status_text(&list.into_iter().map(|s| (s.label, s.id, s.elapsed_ms)).collect::<Vec<_>>())),
                Err(e) if spawn::is_denial(&e) => Err(ToolError::Denied(e)),
                Err(e) => Err(ToolError::Failed(e)),
            },
            "cron" => {
                let request = CronArgs::request(&args_json).map_err(ToolError::InvalidArgs)?;
                let refused = |e: String| if message::is_denial(&e) { ToolError::Denied(e) } else { ToolError::Failed(e) };
                match request {
                    Request::Add { name, message, when } => {
                        let when = match when {
                            cron::When::Every(secs) => schedule::When::EverySeconds(secs),
                            cron::When::Cron { expr, tz } => schedule::When::Cron(schedule::CronExpr { expr, tz }),
                            cron::When::At { time, tz } => schedule::When::At(schedule::AtTime { time, tz }),
                        };
                        let job = schedule::add_job(&schedule::JobSpec { name, message, when }).map_err(refused)?;
                        Ok(cron::added(&text(job)))
                    }
                    Request::List => Ok(cron::listed(&schedule::list_jobs().map_err(refused)?.into_iter().map(text).collect::<Vec<_>>())),
                    Request::Remove { id } => Ok(cron::removed(&text(schedule::remove_job(&id).map_err(refused)?))),
                }
            }
            "create_goal" => {
                let args = CreateArgs::parse(&args_json).map_err(ToolError::InvalidArgs)?;
                goals::create(&args.objective, args.ui_summary.as_deref()).map(|g| answer(&g)).map_err(refusal)
            }
            "update_goal" => {
                let args = UpdateArgs::parse(&args_json).map_err(ToolError::InvalidArgs)?;
                let action = match args.action {
                    Action::Complete => goals::GoalAction::Complete,
                    Action::Cancel => goals::GoalAction::Cancel,
                    Action::Block => goals::GoalAction::Block,
                    Action::Replace => goals::GoalAction::Replace,
                };
                goals::update(action, args.recap.as_deref(), args.objective.as_deref(), args.ui_summary.as_deref()).map(|g| answer(&g)).map_err(refusal)
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

fn text(job: schedule::Job) -> JobText {
    JobText { id: job.id, name: job.name, message: job.message, schedule: job.schedule, next_run: job.next_run }
}

fn answer(g: &goals::Goal) -> String {
    let status = match g.status {
        goals::GoalStatus::Active => "active",
        goals::GoalStatus::Complete => "complete",
        goals::GoalStatus::Cancelled => "cancelled",
        goals::GoalStatus::Blocked => "blocked",
    };
    goal::goal_text(status, &g.objective, g.recap.as_deref())
}

fn refusal(e: String) -> ToolError {
    if e.starts_with("capability not granted") { ToolError::Denied(e) } else { ToolError::Failed(e) }
}

export!(Agent);
