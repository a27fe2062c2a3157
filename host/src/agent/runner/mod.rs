//! `AgentRunner`: the ReAct loop (spec §5). Channel- and session-agnostic:
//! it gets an [`AgentRunSpec`], talks to the provider and the tools, and
//! returns an [`AgentRunResult`]. Persistence happens through checkpoints;
//! what a user sees while it runs (streamed text, tool starts, plugin
//! progress) goes to the spec's [`crate::agent::sink::TurnSink`].
//!
//! One iteration: governance on a copy → request → either run the tool calls
//! (checkpointing before and after) and go on, or finish: retry a blank
//! answer, continue a `length`-cut one, take injected messages, or stop.

mod execute;
pub mod governance;
mod spec;

use std::sync::Arc;

use crate::provider::{ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, Usage};
use crate::session::{Message, Role, ToolCall};

pub use spec::{AgentRunResult, AgentRunSpec, Checkpoint, CheckpointPhase, CheckpointView, GoalDriver, GoalStep, InjectionSource, StopReason, ToolEvent};

use execute::{Guards, run_calls};
use governance::{Governance, input_budget};

/// Messages taken from the injection queue at one drain.
pub const INJECTIONS_PER_DRAIN: usize = 3;

/// Drains that may extend one run.
pub const INJECTION_CYCLES: usize = 5;

/// Continuations requested for a `length`-cut answer.
pub const LENGTH_CONTINUATIONS: usize = 3;

/// Stored in history instead of a provider error, so the next turn's model
/// does not see (and repeat) an error text as its own words.
pub const ERROR_PLACEHOLDER: &str = "(No answer: the request to the model failed.)";

const CONTINUE_PROMPT: &str = "Your previous answer was cut off by the length limit. Continue exactly where it stopped, without repeating anything.";
const ANSWER_NOW_PROMPT: &str = "Answer the user now from the conversation above, in plain text.";

/// Runs agent loops against one provider.
#[derive(Clone)]
pub struct AgentRunner {
    provider: Arc<dyn Provider>,
}

/// The mutable state of one run.
struct Run<'a> {
    spec: &'a AgentRunSpec,
    messages: Vec<Message>,
    run_start: usize,
    usage: Usage,
    tools_used: Vec<String>,
    tool_events: Vec<ToolEvent>,
    governance: Governance,
    guards: Guards,
    had_injections: bool,
    injection_cycles: usize,
    budget: usize,
}

