//! Privileged host interfaces (`wit/v0.2/privileged.wit`): what a plugin
//! may ask of the agent itself (send a message, ...), beyond the sandbox.
//!
//! Two keys open one: the plugin's manifest asks (`capabilities.host`) and
//! the user's config grants (`host = [...]` under `[plugins.<name>]`); the
//! grant is the lesser of the two ([`super::grants`]). The interfaces are
//! linked for every 0.2.0 tool plugin, so a component that imports one
//! without the grant still instantiates, and each call is refused with a
//! message naming the config key ([`not_granted`]).
//!
//! The plugin layer knows no bus, session or channel: it hands each call to
//! a [`HostServices`] the agent installs on the runtime, together with the
//! call's [`CallContext`] (which conversation the tool call belongs to, set
//! by the host, never by the plugin). Without services (`chitin tool call`,
//! a test runtime) a granted call fails with [`NO_SERVICES`].

use std::fmt;
use std::path::PathBuf;

use super::tool::CallContext;

/// A privileged interface a manifest may name in `capabilities.host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostInterface {
    /// `chitin:plugin/messaging`: send text and files to chats.
    Messaging,
    /// `chitin:plugin/schedule`: add, list and remove the conversation's
    /// scheduled jobs.
    Schedule,
    /// `chitin:plugin/goals`: create and update the session's sustained goal.
    Goals,
    /// `chitin:plugin/agents`: spawn subagents, list the running ones.
    Agents,
}

impl HostInterface {
    /// Every interface this host implements.
    pub const ALL: [HostInterface; 4] = [HostInterface::Messaging, HostInterface::Schedule, HostInterface::Goals, HostInterface::Agents];

    /// The name used in manifests and config.
    pub fn name(self) -> &'static str {
        match self {
            HostInterface::Messaging => "messaging",
            HostInterface::Schedule => "schedule",
            HostInterface::Goals => "goals",
            HostInterface::Agents => "agents",
        }
    }

    /// What it lets a plugin do, in words (for `chitin plugin inspect`).
    pub fn describe(self) -> &'static str {
        match self {
            HostInterface::Messaging => "send messages and workspace files to the current chat (and to chats listed in `chats`)",
            HostInterface::Schedule => "schedule messages to the current conversation (cron jobs that run the agent later)",
            HostInterface::Goals => "set and update the current session's sustained goal (the agent keeps working while it is active)",
            HostInterface::Agents => "start subagents (separate agent runs with the tools `[agent.subagents]` allows) and list the running ones",
        }
    }

    /// The interface called `name`.
    pub fn parse(name: &str) -> Result<HostInterface, String> {
        HostInterface::ALL.into_iter().find(|i| i.name() == name).ok_or_else(|| {
            let known: Vec<&str> = HostInterface::ALL.iter().map(|i| i.name()).collect();
            format!("unknown host interface `{name}` (this host has: {})", known.join(", "))
        })
    }
}

impl fmt::Display for HostInterface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The refusal of a call to an interface the plugin was not granted.
pub fn not_granted(plugin: &str, interface: HostInterface, asked: bool) -> String {
    if asked {
        format!("capability not granted: {interface} (the user grants it with `host = [\"{interface}\"]` under [plugins.{plugin}])")
    } else {
        format!("capability not granted: {interface} (plugin `{plugin}` does not declare it in its manifest's capabilities.host)")
    }
}

/// The refusal of a granted call where no agent runs (`chitin tool call`).
pub const NO_SERVICES: &str = "not available here: this call does not run inside an agent turn (no chat to send to)";

/// A message a plugin asks to send (`messaging.send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRequest {
    /// The message's text.
    pub text: String,
    /// `None`: the current conversation's channel.
    pub channel: Option<String>,
    /// `None`: the current chat.
    pub chat_id: Option<String>,
    /// Workspace-relative paths, unchecked.
    pub media: Vec<String>,
}

