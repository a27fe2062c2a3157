//! Agent runtime benchmark. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench agent`.
//! - Host overhead per turn (1 tool call + answer) with a 0 ms mock, at turn
//!   10 and at turn 1 000 of one session: wall time per turn minus the time
//!   the same two HTTP round trips to the mock take alone.
//! - 200 sessions × 5 turns with 50 ms mock latency and no concurrency cap:
//!   wall time against the ideal 0.5 s (5 turns × 2 requests × 50 ms).
//! - The same per-turn figure at turn 10 000, where token consolidation is
//!   active (the history no longer fits the window): the first turn pays for
//!   the archiving, the median shows the steady state.
//! - Wall time and peak RSS of a one-shot `chitin agent -m` (the real
//!   binary; one `fs` tool call and an answer), warm plugin cache, against
//!   two baselines measured in the same run: `chitin --version` (process
//!   start) and a one-shot without a tool call (see `one_shot_rss`).
//! - Peak RSS of the bench process per part (it also compiles the plugins).
//! - `durable`: what the durable inbox/outbox adds per turn (accept,
//!   running, the commit's stamp, done): the same turn at turn 10 with and
//!   without it, interleaved, and the inbox's own transitions alone under
//!   both fsync policies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::agent::{AgentLoop, TurnOutcome};
use chitin::app::{App, AppOptions};
use chitin::bus::MessageBus;
use chitin::config::DataDir;
use chitin::provider::{OpenAiOptions, OpenAiProvider, RetryPolicy};
use chitin::session::{JsonlStore, Message, SessionStore, ToolCall};
use chitin_testing::{MockLlm, MockReply};
use serde_json::json;

const HELLO_WASM: &str = chitin_testing::HELLO_WASM;

/// The parts, in the order they run.
const PARTS: [&str; 6] = ["turn10", "turn1000", "turn10000", "sessions", "oneshot", "durable"];

fn main() {
    // `cargo bench --bench agent -- sessions` runs only the parts named; no
    // name runs them all, each in a fresh process of this bench, so one
    // part's heap (a 10 000-turn history, compiled plugins) does not slow
    // the next one down and each peak RSS is the part's own.
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if wanted.is_empty() {
        println!("chitin agent benchmark");
        let me = std::env::current_exe().expect("this bench's path");
        for part in PARTS {
            let status = std::process::Command::new(&me).arg(part).status().expect("run a bench part");
            assert!(status.success(), "bench part {part} failed");
        }
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        for part in &wanted {
            match part.as_str() {
                "turn10" => per_turn_at(10).await,
                "turn1000" => per_turn_at(1_000).await,
                "turn10000" => per_turn_at(10_000).await,
                "sessions" => many_sessions().await,
                "oneshot" => one_shot_rss().await,
                "durable" => durable_overhead().await,
                other => panic!("no bench part {other:?}; the parts: {}", PARTS.join(", ")),
            }
        }
    });
    println!("             peak RSS of the bench process for {}: {:.1} MiB", wanted.join(" "), peak_rss_mib());
}

/// A mock that answers "call shout" to a request whose last message is the
/// user's, a text answer after a tool result, and notes to an archiving
/// (consolidation) request.
fn turn_mock() -> MockLlm {
    mock_calling("shout", json!({"text": "hi"}))
}

/// [`turn_mock`], calling `tool` with `args`.
fn mock_calling(tool: &'static str, args: serde_json::Value) -> MockLlm {
    let args = args.to_string();
    // Reads only the roles (and looks for the archiving prompt in the raw
    // bytes): a full `Value` parse per request made the mock, which shares
    // the two cores, slower than the host it measures.
    #[derive(serde::Deserialize)]
    struct Roles {
        messages: Vec<Role>,
    }
    #[derive(serde::Deserialize)]
    struct Role {
        role: String,
    }
    MockLlm::with_body_handler(move |body, _| {
        let last_role = serde_json::from_slice::<Roles>(body).ok().and_then(|r| r.messages.into_iter().last()).map(|m| m.role);
        if body.windows(ARCHIVING_PROMPT.len()).any(|w| w == ARCHIVING_PROMPT) {
            MockReply::text("- earlier turns asked to shout hi")
        } else if last_role.as_deref() == Some("tool") {
            MockReply::text("done")
        } else {
            MockReply::tool_call(tool, args.clone())
        }
    })
}