impl AgentRunner {
    /// A runner over `provider`.
    pub fn new(provider: Arc<dyn Provider>) -> Self {
        AgentRunner { provider }
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// Runs the loop to its end.
    pub async fn run(&self, spec: &AgentRunSpec) -> AgentRunResult {
        spec.sink.run_started();
        let mut run = Run {
            spec,
            messages: spec.initial_messages.clone(),
            run_start: spec.initial_messages.len(),
            usage: Usage::default(),
            tools_used: Vec::new(),
            tool_events: Vec::new(),
            governance: Governance::default(),
            guards: Guards::default(),
            had_injections: false,
            injection_cycles: 0,
            budget: input_budget(spec.model.context_window, spec.model.max_output_tokens),
        };
        // When the prompt may be near the budget this counts the starting
        // messages on the originals, which remember their counts: the copies
        // made for each request inherit them. Far below, nothing is counted.
        crate::tokens::over_limit(&run.messages, &spec.tools, run.budget);
        self.iterate(&mut run).await
    }

    async fn iterate(&self, run: &mut Run<'_>) -> AgentRunResult {
        let spec = run.spec;
        for iteration in 0..spec.max_iterations {
            let response = self.request(run, true).await;
            if response.is_error() {
                return run.fail(response.error);
            }
            if let Some(reasoning) = &response.reasoning {
                spec.sink.reasoning(reasoning);
            }
            let named = |c: &ToolCall| !c.function.name.trim().is_empty();
            let wants_tools = matches!(response.finish_reason, Some(FinishReason::ToolCalls) | Some(FinishReason::Stop) | None);
            if wants_tools && response.tool_calls.iter().any(named) {
                // Moved, not cloned: the arguments may be megabytes.
                let mut response = response;
                let calls: Vec<ToolCall> = std::mem::take(&mut response.tool_calls).into_iter().filter(named).collect();
                let message = with_reasoning(Message::assistant_calls(response.content.take().filter(|c| !c.trim().is_empty()), Vec::new()), &mut response);
                if let Some(crash) = self.run_tools(run, iteration, message, calls).await {
                    let text = format!("Error: {crash}");
                    run.messages.push(Message::assistant(text.clone()));
                    run.checkpoint(CheckpointPhase::FinalResponse, iteration, &[]);
                    let mut result = run.finish(Some(text), StopReason::ToolError);
                    result.error = Some(crash);
                    return result;
                }
                run.inject(INJECTIONS_PER_DRAIN);
                continue;
            }
            let mut response = response;
            let kept = with_reasoning(Message::assistant(""), &mut response);
            let answer = match self.finish_answer(run, response).await {
                Ok(Some(text)) => text,
                Ok(None) => return run.finish(None, StopReason::EmptyFinalResponse),
                Err(error) => return run.fail(Some(error)),
            };
            run.messages.push(Message { content: Some(answer.clone()), ..kept });
            if run.inject(INJECTIONS_PER_DRAIN) {
                continue;
            }
            // Subagents of this session still run: the turn stays alive for
            // their results rather than end and start another turn for each.
            if run.wait_for_injections().await && run.inject(INJECTIONS_PER_DRAIN) {
                continue;
            }
            let mut answer = answer;
            match spec.goal.as_ref().map(|g| g.after_answer()) {
                Some(GoalStep::Continue(prompt)) => {
                    // A continuation boundary: the interim answer and the
                    // reminder are checkpointed together, so a crash resumes
                    // after them.
                    spec.sink.interim_answer(&answer);
                    run.messages.push(Message::user(prompt).with_meta(crate::agent::goal::GOAL_CONTINUATION, true));
                    run.checkpoint(CheckpointPhase::FinalResponse, iteration, &[]);
                    continue;
                }
                Some(GoalStep::Stop(note)) => {
                    answer = format!("{answer}\n\n{note}");
                    if let Some(last) = run.messages.last_mut() {
                        last.content = Some(answer.clone());
                    }
                }
                Some(GoalStep::Finish) | None => {}
            }
            run.checkpoint(CheckpointPhase::FinalResponse, iteration, &[]);
            return run.finish(Some(answer), StopReason::Completed);
        }
        self.finalize_at_limit(run).await
    }

    /// Runs `calls` again after a restart (read-only calls that were in
    /// flight when the process died; RESTORE picked them), with the run's
    /// guards and sink, and returns one tool result per call, in order.
    pub async fn rerun_calls(&self, spec: &AgentRunSpec, calls: &[ToolCall]) -> Vec<Message> {
        let refusals: Vec<Option<String>> = calls.iter().map(|_| None).collect();
        let outcomes = run_calls(spec, calls, refusals, &mut Guards::default()).await;
        calls.iter().zip(outcomes).map(|(call, outcome)| Message::tool_result(&call.id, &call.function.name, outcome.text)).collect()
    }

    /// One model request over the governed copy of the conversation.
    async fn request(&self, run: &mut Run<'_>, with_tools: bool) -> ChatResponse {
        self.request_with(run, with_tools, &[]).await
    }

    async fn request_with(&self, run: &mut Run<'_>, with_tools: bool, extra: &[Message]) -> ChatResponse {
        let spec = run.spec;
        let (tools, tools_tokens): (Arc<[serde_json::Value]>, &dyn crate::tokens::Counted) =
            if with_tools { (spec.tools.shared_definitions(), &spec.tools) } else { (Arc::from([]), &0) };
        let registry = &spec.tools;
        let mut messages = run.governance.prepare(&run.messages, tools_tokens, run.budget, run.run_start, |name| {
            registry.spec(name).is_some_and(|s| s.read_only)
        });
        messages.extend(extra.iter().cloned());
        let request = ChatRequest { model: spec.model.model.clone(), messages, tools, max_tokens: spec.model.max_output_tokens, temperature: spec.temperature };
        let response = match tokio::time::timeout(spec.llm_timeout, self.provider.chat(&request, deltas(spec))).await {
            Ok(response) => response,
            Err(_) => ChatResponse::failed(ProviderError {
                status: None,
                retryable: true,
                message: format!("the model did not answer within {} s (llm_timeout)", spec.llm_timeout.as_secs()),
            }),
        };
        run.usage += response.usage;
        if let Some(handle) = &response.answered_by {
            // The fallback may have a smaller window: the next requests of
            // this run are governed to it (the primary is tried first again,
            // so the budget is the smaller of the two).
            let budget = input_budget(handle.context_window, handle.max_output_tokens.min(spec.model.max_output_tokens));
            if budget < run.budget {
                tracing::info!(model = %handle.label(), budget, "a fallback model with a smaller context window answered; the run keeps within it");
                run.budget = budget;
            }
        }
        response
    }

    /// Appends the assistant's calls, runs them, appends the results, with a
    /// checkpoint before and after. Calls over the arguments cap are
    /// bounded first: they are refused, and only their bounded form is kept.
    /// Returns the first crash when the spec makes crashes fatal.
    async fn run_tools(&self, run: &mut Run<'_>, iteration: usize, message: Message, mut calls: Vec<ToolCall>) -> Option<String> {
        let refusals: Vec<Option<String>> = calls.iter_mut().map(|call| bound_call(call, run.spec.max_tool_args_bytes)).collect();
        run.messages.push(Message { tool_calls: calls.clone(), ..message });
        run.checkpoint(CheckpointPhase::AwaitingTools, iteration, &calls);
        let outcomes = run_calls(run.spec, &calls, refusals, &mut run.guards).await;
        let mut crash = None;
        for (call, outcome) in calls.iter().zip(outcomes) {
            if outcome.crashed && run.spec.fail_on_tool_error && crash.is_none() {
                crash = outcome.text.split("\n\n[Analyze").next().map(|t| t.trim_start_matches("Error: ").to_string());
            }
            run.tools_used.push(call.function.name.clone());
            run.messages.push(Message::tool_result(&call.id, &call.function.name, outcome.text));
            run.tool_events.push(outcome.event);
        }
        run.checkpoint(CheckpointPhase::ToolsCompleted, iteration, &[]);
        crash
    }

    /// Turns a no-tools response into the final text: blank answers get a
    /// retry and then one no-tools "answer now" request; a `length` cut gets
    /// up to three continuations. `Ok(None)`: still blank.
    async fn finish_answer(&self, run: &mut Run<'_>, mut response: ChatResponse) -> Result<Option<String>, ProviderError> {
        if is_blank(&response) {
            response = self.request(run, true).await;
            if response.is_error() {
                return Err(response.error.unwrap_or_else(unknown_error));
            }
        }
        if is_blank(&response) {
            response = self.request_with(run, false, &[Message::user(ANSWER_NOW_PROMPT)]).await;
            if response.is_error() {
                return Err(response.error.unwrap_or_else(unknown_error));
            }
            if is_blank(&response) {
                return Ok(None);
            }
        }
        let mut parts = vec![response.content.clone().unwrap_or_default()];
        let mut finish = response.finish_reason.clone();
        for _ in 0..LENGTH_CONTINUATIONS {
            if finish != Some(FinishReason::Length) {
                break;
            }
            let so_far = parts.concat();
            let extra = [Message::assistant(so_far), Message::user(CONTINUE_PROMPT)];
            let next = self.request_with(run, false, &extra).await;
            if next.is_error() {
                break;
            }
            parts.push(next.content.clone().unwrap_or_default());
            finish = next.finish_reason.clone();
        }
        Ok(Some(parts.concat()))
    }

    /// `max_iterations` reached: take pending injections, then ask once,
    /// without tools, for a summary of what was done and what remains.
    async fn finalize_at_limit(&self, run: &mut Run<'_>) -> AgentRunResult {
        let limit = run.spec.max_iterations;
        run.inject(usize::MAX);
        let prompt = Message::user(format!(
            "You have used all {limit} tool iterations allowed for this request. Do not call tools. Summarise for the user what you did, what you found, and what remains to be done."
        ));
        let response = self.request_with(run, false, &[prompt]).await;
        let text = response
            .content
            .filter(|t| !response.finish_reason.as_ref().is_some_and(|f| *f == FinishReason::Error) && !t.trim().is_empty())
            .unwrap_or_else(|| format!("I stopped after reaching the limit of {limit} tool iterations before finishing. Ask me to continue if you want me to go on."));
        let text = match run.spec.goal.as_ref().and_then(|g| g.at_limit(limit)) {
            Some(note) => format!("{text}\n\n{note}"),
            None => text,
        };
        run.messages.push(Message::assistant(text.clone()));
        run.checkpoint(CheckpointPhase::FinalResponse, limit, &[]);
        run.finish(Some(text), StopReason::MaxIterations)
    }
}

impl Run<'_> {
    /// Takes up to `max` injected messages (and at most [`INJECTION_CYCLES`]
    /// drains per run); consecutive user messages are merged, except an
    /// internal event's.
    fn inject(&mut self, max: usize) -> bool {
        let Some(source) = &self.spec.injections else { return false };
        if self.injection_cycles >= INJECTION_CYCLES && max != usize::MAX {
            return false;
        }
        let injected = source.drain(max);
        if injected.is_empty() {
            return false;
        }
        self.injection_cycles += 1;
        self.had_injections = true;
        for message in injected {
            // An internal event (a subagent's result) stays its own message:
            // merged, it would lose the task id the session dedups on.
            let event = |m: &Message| m.meta.contains_key(crate::bus::INJECTED_EVENT);
            match self.messages.last_mut() {
                Some(last) if last.role == Role::User && message.role == Role::User && last.tool_calls.is_empty() && !event(last) && !event(&message) => {
                    let merged = format!("{}\n\n{}", last.text(), message.text());
                    last.content = Some(merged);
                }
                _ => self.messages.push(message),
            }
        }
        true
    }

