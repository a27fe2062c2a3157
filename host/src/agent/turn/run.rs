//! RUN: hand the prepared messages to the `AgentRunner`, persisting each
//! checkpoint as it comes, and keep the result for SAVE.

use std::sync::{Arc, Mutex};

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::agent::runner::{AgentRunSpec, Checkpoint, InjectionSource};
use crate::bus::{OutboundKind, OutboundMessage};
use crate::plugins::CallContext;
use crate::session::RUNTIME_CHECKPOINT;

pub async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    core.bus.publish_outbound(OutboundMessage::event(&ctx.inbound, OutboundKind::Progress, "running"));
    let session = ctx.session.take().ok_or(TurnError::Missing { turn: ctx.session_key.clone(), state: ctx.state, missing: "a session" })?;
    // The checkpoint callback persists into the session while the runner
    // owns the turn; the session comes back out afterwards.
    let shared = Arc::new(Mutex::new(session));
    let checkpoint = (!ctx.ephemeral).then(|| {
        let shared = shared.clone();
        let sessions = core.sessions.clone();
        Arc::new(move |checkpoint: &Checkpoint| {
            let mut session = shared.lock().expect("session lock");
            match serde_json::to_value(checkpoint) {
                Ok(value) => session.set_meta(RUNTIME_CHECKPOINT, Some(value)),
                Err(e) => return tracing::warn!("checkpoint not serializable: {e}"),
            }
            if let Err(e) = sessions.save(&mut session) {
                tracing::warn!("checkpoint not saved: {e}");
            }
        }) as Arc<dyn Fn(&Checkpoint) + Send + Sync>
    });
    let spec = AgentRunSpec {
        initial_messages: ctx.initial_messages.clone(),
        tools: core.tools.clone(),
        model: core.settings.model.clone(),
        max_iterations: core.settings.max_iterations,
        max_tool_result_chars: core.settings.max_tool_result_chars,
        max_tokens: core.settings.max_tokens,
        temperature: core.settings.temperature,
        context_window: core.settings.context_window,
        llm_timeout: core.llm_timeout(),
        hooks: core.hooks.clone(),
        workspace: core.workspace.clone(),
        call_context: CallContext {
            session_key: ctx.session_key.clone(),
            channel: ctx.inbound.channel.clone(),
            chat_id: ctx.inbound.chat_id.clone(),
            call_id: String::new(),
        },
        checkpoint,
        injections: ctx.pending.clone().map(|p| p as Arc<dyn InjectionSource>),
        stream: ctx.stream.clone(),
    };
    let result = core.runner.run(&spec).await;
    drop(spec);
    let session = match Arc::try_unwrap(shared) {
        Ok(mutex) => mutex.into_inner().expect("session lock"),
        Err(shared) => shared.lock().expect("session lock").clone(),
    };
    ctx.session = Some(session);
    ctx.final_content = result.final_content.clone();
    ctx.tools_used = result.tools_used.clone();
    ctx.stop_reason = Some(result.stop_reason);
    ctx.had_injections = result.had_injections;
    ctx.run_result = Some(result);
    Ok(TurnEvent::Ok)
}
