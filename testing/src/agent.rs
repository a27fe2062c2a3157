//! A whole agent over a scripted mock LLM: temp data dir, real plugins (the
//! built-in `fs` and the hostile guest), real session files.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitin::agent::{AgentCore, AgentLoop, TurnOutcome, TurnSink};
use chitin::app::{AgentBuilder, App, AppOptions};
use chitin::bus::MessageBus;
use chitin::config::DataDir;
use chitin::provider::{Anthropic, AnthropicProvider, OpenAiOptions, OpenAiProvider, Provider, RetryPolicy};
use chitin::session::{JsonlStore, Session, SessionStore, ToolCall};
use crate::MockLlm;

use crate::HOSTILE_WASM;

/// The turn sink of [`TestAgent::ask`]: records what the turn reports, in
/// order, for batching and progress assertions.
#[derive(Default)]
pub struct Recorder {
    /// `run`, `before:<tool>:<id>`, `progress:<tool>:<id>:<text>`,
    /// `after:<tool>:<id>:<ok>`, `delta:<text>` and `interim:<text>` (a
    /// goal's interim answer) lines.
    pub events: Mutex<Vec<String>>,
    /// Ask for streamed text (`delta:<text>` events); off by default.
    pub streaming: std::sync::atomic::AtomicBool,
}

impl Recorder {
    fn push(&self, event: String) {
        self.events.lock().unwrap().push(event);
    }

    /// The recorded events.
    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
}

impl TurnSink for Recorder {
    fn streams_text(&self) -> bool {
        self.streaming.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn text_delta(&self, delta: &str) {
        self.push(format!("delta:{delta}"));
    }
    fn run_started(&self) {
        self.push("run".into());
    }
    fn tool_started(&self, call: &ToolCall) {
        self.push(format!("before:{}:{}", call.function.name, call.id));
    }
    fn tool_progress(&self, call: &ToolCall, text: &str) {
        self.push(format!("progress:{}:{}:{text}", call.function.name, call.id));
    }
    fn tool_finished(&self, call: &ToolCall, ok: bool) {
        self.push(format!("after:{}:{}:{ok}", call.function.name, call.id));
    }
    fn interim_answer(&self, text: &str) {
        self.push(format!("interim:{text}"));
    }
    fn reasoning(&self, text: &str) {
        self.push(format!("reasoning:{text}"));
    }
}

/// The API a [`TestAgent`] speaks to its mock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestApi {
    /// OpenAI chat completions.
    OpenAi,
    /// Anthropic Messages (key `test-key`).
    Anthropic,
}

/// The API key the Anthropic test provider sends.
pub const TEST_ANTHROPIC_KEY: &str = "test-key";

/// An agent wired to `mock`.
pub struct TestAgent {
    /// The scripted provider.
    pub mock: MockLlm,
    /// The loop.
    pub agent: AgentLoop,
    /// The bus the loop serves.
    pub bus: Arc<MessageBus>,
    /// What the turns of [`TestAgent::ask`] reported.
    pub recorder: Arc<Recorder>,
    /// The assembled host.
    pub app: App,
    /// The plugin services the agent was wired with.
    pub services: Arc<chitin::features::services::AgentServices>,
    /// Its Dream (behind `/dream*`).
    pub dream: Arc<chitin::features::dream::Dream>,
    /// The MCP servers of the config (none unless it names some).
    pub mcp: Arc<chitin::mcp::client::McpClients>,
    /// Owns the data dir.
    pub home: tempfile::TempDir,
    /// The provider the agent was built over (for [`TestAgent::rewired`]).
    provider: Arc<dyn Provider>,
}

impl TestAgent {
    /// An agent with the default test config.
    pub fn new(mock: MockLlm) -> TestAgent {
        TestAgent::with_config(mock, "")
    }

    /// An agent; `extra` is appended to the `[agent]` table of the config.
    pub fn with_config(mock: MockLlm, extra_agent: &str) -> TestAgent {
        TestAgent::build(mock, extra_agent, "", |_| {})
    }

    /// An agent whose core is adjusted by `customize` before it starts
    /// (e.g. an idle compactor on a manual clock).
    pub fn customized(mock: MockLlm, extra_agent: &str, customize: impl FnOnce(&mut AgentCore)) -> TestAgent {
        TestAgent::build(mock, extra_agent, "", customize)
    }

    /// An agent whose hostile plugin also gets `grant` (TOML lines of
    /// `[plugins.hostile]`).
    pub fn with_plugin_grant(mock: MockLlm, grant: &str) -> TestAgent {
        TestAgent::build(mock, "", grant, |_| {})
    }

    /// An agent speaking `api` to `mock`, streaming or not.
    pub fn over(mock: MockLlm, api: TestApi, stream: bool) -> TestAgent {
        TestAgent::build_over(mock, api, stream, None, "", "", |_| {})
    }

    /// An agent over `provider` (which may or may not talk to `mock`).
    pub fn with_provider(mock: MockLlm, provider: Arc<dyn Provider>) -> TestAgent {
        TestAgent::build_over(mock, TestApi::OpenAi, false, Some(provider), "", "", |_| {})
    }

    fn build(mock: MockLlm, extra_agent: &str, grant: &str, customize: impl FnOnce(&mut AgentCore)) -> TestAgent {
        TestAgent::build_over(mock, TestApi::OpenAi, false, None, extra_agent, grant, customize)
    }