/// Where a message went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The channel it went to.
    pub channel: String,
    /// The chat's id on that channel.
    pub chat_id: String,
    /// Whether that is the current conversation's chat.
    pub current_chat: bool,
    /// The checked files, as the host will read them.
    pub attachments: Vec<PathBuf>,
}

/// When a scheduled job fires, as the plugin asked (unchecked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// Every this many seconds.
    EverySeconds(u32),
    /// A cron expression.
    Cron {
        /// The expression.
        expr: String,
        /// The IANA time zone it is read in, if given.
        tz: Option<String>,
    },
    /// Once, at a time.
    At {
        /// The time, as the plugin wrote it.
        time: String,
        /// The IANA time zone it is read in, if given.
        tz: Option<String>,
    },
}

/// A job a plugin asks to add (`schedule.add`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// The job's name.
    pub name: String,
    /// What the agent is told when it fires.
    pub message: String,
    /// When it fires.
    pub when: When,
}

/// A scheduled job as a plugin sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    /// The job's id.
    pub id: String,
    /// The job's name.
    pub name: String,
    /// What the agent is told when it fires.
    pub message: String,
    /// In words.
    pub schedule: String,
    /// RFC 3339.
    pub next_run: Option<String>,
}

/// Where a sustained goal stands (`goals.goal-status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// Being worked on.
    Active,
    /// Done.
    Complete,
    /// Cancelled (`goals.update` with `cancel`).
    Cancelled,
    /// Blocked: by the agent (`block`) or a goal budget that ran out.
    Blocked,
}

impl GoalStatus {
    /// The name shown to users and the model.
    pub fn name(self) -> &'static str {
        match self {
            GoalStatus::Active => "active",
            GoalStatus::Complete => "complete",
            GoalStatus::Cancelled => "cancelled",
            GoalStatus::Blocked => "blocked",
        }
    }
}

/// What `goals.update` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoalAction {
    /// Mark the goal complete.
    Complete,
    /// Cancel the goal.
    Cancel,
    /// Mark the goal blocked.
    Block,
    /// Replace the goal with a new objective.
    Replace,
}

/// A `goals.update` request, unchecked (the plugin's, so the model's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalUpdate {
    /// What to do.
    pub action: GoalAction,
    /// What was done.
    pub recap: Option<String>,
    /// Required for [`GoalAction::Replace`].
    pub objective: Option<String>,
    /// A new short label for status displays, if given.
    pub ui_summary: Option<String>,
}

/// A session's goal as a plugin sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalView {
    /// What the agent works towards.
    pub objective: String,
    /// A short label for status displays.
    pub ui_summary: Option<String>,
    /// Where the goal stands.
    pub status: GoalStatus,
    /// What was done, once the goal ended.
    pub recap: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// A subagent a plugin asks for (`agents.spawn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    /// What the subagent is to do (the model's text, unchecked).
    pub task: String,
    /// A label for people; `None`: made from the task.
    pub label: Option<String>,
    /// Run inline and return the answer, instead of in the background.
    pub wait: bool,
}

/// Where a subagent is (`agents.subagent-state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubagentState {
    /// Still running.
    Running,
    /// Finished with an answer.
    Completed,
    /// Ended with an error.
    Failed,
    /// Cancelled before it finished.
    Cancelled,
}

/// A subagent as reported to a plugin (`agents.subagent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentInfo {
    /// The subagent's task id.
    pub id: String,
    /// Its label.
    pub label: String,
    /// Where it is.
    pub state: SubagentState,
    /// Milliseconds since it started.
    pub elapsed_ms: u64,
    /// The answer of an inline (`wait`) run.
    pub result: Option<String>,
}

/// The future of an `agents.spawn`: a `wait` spawn resolves when the
/// subagent ends, which may be minutes.
pub type SpawnFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<SubagentInfo, String>> + Send>>;

