//! Agent runtime benchmark. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench agent`.
//! - Host overhead per turn (1 tool call + answer) with a 0 ms mock, at turn
//!   10 and at turn 1 000 of one session: wall time per turn minus the time
//!   the same two HTTP round trips to the mock take alone.
//! - 200 sessions × 5 turns with 50 ms mock latency and no concurrency cap:
//!   wall time against the ideal 0.5 s (5 turns × 2 requests × 50 ms).
//! - Peak RSS of the process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::agent::{AgentLoop, TurnOutcome};
use chitin::app::{App, AppOptions};
use chitin::bus::MessageBus;
use chitin::config::DataDir;
use chitin::provider::{ChatRequest, OpenAiOptions, OpenAiProvider, Provider, RetryPolicy};
use chitin::session::Message;
use chitin::testing::{MockLlm, MockReply};
use serde_json::json;

const HELLO_WASM: &str = env!("CHITIN_HELLO_WASM");

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        println!("chitin agent benchmark");
        per_turn_overhead(&[10, 1_000], "").await;
        many_sessions().await;
        println!("peak RSS: {:.1} MiB", peak_rss_mib());
    });
}

/// A mock that answers "call shout" to a request whose last message is the
/// user's, and a text answer after a tool result.
fn turn_mock() -> MockLlm {
    MockLlm::with_handler(|request, _| {
        let last = request["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
        if last["role"] == "tool" { MockReply::text("done") } else { MockReply::tool_call("shout", json!({"text": "hi"}).to_string()) }
    })
}

fn agent(mock: &MockLlm, home: &std::path::Path, extra_agent: &str) -> AgentLoop {
    let config = format!("[agent]\nmodel = \"bench\"\nstream = false\nmax_concurrent_turns = 0\n{extra_agent}\n[providers.openai]\nbase_url = \"{}\"\n", mock.base_url());
    std::fs::write(home.join("config.toml"), config).unwrap();
    let app = App::open(DataDir::at(home), AppOptions { extra_plugins: vec![HELLO_WASM.into()], ..Default::default() }).unwrap();
    let provider = OpenAiProvider::new(OpenAiOptions { base_url: mock.base_url(), retry: RetryPolicy::none(), stream: false, ..OpenAiOptions::default() }).unwrap();
    let core = app.agent_core(Arc::new(provider), Arc::new(MessageBus::new()), Vec::new());
    for plugin in app.catalog.iter() {
        app.runtime.prepare(plugin).unwrap();
    }
    AgentLoop::new(Arc::new(core))
}

async fn turn(agent: &AgentLoop, session: &str, text: &str) -> Duration {
    let started = Instant::now();
    match agent.process_direct(text, session, None).await {
        TurnOutcome::Done(_) => started.elapsed(),
        _ => panic!("turn failed"),
    }
}

/// Two bare round trips to the mock, as a turn makes them.
async fn mock_round_trips(mock: &MockLlm) -> Duration {
    let provider = OpenAiProvider::new(OpenAiOptions { base_url: mock.base_url(), retry: RetryPolicy::none(), stream: false, ..OpenAiOptions::default() }).unwrap();
    let request = ChatRequest { model: "bench".into(), messages: vec![Message::user("hi")], tools: Arc::from([]), max_tokens: 100, temperature: None };
    for _ in 0..50 {
        provider.chat(&request, None).await;
    }
    let mut samples = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        provider.chat(&request, None).await;
        provider.chat(&request, None).await;
        samples.push(started.elapsed());
    }
    median(samples)
}

pub async fn per_turn_overhead(at_turns: &[usize], extra_agent: &str) {
    let mock = turn_mock();
    let home = tempfile::tempdir().unwrap();
    let agent = agent(&mock, home.path(), extra_agent);
    let http = mock_round_trips(&mock).await;
    let mut done = 0;
    for &target in at_turns {
        while done + 10 < target {
            turn(&agent, "cli:bench", &format!("message {done}: please shout hi")).await;
            done += 1;
        }
        let mut samples = Vec::new();
        for _ in 0..20 {
            samples.push(turn(&agent, "cli:bench", &format!("message {done}: please shout hi")).await);
            done += 1;
        }
        let total = median(samples);
        println!(
            "turn {target:>6}: {:.2} ms per turn, of which 2 mock round trips {:.2} ms → host overhead {:.2} ms",
            ms(total),
            ms(http),
            ms(total.saturating_sub(http))
        );
    }
}

async fn many_sessions() {
    let mock = turn_mock().with_latency(Duration::from_millis(50));
    let home = tempfile::tempdir().unwrap();
    let agent = agent(&mock, home.path(), "");
    let started = Instant::now();
    let tasks: Vec<_> = (0..200)
        .map(|s| {
            let agent = agent.clone();
            tokio::spawn(async move {
                for t in 0..5 {
                    turn(&agent, &format!("bench:{s}"), &format!("turn {t}")).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let wall = started.elapsed();
    println!("200 sessions × 5 turns, 50 ms mock latency: {:.2} s wall, ideal 0.50 s → {:.2}× ideal", wall.as_secs_f64(), wall.as_secs_f64() / 0.5);
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