    #[allow(clippy::too_many_arguments)]
    fn build_over(mock: MockLlm, api: TestApi, stream: bool, given: Option<Arc<dyn Provider>>, extra_agent: &str, grant: &str, customize: impl FnOnce(&mut AgentCore)) -> TestAgent {
        let home = tempfile::tempdir().expect("temp dir");
        let defaults: String = ["model = \"mock-model\"", "provider = \"mock\"", "stream = false", "llm_timeout_secs = 10"]
            .iter()
            .filter(|line| !extra_agent.contains(line.split(' ').next().unwrap_or_default()))
            .map(|line| format!("{line}\n"))
            .collect();
        let config = format!(
            "[agent]\n{defaults}{extra_agent}\n\
             [providers.mock]\nbase_url = \"{}\"\n\
             [limits]\ntimeout_ms = 5000\n\
             [plugins.hostile]\nworkspace = \"read-write\"\n{grant}\n",
            mock.base_url()
        );
        std::fs::write(home.path().join("config.toml"), config).expect("config");
        let options = AppOptions { extra_plugins: vec![HOSTILE_WASM.into()], ..AppOptions::default() };
        let app = App::open(DataDir::at(home.path()), options).expect("app opens");
        let options = OpenAiOptions {
            base_url: mock.base_url(),
            api_key: (api == TestApi::Anthropic).then(|| TEST_ANTHROPIC_KEY.to_string()),
            request_timeout: Duration::from_secs(10),
            retry: RetryPolicy::fast(),
            stream,
            vision: true,
        };
        let provider: Arc<dyn Provider> = match api {
            _ if given.is_some() => given.expect("checked"),
            TestApi::OpenAi => Arc::new(OpenAiProvider::new(options).expect("provider")),
            TestApi::Anthropic => Arc::new(AnthropicProvider::anthropic(Anthropic::default(), options).expect("provider")),
        };
        let bus = Arc::new(MessageBus::new());
        let recorder = Arc::new(Recorder::default());
        recorder.streaming.store(stream, std::sync::atomic::Ordering::Relaxed);
        let wired = app.agent(provider.clone(), bus.clone());
        let mut core = wired.core;
        customize(&mut core);
        TestAgent { mock, agent: AgentLoop::new(Arc::new(core)), bus, recorder, app, services: wired.services, dream: wired.dream, mcp: wired.mcp, home, provider }
    }

    /// The same agent built again over the same data dir, bus and model,
    /// `wire` giving the builder what a host gives it (cron, the reachable
    /// channels), as `chitin gateway` does before the agent exists.
    pub fn rewired(mut self, wire: impl FnOnce(AgentBuilder<'_>) -> AgentBuilder<'_>) -> TestAgent {
        let wired = wire(self.app.agent_builder(self.provider.clone(), self.bus.clone())).build();
        self.agent = AgentLoop::new(Arc::new(wired.core));
        self.services = wired.services;
        self.dream = wired.dream;
        self.mcp = wired.mcp;
        self
    }

    /// Sends `text` to session `cli:test` and returns the reply text.
    pub async fn ask(&self, text: &str) -> String {
        self.ask_in("cli:test", text).await
    }

    /// Sends `text` to `session` and returns the reply text; the turn's
    /// output goes to [`TestAgent::recorder`].
    pub async fn ask_in(&self, session: &str, text: &str) -> String {
        match self.agent.process_direct(text, session, self.recorder.clone()).await {
            TurnOutcome::Done(ctx) => ctx.outbound.map(|o| o.content).unwrap_or_default(),
            TurnOutcome::Cancelled => panic!("turn cancelled"),
            TurnOutcome::Failed(e) => panic!("turn failed: {e}"),
        }
    }

    /// The session as stored on disk (a fresh store, no cache).
    pub fn stored(&self, key: &str) -> Session {
        JsonlStore::new(self.app.data.sessions_dir()).load(key).expect("session loads")
    }

    /// Runs `AgentLoop::run` on the bus until [`RunningLoop::stop`].
    pub fn start_loop(self: &Arc<Self>) -> RunningLoop {
        let this = self.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            this.agent
                .run(async {
                    let _ = stopped.await;
                })
                .await
        });
        RunningLoop { stop, task }
    }

    /// The agent's workspace.
    pub fn workspace(&self) -> &std::path::Path {
        self.app.workspace.root()
    }
}

/// The messages of request `index` as (role, text) pairs.
pub fn request_messages(mock: &MockLlm, index: usize) -> Vec<(String, String)> {
    mock.requests()[index]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or_default().to_string(), m["content"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// A running `AgentLoop::run`.
pub struct RunningLoop {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningLoop {
    /// Signals shutdown and waits for the loop (and its turns) to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("the loop ends cleanly");
    }
}

/// Waits (at most 20 s) until `condition` holds.
pub async fn wait_until(mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "condition not met in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The next reply message on the bus (progress and stream events skipped).
pub async fn next_reply(t: &TestAgent) -> String {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), t.bus.consume_outbound())
            .await
            .expect("a reply in time")
            .expect("bus open");
        if let chitin::bus::OutboundKind::Message(_) = message.kind {
            return message.content;
        }
    }
}
