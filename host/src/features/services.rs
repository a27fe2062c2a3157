//! The agent's side of the privileged host interfaces
//! ([`crate::plugins::services`]): what a granted plugin call may ask of
//! the running agent.
//!
//! `messaging.send` (the `message` tool): the message becomes an ordinary
//! outbound reply on the bus, so the gateway's router hands it to the
//! channel's queue (retries, rate limit, splitting) and the CLI prints it.
//! A send to the conversation the call belongs to is noted on its
//! [`ActiveTurn`]; RESPOND then drops the turn's own final reply unless the
//! user said something more after the send (the seed's RESPOND rule).
//!
//! Everything in a request is the model's: the target, the text and the
//! attachment paths are checked here (the chat against the grant, the files
//! through the [`Workspace`] handle: inside, regular, capped).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agent::active::ActiveTurns;
use crate::bus::{MessageBus, OutboundMessage, SYSTEM_CHANNEL};
use super::subagents::SubagentManager;
use crate::features::cron::{CronService, Job, JobSpec, Origin, Schedule};
use crate::plugins::services::{Delivery, GoalUpdate, GoalView, HostServices, JobRequest, JobView, SendRequest, SpawnFuture, SpawnRequest, SubagentInfo, When, chat_allowed};
use crate::plugins::CallContext;
use crate::workspace::Workspace;

/// Longest text one `message` call may send, in bytes (a channel splits it
/// to its platform's limit; this only keeps a runaway model in check).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Files one message may carry.
pub const MAX_ATTACHMENTS: usize = 10;

/// Largest attachment, in bytes.
pub const MAX_ATTACHMENT_BYTES: u64 = 50 << 20;

/// Serves the privileged interfaces for one agent.
pub struct AgentServices {
    bus: Arc<MessageBus>,
    active: Arc<ActiveTurns>,
    workspace: Workspace,
    /// The channels a message can reach in this process (`None`: any; the
    /// CLI has only `cli`, the gateway its front ends and channels).
    reachable: Option<Vec<String>>,
    /// `agents` (the `spawn` tool), where the agent has subagents.
    subagents: Option<Arc<SubagentManager>>,
    /// The scheduled jobs, where a process fires them (the gateway).
    cron: Option<Arc<CronService>>,
}

impl AgentServices {
    /// The services over `bus`, the running turns and the workspace; the
    /// reachable channels, subagents and cron service are set later.
    pub fn new(bus: Arc<MessageBus>, active: Arc<ActiveTurns>, workspace: Workspace) -> Self {
        AgentServices { bus, active, workspace, reachable: None, subagents: None, cron: None }
    }

    /// Serves `agents` with `manager`.
    pub fn with_subagents(mut self, manager: Arc<SubagentManager>) -> Self {
        self.subagents = Some(manager);
        self
    }

    /// The subagents, when `agents` is served.
    pub fn subagents(&self) -> Option<&Arc<SubagentManager>> {
        self.subagents.as_ref()
    }

    /// Only `channels` can be reached from here: a send to another is
    /// refused instead of being queued for nobody.
    pub fn with_reachable(mut self, channels: Vec<String>) -> Self {
        self.reachable = Some(channels);
        self
    }

    /// Serves `schedule` from `cron` (the gateway, which fires the jobs).
    pub fn with_cron(mut self, cron: Arc<CronService>) -> Self {
        self.cron = Some(cron);
        self
    }

    fn cron(&self) -> Result<Arc<CronService>, String> {
        self.cron.clone().ok_or_else(|| {
            "scheduled jobs run in `chitin gateway`; they are not available here (a one-shot `chitin agent` has no chat to come back to)".to_string()
        })
    }

    /// The checked attachment: `rel` inside the workspace, a regular file
    /// within [`MAX_ATTACHMENT_BYTES`].
    fn attachment(&self, rel: &str) -> Result<PathBuf, String> {
        let shown = crate::text::clip_for_terminal(rel, 200, "path");
        let path = Path::new(rel);
        if path.is_absolute() {
            return Err(format!("attachment `{shown}`: give a path relative to the workspace"));
        }
        match self.workspace.file_metadata(path) {
            Ok(Some(meta)) if meta.len() > MAX_ATTACHMENT_BYTES => {
                Err(format!("attachment `{shown}` is {} MiB; the limit is {} MiB", meta.len() >> 20, MAX_ATTACHMENT_BYTES >> 20))
            }
            Ok(Some(_)) => Ok(self.workspace.root().join(path)),
            Ok(None) => Err(format!("attachment `{shown}` does not exist in the workspace")),
            Err(e) => Err(format!("attachment `{shown}`: {e}")),
        }
    }
}