/// The heading that marks a consolidation (archiving) request.
const ARCHIVING_PROMPT: &[u8] = b"# Archiving task";

async fn agent(mock: &MockLlm, home: &std::path::Path, extra_agent: &str) -> AgentLoop {
    agent_on(mock, home, extra_agent, false).await
}

/// [`agent`]; `durable` gives it the gateway's bus (`App::durable_bus`).
async fn agent_on(mock: &MockLlm, home: &std::path::Path, extra_agent: &str, durable: bool) -> AgentLoop {
    let config = format!("[agent]\nmodel = \"bench\"\nstream = false\nmax_concurrent_turns = 0\n{extra_agent}\n[providers.openai]\nbase_url = \"{}\"\n", mock.base_url());
    std::fs::write(home.join("config.toml"), config).unwrap();
    let app = App::open(DataDir::at(home), AppOptions { extra_plugins: vec![HELLO_WASM.into()], ..Default::default() }).unwrap();
    let provider = OpenAiProvider::new(OpenAiOptions { base_url: mock.base_url(), retry: RetryPolicy::none(), stream: false, ..OpenAiOptions::default() }).unwrap();
    let bus = if durable { app.durable_bus().unwrap() } else { Arc::new(MessageBus::new()) };
    let core = app.agent_core(Arc::new(provider), bus);
    for plugin in app.catalog.iter() {
        app.runtime.prepare(plugin).await.unwrap();
    }
    AgentLoop::new(Arc::new(core))
}

async fn turn(agent: &AgentLoop, session: &str, text: &str) -> Duration {
    timed_turn(agent, session, text).await.0
}

/// A turn's wall time and its per-state trace (state, ms).
async fn timed_turn(agent: &AgentLoop, session: &str, text: &str) -> (Duration, Vec<(String, f64)>) {
    let started = Instant::now();
    match agent.process_direct(text, session, chitin::agent::sink::silent()).await {
        TurnOutcome::Done(ctx) => (started.elapsed(), ctx.trace.iter().map(|e| (format!("{:?}", e.state), e.duration_ms)).collect()),
        _ => panic!("turn failed"),
    }
}

/// Two round trips to the mock carrying `body` (the turn's own last request,
/// so the mock's parsing and the transfer of a long history are counted as
/// the model's time, not the host's).
async fn mock_round_trips(mock: &MockLlm, body: &serde_json::Value) -> Duration {
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", mock.base_url());
    let bytes = serde_json::to_vec(body).unwrap();
    let post = || client.post(&url).header("content-type", "application/json").body(bytes.clone()).send();
    for _ in 0..5 {
        post().await.unwrap().bytes().await.unwrap();
    }
    let mut samples = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        post().await.unwrap().bytes().await.unwrap();
        post().await.unwrap().bytes().await.unwrap();
        samples.push(started.elapsed());
    }
    median(samples)
}