    /// Waits for messages expected by the injection source (see
    /// [`InjectionSource::wait_for_more`]); false without a source, once
    /// the run's injection cycles are used up, or when none came.
    async fn wait_for_injections(&self) -> bool {
        match &self.spec.injections {
            Some(source) if self.injection_cycles < INJECTION_CYCLES => source.wait_for_more().await,
            _ => false,
        }
    }

    fn checkpoint(&self, phase: CheckpointPhase, iteration: usize, pending: &[ToolCall]) {
        if let Some(save) = &self.spec.checkpoint {
            save(&CheckpointView { phase, iteration, messages: &self.messages[self.run_start..], pending_tool_calls: pending });
        }
    }

    fn finish(&mut self, final_content: Option<String>, stop_reason: StopReason) -> AgentRunResult {
        AgentRunResult {
            final_content,
            messages: std::mem::take(&mut self.messages),
            tools_used: std::mem::take(&mut self.tools_used),
            usage: self.usage,
            stop_reason,
            error: None,
            tool_events: std::mem::take(&mut self.tool_events),
            had_injections: self.had_injections,
        }
    }

    /// A provider error: the user sees the error, history keeps a neutral
    /// placeholder.
    fn fail(&mut self, error: Option<ProviderError>) -> AgentRunResult {
        let error = error.unwrap_or_else(unknown_error);
        self.messages.push(Message::assistant(ERROR_PLACEHOLDER));
        let mut result = self.finish(Some(format!("Sorry, the model request failed: {}", error.message)), StopReason::Error);
        result.error = Some(error.message);
        result
    }
}