/// What the agent does for the privileged interfaces. Errors are text for
/// the model: they say what was refused and what to change. Every method
/// but `send_message` has a default that refuses, so an implementor serves
/// only the interfaces it knows.
/// the model: they say what was refused and what to change.
///
/// Methods other than `send_message` have a default that refuses, so an
/// implementor serves only the interfaces it knows.
pub trait HostServices: Send + Sync {
    /// `messaging.send` from a plugin call in conversation `call`. `chats`
    /// is the plugin's grant of other chats (`channel:chat` or `channel:*`).
    fn send_message(&self, call: &CallContext, chats: &[String], request: SendRequest) -> Result<Delivery, String>;

    /// `schedule.add` for conversation `call`.
    fn add_job(&self, _call: &CallContext, _job: JobRequest) -> Result<JobView, String> {
        Err(format!("schedule: {NO_SERVICES}"))
    }

    /// `schedule.list`: the jobs of conversation `call`.
    fn list_jobs(&self, _call: &CallContext) -> Result<Vec<JobView>, String> {
        Err(format!("schedule: {NO_SERVICES}"))
    }

    /// `schedule.remove`: job `id` of conversation `call`.
    fn remove_job(&self, _call: &CallContext, _id: &str) -> Result<JobView, String> {
        Err(format!("schedule: {NO_SERVICES}"))
    }

    /// `goals.create` for the session of `call`.
    fn create_goal(&self, _call: &CallContext, _objective: String, _ui_summary: Option<String>) -> Result<GoalView, String> {
        Err(format!("{}: {NO_SERVICES}", HostInterface::Goals))
    }

    /// `goals.update` for the session of `call`.
    fn update_goal(&self, _call: &CallContext, _update: GoalUpdate) -> Result<GoalView, String> {
        Err(format!("{}: {NO_SERVICES}", HostInterface::Goals))
    }

    /// `agents.spawn` from a plugin call in conversation `call`.
    fn spawn_subagent(&self, call: &CallContext, request: SpawnRequest) -> SpawnFuture {
        let _ = (call, request);
        Box::pin(async { Err(format!("agents: {NO_SERVICES}")) })
    }

    /// `agents.status`: the running subagents of conversation `call`.
    fn subagent_status(&self, call: &CallContext) -> Result<Vec<SubagentInfo>, String> {
        let _ = call;
        Err(format!("agents: {NO_SERVICES}"))
    }
}

/// Whether `channel:chat` is admitted by one of `patterns` (`channel:chat`,
/// `channel:*`, or `*`).
pub fn chat_allowed(patterns: &[String], channel: &str, chat: &str) -> bool {
    patterns.iter().any(|p| match p.split_once(':') {
        _ if p == "*" => true,
        Some((c, "*")) => c == channel,
        Some((c, id)) => c == channel && id == chat,
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_parse_by_name_and_unknown_ones_list_the_known() {
        assert_eq!(HostInterface::parse("messaging"), Ok(HostInterface::Messaging));
        assert_eq!(HostInterface::parse("agents"), Ok(HostInterface::Agents));
        let e = HostInterface::parse("shell").unwrap_err();
        assert!(e.contains("unknown host interface `shell`") && e.contains("messaging"), "{e}");
    }

    #[test]
    fn chat_patterns_admit_what_they_name() {
        let p = vec!["telegram:*".to_string(), "web:42".to_string()];
        assert!(chat_allowed(&p, "telegram", "1"));
        assert!(chat_allowed(&p, "web", "42"));
        assert!(!chat_allowed(&p, "web", "43"));
        assert!(!chat_allowed(&p, "slack", "1"));
        assert!(chat_allowed(&["*".to_string()], "slack", "1"));
        assert!(!chat_allowed(&[], "telegram", "1"));
    }

    #[test]
    fn refusals_name_the_config_key_or_the_manifest() {
        let granted_not = not_granted("agent", HostInterface::Messaging, true);
        assert!(granted_not.starts_with("capability not granted: messaging") && granted_not.contains("[plugins.agent]"), "{granted_not}");
        assert!(not_granted("x", HostInterface::Messaging, false).contains("capabilities.host"));
    }
}