impl HostServices for AgentServices {
    fn send_message(&self, call: &CallContext, chats: &[String], request: SendRequest) -> Result<Delivery, String> {
        let channel = request.channel.filter(|c| !c.is_empty()).unwrap_or_else(|| call.channel.clone());
        let chat_id = match request.chat_id.filter(|c| !c.is_empty()) {
            Some(chat) => chat,
            None if channel == call.channel => call.chat_id.clone(),
            None => return Err(format!("no chat_id given for channel `{}`: name the chat to send to", crate::text::clip_for_terminal(&channel, 64, "channel"))),
        };
        let current_chat = channel == call.channel && chat_id == call.chat_id;
        let target = crate::text::clip_for_terminal(&format!("{channel}:{chat_id}"), 200, "target");
        if channel == SYSTEM_CHANNEL {
            return Err("the `system` channel is reserved for internal messages".into());
        }
        if !current_chat && !chat_allowed(chats, &channel, &chat_id) {
            return Err(format!(
                "not allowed to send to {target}: only the current chat ({}:{}) unless the user lists the chat in `chats` of the plugin's [plugins.<name>] table",
                call.channel, call.chat_id
            ));
        }
        if let Some(reachable) = &self.reachable
            && !reachable.contains(&channel)
        {
            return Err(format!(
                "channel `{}` is not running here (reachable: {}); sending to it needs `chitin gateway` with that channel enabled",
                crate::text::clip_for_terminal(&channel, 64, "channel"),
                reachable.join(", ")
            ));
        }
        if request.text.trim().is_empty() && request.media.is_empty() {
            return Err("nothing to send: give content or media".into());
        }
        if request.text.len() > MAX_MESSAGE_BYTES {
            return Err(format!("the message is {} bytes; the limit is {MAX_MESSAGE_BYTES}: send a shorter one or a file", request.text.len()));
        }
        if request.media.len() > MAX_ATTACHMENTS {
            return Err(format!("{} attachments; at most {MAX_ATTACHMENTS} per message", request.media.len()));
        }
        let attachments = request.media.iter().map(|rel| self.attachment(rel)).collect::<Result<Vec<_>, _>>()?;
        let mut message = OutboundMessage::reply(&channel, &chat_id, request.text);
        message.media = attachments.clone();
        message.kind = crate::bus::OutboundKind::Message(crate::bus::Reply { via_tool: true, ..Default::default() });
        if current_chat && let Some(turn) = self.active.get(&call.session_key) {
            turn.note_sent_to_chat();
        }
        self.bus.publish_outbound(message);
        tracing::info!(session = %call.session_key, %target, attachments = attachments.len(), "message tool: message queued");
        Ok(Delivery { channel, chat_id, current_chat, attachments })
    }

    fn spawn_subagent(&self, call: &CallContext, request: SpawnRequest) -> SpawnFuture {
        match &self.subagents {
            Some(manager) => manager.spawn(call, request),
            None => Box::pin(async { Err("agents: subagents are not set up in this process".to_string()) }),
        }
    }

    fn subagent_status(&self, call: &CallContext) -> Result<Vec<SubagentInfo>, String> {
        let manager = self.subagents.as_ref().ok_or("agents: subagents are not set up in this process")?;
        Ok(manager.running_in(&call.session_key))
    }

    fn add_job(&self, call: &CallContext, job: JobRequest) -> Result<JobView, String> {
        let cron = self.cron()?;
        if call.channel == crate::bus::API_CHANNEL || call.channel == SYSTEM_CHANNEL {
            return Err(format!("a `{}` conversation has no chat to deliver a scheduled job's answer to", call.channel));
        }
        let schedule = match job.when {
            When::EverySeconds(secs) => Schedule::every(u64::from(secs)),
            When::Cron { expr, tz } => Schedule::cron(&expr, tz.as_deref()),
            When::At { time, tz } => Schedule::at(&time, tz.as_deref(), cron.now()),
        }
        .map_err(|e| e.0)?;
        let origin = Origin { session_key: call.session_key.clone(), channel: call.channel.clone(), chat_id: call.chat_id.clone() };
        cron.add(JobSpec { name: job.name, message: job.message, schedule }, &origin).map(|j| job_view(&j)).map_err(|e| e.to_string())
    }

    fn list_jobs(&self, call: &CallContext) -> Result<Vec<JobView>, String> {
        Ok(self.cron()?.list(&call.session_key).iter().map(job_view).collect())
    }

    fn remove_job(&self, call: &CallContext, id: &str) -> Result<JobView, String> {
        self.cron()?.remove(&call.session_key, id).map(|j| job_view(&j)).map_err(|e| e.to_string())
    }

    /// `goals.create`: on the running turn's goal ([`super::goals`]).
    fn create_goal(&self, call: &CallContext, objective: String, ui_summary: Option<String>) -> Result<GoalView, String> {
        let goal = self.goal_slot(call)?.create(objective, ui_summary)?;
        tracing::info!(session = %call.session_key, "goal created");
        Ok(goal.view())
    }

    /// `goals.update`: on the running turn's goal.
    fn update_goal(&self, call: &CallContext, update: GoalUpdate) -> Result<GoalView, String> {
        let action = update.action;
        let goal = self.goal_slot(call)?.update(update)?;
        tracing::info!(session = %call.session_key, ?action, status = goal.status.name(), "goal updated");
        Ok(goal.view())
    }
}

