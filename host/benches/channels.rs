//! Channel benchmark: the real `chitin gateway` binary with the built-in
//! Telegram channel against `MockTelegram` (its `api_base`) and a 0 ms
//! `MockLlm`. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench channels`.
//!
//! N = 200 updates, one at a time: each is pushed while the gateway's long
//! poll is held, and the next waits for its `sendMessage`. The figure per
//! update is push → the `sendMessage` request's arrival at the mock (the
//! mock's own arrival stamp, so the bench's waiting loop adds nothing). It
//! covers the mock answering the held poll, the host's poll-response step
//! and commit, the bus, the agent turn (one model request, no tool), the
//! `deliver` callback and its `wasi:http` request. The model exchange is
//! timed separately (the turn's own request body, posted to the mock by
//! this process) and its median subtracted to give the host overhead; the
//! Telegram mock's hand-offs stay in the figure, so it is an upper bound.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use chitin_testing::{MockLlm, MockReply, MockTelegram, MockUpdate};

const N: usize = 200;
const WARMUP: usize = 10;
const TG_TOKEN: &str = "900100:bench-token";

fn main() {
    println!("chitin channel benchmark (Telegram update → sendMessage through the real gateway)");
    let telegram = MockTelegram::with_token(TG_TOKEN, "chitinbot");
    let mock = MockLlm::with_body_handler(|_, _| MockReply::text("ok"));
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "workspace = \"{ws}\"\n[agent]\nmodel = \"bench\"\nstream = false\n[providers.openai]\nbase_url = \"{llm}\"\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"\"\n\
         [channels.telegram]\nenabled = true\nallow_from = [\"555\"]\napi_base = \"{tg}\"\nbot_token = \"${{TG_BENCH_TOKEN}}\"\nbot_username = \"chitinbot\"\n",
        ws = home.path().join("ws").display(),
        llm = mock.base_url(),
        tg = telegram.api_base(),
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut child = start_gateway(home.path());

    let mut raw = Vec::with_capacity(N);
    for i in 0..WARMUP + N {
        // Each update from its own chat, so every turn starts a short
        // session (the per-chat rate limit never applies).
        let chat = 10_000 + i as i64;
        wait_until(|| telegram.is_polling());
        let sent_before = telegram.requests_for("sendMessage").len();
        let pushed = Instant::now();
        telegram.push(MockUpdate::text(chat, 555, format!("update {i}")));
        wait_until(|| telegram.requests_for("sendMessage").len() > sent_before);
        let at = telegram.requests_for("sendMessage")[sent_before].at;
        if i >= WARMUP {
            raw.push(at.saturating_duration_since(pushed));
        }
    }

    // The model exchange alone, with the last turn's own request body.
    let body = mock.requests().last().cloned().expect("the gateway asked the model");
    let exchange = model_exchange(&mock, &body);
    let host: Vec<Duration> = raw.iter().map(|d| d.saturating_sub(exchange)).collect();
    println!("  {N} updates one at a time, 0 ms model ({WARMUP} warm-up updates not counted)");
    println!("  update pushed → sendMessage received: p50 {:.3} ms, p99 {:.3} ms", ms(pct(&raw, 50)), ms(pct(&raw, 99)));
    println!("  mock model exchange (median of 50): {:.3} ms", ms(exchange));
    println!("  host overhead (minus the model exchange): p50 {:.3} ms, p99 {:.3} ms", ms(pct(&host, 50)), ms(pct(&host, 99)));
    println!("  model requests: {}, sendMessage requests: {}", mock.request_count(), telegram.requests_for("sendMessage").len());

    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// Starts `chitin gateway` and waits until it listens; keeps draining its
/// stderr.
fn start_gateway(home: &std::path::Path) -> Child {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_chitin"))
        .arg("gateway")
        .env("CHITIN_HOME", home)
        .env("TG_BENCH_TOKEN", TG_TOKEN)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chitin gateway");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the gateway says where it listens").unwrap();
        if line.contains("listening on ") {
            break;
        }
    }
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("gateway: {l}")));
    child
}

/// Spins (with a short sleep) until `cond`; the figures come from the
/// mock's timestamps, not from this loop.
fn wait_until(cond: impl Fn() -> bool) {
    let limit = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < limit, "the gateway stalled");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Median round trip of `body` to the mock model, over a kept-alive
/// connection as the gateway's provider client uses.
fn model_exchange(mock: &MockLlm, body: &serde_json::Value) -> Duration {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let url = format!("{}/chat/completions", mock.base_url());
        let bytes = serde_json::to_vec(body).unwrap();
        let post = || client.post(&url).header("content-type", "application/json").body(bytes.clone()).send();
        for _ in 0..5 {
            post().await.unwrap().bytes().await.unwrap();
        }
        let mut samples = Vec::new();
        for _ in 0..50 {
            let started = Instant::now();
            post().await.unwrap().bytes().await.unwrap();
            samples.push(started.elapsed());
        }
        pct(&samples, 50)
    })
}

fn pct(samples: &[Duration], p: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) * p / 100).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