/// Per-turn time once the session holds `history` earlier turns (written
/// straight to the session file, as an earlier host would have left them).
async fn per_turn_at(history: usize) {
    let mock = turn_mock();
    let home = tempfile::tempdir().unwrap();
    let agent = agent(&mock, home.path(), "").await;
    let store = JsonlStore::new(home.path().join("sessions"));
    let mut session = store.load("cli:bench").unwrap();
    for i in 0..history {
        let id = format!("h{i}");
        session.push(Message::user(format!("message {i}: please shout hi")));
        session.push(Message::assistant_calls(None, vec![ToolCall::new(&id, "shout", r#"{"text":"hi"}"#)]));
        session.push(Message::tool_result(&id, "shout", "HI"));
        session.push(Message::assistant("done"));
    }
    store.save(&mut session).unwrap();
    let summaries_before = mock.request_count();
    let first = turn(&agent, "cli:bench", "please shout hi").await;
    let mut samples = Vec::new();
    let mut states: Vec<(String, f64)> = Vec::new();
    for i in 0..20 {
        let (took, trace) = timed_turn(&agent, "cli:bench", &format!("again {i}: please shout hi")).await;
        samples.push(took);
        for (state, ms) in trace {
            match states.iter_mut().find(|(s, _)| *s == state) {
                Some(entry) => entry.1 += ms / 20.0,
                None => states.push((state, ms / 20.0)),
            }
        }
    }
    let total = median(samples);
    let archiving = mock.request_count() - summaries_before - 21 * 2;
    let http = mock_round_trips(&mock, &mock.last_request().unwrap()).await;
    let breakdown: Vec<String> = states.iter().map(|(s, ms)| format!("{s} {ms:.2}")).collect();
    println!(
        "turn {:>6}: first turn {:.1} ms ({archiving} archiving requests); then median {:.2} ms per turn, of which 2 mock round trips {:.2} ms → host overhead {:.2} ms",
        history + 1,
        ms(first),
        ms(total),
        ms(http),
        ms(total.saturating_sub(http))
    );
    println!("             mean ms per state: {}", breakdown.join(", "));
}

/// The durable inbox's cost per turn: two agents over the same mock, one
/// with the durable bus, their turns interleaved (so both see the same
/// machine), at turn 10 of their sessions; then the inbox's transitions of
/// one message alone (accept, running, done with a reply), under
/// `FsyncPolicy::Batch` (the gateway's) and `Always`.
async fn durable_overhead() {
    let mock = turn_mock();
    let (plain_home, durable_home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let plain = agent_on(&mock, plain_home.path(), "", false).await;
    let durable = agent_on(&mock, durable_home.path(), "", true).await;
    for i in 0..10 {
        turn(&plain, "cli:bench", &format!("warm {i}: please shout hi")).await;
        turn(&durable, "cli:bench", &format!("warm {i}: please shout hi")).await;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..60 {
        a.push(turn(&plain, "cli:bench", &format!("again {i}: please shout hi")).await);
        b.push(turn(&durable, "cli:bench", &format!("again {i}: please shout hi")).await);
    }
    let (a, b) = (median(a), median(b));
    println!(
        "durable inbox: median turn {:.3} ms without, {:.3} ms with → {:+.3} ms per turn (1 tool call + answer, turn ~10..70)",
        ms(a),
        ms(b),
        ms(b) - ms(a)
    );
    for policy in [chitin::durable::FsyncPolicy::Batch, chitin::durable::FsyncPolicy::Always] {
        let dir = tempfile::tempdir().unwrap();
        let inbox = chitin::durable::Inbox::open(dir.path(), policy).unwrap();
        let reply = chitin::bus::OutboundMessage::reply("telegram", "42", "a reply of a few words, as most are");
        let n = if policy == chitin::durable::FsyncPolicy::Batch { 5_000 } else { 200 };
        let started = Instant::now();
        for i in 0..n {
            let mut message = chitin::bus::InboundMessage::new("telegram", "u", "42", format!("message {i} with a few words"));
            let chitin::durable::Accepted::New(row) = inbox.accept(&mut message, Some(format!("ch:telegram:{i}"))).unwrap() else { panic!() };
            inbox.start(row).unwrap();
            inbox.done(row, &[], Some(&reply), false).unwrap();
            inbox.delivered(row.id).unwrap();
        }
        let per = started.elapsed() / n;
        println!("             inbox transitions of one message (accept, running, done + outbox, delivered), {policy:?}: {:.1} µs", per.as_secs_f64() * 1e6);
    }
}

async fn many_sessions() {
    let mock = turn_mock().with_latency(Duration::from_millis(50));
    let home = tempfile::tempdir().unwrap();
    let agent = agent(&mock, home.path(), "").await;
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

/// Runs per one-shot measurement, each program × case interleaved.
const ONE_SHOT_RUNS: usize = 15;

/// Wall time and peak RSS of the real binary, warm plugin cache, in three
/// cases run interleaved (so drift of this shared machine hits all alike):
/// - `--version`: the floor, process start and exit of this same binary
///   (loader, relocations, `main`); nothing of chitin's own work;
/// - a one-shot whose model answers at once (no tool call): the host's
///   start (config, engine, built-in plugins, provider, session) + 1 request;
/// - a one-shot with one `fs` tool call (`list_dir`) and an answer: the
///   figure with the target, 2 requests.
///
/// Medians over [`ONE_SHOT_RUNS`] runs, each in a session of its own so
/// every run does the same work. The ratio to `--version` and the
/// difference to the no-tool case say what the tool call itself costs.
/// `CHITIN_BENCH_BASELINE=path/to/an/older/chitin` measures that binary too,
/// interleaved with this one, and prints the ratio (a before/after in one
/// run). The first run of each program compiles `fs` (its RSS is printed);
/// a cache entry is then stamped at its first load at least a second after
/// it was written (`plugins::cache`), so the bench waits that out and loads
/// once more before measuring, as any later run of a user's finds it.
async fn one_shot_rss() {
    let tool_mock = mock_calling("list_dir", json!({"path": "."}));
    let text_mock = MockLlm::with_body_handler(|_, _| MockReply::text("done"));
    let mut programs = vec![("this build".to_string(), std::path::PathBuf::from(env!("CARGO_BIN_EXE_chitin")))];
    if let Some(baseline) = std::env::var_os("CHITIN_BENCH_BASELINE") {
        programs.push(("baseline".to_string(), baseline.into()));
    }
    let homes: Vec<(tempfile::TempDir, tempfile::TempDir)> = programs.iter().map(|_| (home_for(&tool_mock), home_for(&text_mock))).collect();
    for ((label, program), (tool_home, _)) in programs.iter().zip(&homes) {
        let (status, _, first_kib) = run_one_shot(program, tool_home.path(), "list the workspace", "bench:first", true);
        assert!(status == 0, "{label}: chitin agent -m exited with {status}");
        println!("one-shot, {label}: first run (compiles fs in the compile child) peak RSS {:.1} MiB", first_kib as f64 / 1024.0);
    }
    std::thread::sleep(Duration::from_millis(1100));
    for ((_, program), (tool_home, text_home)) in programs.iter().zip(&homes) {
        run_one_shot(program, tool_home.path(), "list the workspace", "bench:stamp", false);
        run_one_shot(program, text_home.path(), "hello", "bench:warm", false);
    }
    let requests_before = (tool_mock.request_count(), text_mock.request_count());
    let cases: [(&str, Option<usize>, &str); 3] = [("--version", None, ""), ("no tool", Some(1), "hello"), ("1 fs call", Some(0), "list the workspace")];
    // [program][case] → (wall ms, peak MiB) samples.
    let mut samples = vec![vec![(Vec::new(), Vec::new()); cases.len()]; programs.len()];
    for run in 0..ONE_SHOT_RUNS {
        for (p, (_, program)) in programs.iter().enumerate() {
            for (c, (_, home, message)) in cases.iter().enumerate() {
                let home = home.map(|h| if h == 0 { homes[p].0.path() } else { homes[p].1.path() });
                let session = format!("bench:{p}:{c}:{run}");
                // Timed without the RSS poller (which would share the cores),
                // then the same again for the peak.
                let (status, wall, _) = run_case(program, home, message, &session, false);
                assert!(status == 0, "{program:?} {:?} exited with {status}", cases[c].0);
                let (_, _, peak_kib) = run_case(program, home, message, &format!("{session}:rss"), true);
                samples[p][c].0.push(wall);
                samples[p][c].1.push(peak_kib as f64 / 1024.0);
            }
        }
    }
    let per_run_requests = ((tool_mock.request_count() - requests_before.0) / (2 * ONE_SHOT_RUNS * programs.len()), (text_mock.request_count() - requests_before.1) / (2 * ONE_SHOT_RUNS * programs.len()));
    assert_eq!(per_run_requests, (2, 1), "the tool case makes 2 model requests per run, the no-tool case 1");
    let mut medians = Vec::new();
    for (p, (label, _)) in programs.iter().enumerate() {
        let figures: Vec<(f64, f64)> = samples[p].iter().map(|(walls, peaks)| (ms(median(walls.clone())), median_f64(peaks.clone()))).collect();
        let floor = figures[0].0;
        println!("one-shot, {label} (medians of {ONE_SHOT_RUNS} interleaved runs, warm cache):");
        for ((case, _, _), (wall, peak)) in cases.iter().zip(&figures) {
            println!("             {case:<10} {wall:6.2} ms ({:4.2}× --version)  peak RSS {peak:5.1} MiB", wall / floor);
        }
        println!(
            "             the tool call itself (1 fs call − no tool): {:+.2} ms, {:+.1} MiB; host start + 1 request over the floor (no tool − --version): {:+.2} ms",
            figures[2].0 - figures[1].0,
            figures[2].1 - figures[1].1,
            figures[1].0 - floor
        );
        medians.push(figures);
    }
    if medians.len() == 2 {
        let (now, before) = (&medians[0][2], &medians[1][2]);
        println!("one-shot with 1 fs call, this build vs baseline: {:.2} ms vs {:.2} ms ({:.2}×), {:.1} MiB vs {:.1} MiB", now.0, before.0, now.0 / before.0, now.1, before.1);
    }
}

/// A data dir whose config points the agent at `mock`, `fs` granted.
fn home_for(mock: &MockLlm) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "[agent]\nmodel = \"bench\"\nstream = false\n[providers.openai]\nbase_url = \"{}\"\napi_key = \"none\"\n[plugins.fs]\nworkspace = \"read-write\"\n",
        mock.base_url()
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    home
}

/// `chitin agent -s session -m message` in `home`: exit status, wall time
/// and (when `peak`) peak RSS in KiB.
fn run_one_shot(program: &std::path::Path, home: &std::path::Path, message: &str, session: &str, peak: bool) -> (i32, Duration, u64) {
    run_case(program, Some(home), message, session, peak)
}

/// One run of `program`: `agent -m` in `home`, or `--version` without one.
///
/// The peak is the child's own `VmHWM`, polled until it exits: it starts
/// afresh at `exec`, unlike `wait4`'s `ru_maxrss`, which also counts the
/// pages the child shared with this (much larger) process before `exec`.
/// Memory only shrinks while a process exits, so the last reading is the
/// peak. Without `peak` the child is only waited for (wall time exact).
fn run_case(program: &std::path::Path, home: Option<&std::path::Path>, message: &str, session: &str, peak: bool) -> (i32, Duration, u64) {
    let mut command = std::process::Command::new(program);
    match home {
        Some(home) => command.args(["agent", "-s", session, "-m", message]).env("CHITIN_HOME", home),
        None => command.arg("--version"),
    };
    let started = Instant::now();
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start chitin");
    if !peak {
        let status = child.wait().expect("wait for chitin");
        return (status.code().unwrap_or(-1), started.elapsed(), 0);
    }
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    loop {
        if let Some(kib) = std::fs::read_to_string(&status_file).ok().as_deref().and_then(vm_hwm_kib) {
            peak_kib = peak_kib.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait for chitin") {
            return (status.code().unwrap_or(-1), started.elapsed(), peak_kib);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// The `VmHWM` (peak resident set) of a `/proc/PID/status` text, in KiB.
fn vm_hwm_kib(status: &str) -> Option<u64> {
    status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse().ok())
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    vm_hwm_kib(&status).map_or(f64::NAN, |kib| kib as f64 / 1024.0)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn median_f64(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