/// `message` with the response's reasoning and replay blocks in its
/// metadata (moved out of the response): kept in history, replayed only by
/// the provider that reads them (Anthropic's thinking blocks).
fn with_reasoning(mut message: Message, response: &mut ChatResponse) -> Message {
    if let Some(reasoning) = response.reasoning.take() {
        message.meta.insert(crate::provider::REASONING.into(), reasoning.into());
    }
    if !response.replay.is_empty() {
        message.meta.insert(crate::provider::THINKING_BLOCKS.into(), std::mem::take(&mut response.replay).into());
    }
    message
}

/// Bytes of an oversized call's arguments kept in history, so the model
/// sees what it sent.
pub const OVERSIZED_ARGS_PREFIX: usize = 256;

/// Longest tool name or call id kept as the model wrote it.
pub const MAX_CALL_NAME: usize = 256;

/// Bounds what one call carries into history. Arguments over `limit` bytes
/// are replaced by a JSON object (still a JSON string, as providers require
/// on replay) naming their size and holding a short prefix; the call is
/// then refused with the returned error text. An absurd name or id is
/// clipped (a name that long is no tool's, an id that long is replaced).
fn bound_call(call: &mut ToolCall, limit: usize) -> Option<String> {
    if call.function.name.len() > MAX_CALL_NAME {
        let name = clip(&call.function.name, MAX_CALL_NAME);
        call.function.name = format!("{name}…");
    }
    if call.id.len() > MAX_CALL_NAME {
        call.id = format!("call_clipped_{}", blake3::hash(call.id.as_bytes()).to_hex().get(..16).unwrap_or_default());
    }
    let arguments = &call.function.arguments;
    let size = arguments.len();
    if size <= limit {
        return None;
    }
    let bounded = serde_json::json!({
        "_omitted": format!("{size} bytes of arguments, over the limit of {limit}; the call was not run"),
        "_prefix": clip(arguments, OVERSIZED_ARGS_PREFIX),
    });
    call.function.arguments = bounded.to_string();
    let error = crate::tools::ToolError::ArgumentsTooLarge { tool: call.function.name.clone(), size, limit };
    Some(format!("Error: {error}"))
}

