//! `chitin:plugin/host` of package version 0.2.0, and the privileged
//! interfaces (`messaging`, `agents`, `schedule`, `goals`) with their WIT
//! conversions: each call checks the grant first.

use std::sync::Arc;

use super::{MAX_PRIVILEGED_CALLS, StoreState};
use crate::plugins::bindings::v0_2;
use crate::plugins::services::{self, GoalAction, GoalStatus, GoalUpdate, GoalView, HostInterface, HostServices, SendRequest, SpawnRequest, SubagentInfo, SubagentState};
use crate::plugins::tool::CallContext;

impl v0_2::tool::chitin::plugin::types::Host for StoreState {}

impl v0_2::tool::chitin::plugin::host::Host for StoreState {
    fn log(&mut self, level: v0_2::LogLevel, message: String) {
        use v0_2::LogLevel as L;
        let level = match level {
            L::Trace => tracing::Level::TRACE,
            L::Debug => tracing::Level::DEBUG,
            L::Info => tracing::Level::INFO,
            L::Warn => tracing::Level::WARN,
            L::Error => tracing::Level::ERROR,
        };
        self.host_log(level, &message);
    }

    fn progress(&mut self, text: String) {
        self.host_progress(&text);
    }
}

impl StoreState {
    /// The services for a call to `interface`, or the refusal to give the
    /// guest: not granted, or no agent behind the call.
    fn privileged_call(&mut self, interface: HostInterface) -> Result<(Arc<dyn HostServices>, CallContext), String> {
        let plugin = &*self.host.plugin;
        let p = &mut self.privileged;
        if !p.granted.contains(&interface) {
            // Logged once per tool call: a guest calling in a loop must not
            // flood the log either.
            if !std::mem::replace(&mut p.refusal_logged, true) {
                tracing::warn!(plugin, %interface, "privileged call refused: not granted");
            }
            return Err(services::not_granted(plugin, interface, p.asked.contains(&interface)));
        }
        if p.calls >= MAX_PRIVILEGED_CALLS {
            if !std::mem::replace(&mut p.refusal_logged, true) {
                tracing::warn!(plugin, %interface, "privileged calls refused: over {MAX_PRIVILEGED_CALLS} in one tool call");
            }
            return Err(format!("{interface}: more than {MAX_PRIVILEGED_CALLS} privileged calls in one tool call; refused"));
        }
        p.calls += 1;
        match (&p.services, &p.call) {
            (Some(services), Some(call)) => Ok((services.clone(), call.clone())),
            _ => Err(format!("{interface}: {}", services::NO_SERVICES)),
        }
    }
}

impl v0_2::messaging::Host for StoreState {
    fn send(&mut self, message: v0_2::messaging::Message) -> Result<v0_2::messaging::Delivery, String> {
        let (services, call) = self.privileged_call(HostInterface::Messaging)?;
        let request = SendRequest { text: message.text, channel: message.channel, chat_id: message.chat_id, media: message.media };
        let delivery = services.send_message(&call, &self.privileged.chats, request)?;
        Ok(v0_2::messaging::Delivery {
            channel: delivery.channel,
            chat_id: delivery.chat_id,
            current_chat: delivery.current_chat,
            attachments: delivery.attachments.len() as u32,
        })
    }
}

impl v0_2::agents::Host for StoreState {
    async fn spawn(&mut self, task: String, label: Option<String>, wait: bool) -> Result<v0_2::agents::Subagent, String> {
        let (services, call) = self.privileged_call(HostInterface::Agents)?;
        let future = services.spawn_subagent(&call, SpawnRequest { task, label, wait });
        // Waiting for a subagent is not the plugin's time.
        let _paused = wait.then(|| self.clock.pause());
        future.await.map(wit_subagent)
    }

    fn status(&mut self) -> Result<Vec<v0_2::agents::Subagent>, String> {
        let (services, call) = self.privileged_call(HostInterface::Agents)?;
        Ok(services.subagent_status(&call)?.into_iter().map(wit_subagent).collect())
    }
}

fn wit_subagent(info: SubagentInfo) -> v0_2::agents::Subagent {
    use v0_2::agents::SubagentState as W;
    v0_2::agents::Subagent {
        id: info.id,
        label: info.label,
        state: match info.state {
            SubagentState::Running => W::Running,
            SubagentState::Completed => W::Completed,
            SubagentState::Failed => W::Failed,
            SubagentState::Cancelled => W::Cancelled,
        },
        elapsed_ms: info.elapsed_ms,
        answer: info.result,
    }
}

impl v0_2::schedule::Host for StoreState {
    fn add_job(&mut self, job: v0_2::schedule::JobSpec) -> Result<v0_2::schedule::Job, String> {
        use v0_2::schedule::When as W;
        let (services, call) = self.privileged_call(HostInterface::Schedule)?;
        let when = match job.when {
            W::EverySeconds(secs) => services::When::EverySeconds(secs),
            W::Cron(c) => services::When::Cron { expr: c.expr, tz: c.tz },
            W::At(a) => services::When::At { time: a.time, tz: a.tz },
        };
        services.add_job(&call, services::JobRequest { name: job.name, message: job.message, when }).map(wit_job)
    }

    fn list_jobs(&mut self) -> Result<Vec<v0_2::schedule::Job>, String> {
        let (services, call) = self.privileged_call(HostInterface::Schedule)?;
        Ok(services.list_jobs(&call)?.into_iter().map(wit_job).collect())
    }

    fn remove_job(&mut self, id: String) -> Result<v0_2::schedule::Job, String> {
        let (services, call) = self.privileged_call(HostInterface::Schedule)?;
        services.remove_job(&call, &id).map(wit_job)
    }
}

fn wit_job(job: services::JobView) -> v0_2::schedule::Job {
    v0_2::schedule::Job { id: job.id, name: job.name, message: job.message, schedule: job.schedule, next_run: job.next_run }
}

impl v0_2::goals::Host for StoreState {
    fn create(&mut self, objective: String, ui_summary: Option<String>) -> Result<v0_2::goals::Goal, String> {
        let (services, call) = self.privileged_call(HostInterface::Goals)?;
        services.create_goal(&call, objective, ui_summary).map(wit_goal)
    }

    fn update(
        &mut self,
        action: v0_2::goals::GoalAction,
        recap: Option<String>,
        objective: Option<String>,
        ui_summary: Option<String>,
    ) -> Result<v0_2::goals::Goal, String> {
        let (services, call) = self.privileged_call(HostInterface::Goals)?;
        use v0_2::goals::GoalAction as W;
        let action = match action {
            W::Complete => GoalAction::Complete,
            W::Cancel => GoalAction::Cancel,
            W::Block => GoalAction::Block,
            W::Replace => GoalAction::Replace,
        };
        services.update_goal(&call, GoalUpdate { action, recap, objective, ui_summary }).map(wit_goal)
    }
}

fn wit_goal(goal: GoalView) -> v0_2::goals::Goal {
    use v0_2::goals::GoalStatus as W;
    let status = match goal.status {
        GoalStatus::Active => W::Active,
        GoalStatus::Complete => W::Complete,
        GoalStatus::Cancelled => W::Cancelled,
        GoalStatus::Blocked => W::Blocked,
    };
    v0_2::goals::Goal {
        objective: goal.objective,
        ui_summary: goal.ui_summary,
        status,
        recap: goal.recap,
        created_at: goal.created_at,
        updated_at: goal.updated_at,
    }
}