impl AgentServices {
    /// The goal of the turn `call` belongs to: a goal is changed only from
    /// inside its session's turn.
    fn goal_slot(&self, call: &CallContext) -> Result<Arc<crate::agent::goal::GoalSlot>, String> {
        self.active.get(&call.session_key).map(|turn| turn.goal.clone()).ok_or_else(|| format!("goals: {}", crate::plugins::services::NO_SERVICES))
    }
}

fn job_view(job: &Job) -> JobView {
    JobView {
        id: job.id.clone(),
        name: job.name.clone(),
        message: job.message.clone(),
        schedule: job.schedule.describe(),
        next_run: job.next_run.map(|t| t.to_rfc3339()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::active::ActiveTurn;
    use crate::agent::pending::PendingQueue;
    use crate::bus::InboundMessage;

    fn call() -> CallContext {
        CallContext { session_key: "telegram:1".into(), channel: "telegram".into(), chat_id: "1".into(), call_id: "c".into() }
    }

    fn services() -> (tempfile::TempDir, Arc<MessageBus>, Arc<ActiveTurns>, AgentServices) {
        let dir = tempfile::tempdir().unwrap();
        let bus = Arc::new(MessageBus::new());
        let active = Arc::new(ActiveTurns::default());
        let services = AgentServices::new(bus.clone(), active.clone(), Workspace::open(dir.path()).unwrap());
        (dir, bus, active, services)
    }

    fn send(text: &str) -> SendRequest {
        SendRequest { text: text.into(), channel: None, chat_id: None, media: vec![] }
    }

    #[tokio::test]
    async fn a_send_to_the_current_chat_is_queued_and_noted_on_the_turn() {
        let (_dir, bus, active, services) = services();
        let turn = Arc::new(ActiveTurn::new(Arc::new(PendingQueue::new(4))));
        active.insert("telegram:1", turn.clone());
        let delivery = services.send_message(&call(), &[], send("hello")).unwrap();
        assert!(delivery.current_chat);
        assert!(turn.reply_suppressed());
        let out = bus.consume_outbound().await.unwrap();
        assert_eq!((out.channel.as_str(), out.chat_id.as_str(), out.content.as_str()), ("telegram", "1", "hello"));
        assert!(out.kind.reply().expect("a message").via_tool, "marked as sent by the message tool");

        // Something injected after the send lifts the suppression.
        turn.pending.try_push(InboundMessage::new("telegram", "u", "1", "and also?")).unwrap();
        use crate::agent::runner::InjectionSource;
        assert_eq!(turn.pending.drain(3).len(), 1);
        assert!(!turn.reply_suppressed());
    }

    #[test]
    fn other_chats_need_the_grant_and_the_system_channel_is_refused() {
        let (_dir, _bus, _active, services) = services();
        let to = |channel: &str, chat: &str| SendRequest { channel: Some(channel.into()), chat_id: Some(chat.into()), ..send("x") };
        let e = services.send_message(&call(), &[], to("telegram", "2")).unwrap_err();
        assert!(e.contains("not allowed to send to telegram:2") && e.contains("chats"), "{e}");
        let ok = services.send_message(&call(), &["telegram:*".into()], to("telegram", "2")).unwrap();
        assert!(!ok.current_chat);
        assert!(services.send_message(&call(), &["*".into()], to("system", "x")).unwrap_err().contains("reserved"));
        let e = services.send_message(&call(), &["*".into()], SendRequest { channel: Some("web".into()), ..send("x") }).unwrap_err();
        assert!(e.contains("no chat_id"), "{e}");
        assert!(services.send_message(&call(), &[], send("  ")).unwrap_err().contains("nothing to send"));
        let services = services.with_reachable(vec!["telegram".into()]);
        let e = services.send_message(&call(), &["*".into()], to("web", "1")).unwrap_err();
        assert!(e.contains("`web` is not running here") && e.contains("chitin gateway"), "{e}");
        assert!(services.send_message(&call(), &["*".into()], to("telegram", "9")).is_ok());
    }

    #[test]
    fn attachments_must_be_regular_files_inside_the_workspace() {
        let (dir, _bus, _active, services) = services();
        std::fs::write(dir.path().join("report.txt"), "r").unwrap();
        let with = |paths: &[&str]| SendRequest { media: paths.iter().map(|p| p.to_string()).collect(), ..send("see") };
        let ok = services.send_message(&call(), &[], with(&["report.txt"])).unwrap();
        assert_eq!(ok.attachments, [dir.path().join("report.txt")]);
        for (path, expect) in [("/etc/passwd", "relative"), ("../x", "attachment"), ("missing.txt", "does not exist"), (".", "attachment")] {
            let e = services.send_message(&call(), &[], with(&[path])).unwrap_err();
            assert!(e.contains(expect), "{path}: {e}");
        }
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        assert!(services.send_message(&call(), &[], with(&["link"])).is_err(), "a link out of the workspace is refused");
    }
}