/// The longest prefix of `text` of at most `max` bytes, on a char boundary.
fn clip(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn is_blank(response: &ChatResponse) -> bool {
    response.tool_calls.is_empty() && response.content.as_deref().is_none_or(|t| t.trim().is_empty())
}

fn unknown_error() -> ProviderError {
    ProviderError { status: None, retryable: false, message: "the provider reported an error without details".into() }
}

/// The provider's delta callback for a sink that streams; `None` (no
/// streaming request) otherwise.
fn deltas(spec: &AgentRunSpec) -> Option<crate::provider::StreamSink> {
    let sink = spec.sink.clone();
    sink.streams_text().then(|| Arc::new(move |delta: &str| sink.text_delta(delta)) as crate::provider::StreamSink)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_call_is_bounded_to_valid_json_and_refused() {
        let args = format!("{{\"content\":\"{}\"}}", "é".repeat(1000));
        let mut call = ToolCall::new("c1", "write_file", args.clone());
        assert_eq!(bound_call(&mut call, args.len()), None, "at the limit: untouched");
        assert_eq!(call.function.arguments, args);

        let refusal = bound_call(&mut call, 1024).expect("refused");
        assert_eq!(
            refusal,
            format!("Error: the arguments of `write_file` are {} bytes, over the limit of 1024 (config [agent] max_tool_args_kb); split the work into smaller calls.", args.len())
        );
        let kept: serde_json::Value = serde_json::from_str(&call.function.arguments).expect("still JSON");
        let prefix = kept["_prefix"].as_str().unwrap();
        assert!(args.starts_with(prefix) && prefix.len() <= OVERSIZED_ARGS_PREFIX && prefix.len() > OVERSIZED_ARGS_PREFIX - 4, "cut on a char boundary");
        assert!(kept["_omitted"].as_str().unwrap().contains(&args.len().to_string()));
        assert_eq!((call.id.as_str(), call.function.name.as_str()), ("c1", "write_file"));
    }

    #[test]
    fn absurd_names_and_ids_are_clipped() {
        let mut a = ToolCall::new("i".repeat(10_000), "n".repeat(10_000), "{}");
        let mut b = ToolCall::new(format!("{}x", "i".repeat(10_000)), "ok", "{}");
        assert_eq!(bound_call(&mut a, 1024), None);
        bound_call(&mut b, 1024);
        assert!(a.function.name.len() <= MAX_CALL_NAME + 3 && a.id.len() <= MAX_CALL_NAME);
        assert_ne!(a.id, b.id, "clipped ids stay distinct");
    }
}
