//! Gateway benchmark: the real `chitin gateway` binary, driven through its
//! OpenAI-compatible API. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench gateway`.
//! - 200 sessions × 5 turns (1 `fs` tool call + answer each, so 2 model
//!   requests per turn) at 50 ms mock latency, `max_concurrent_turns = 0`:
//!   wall time against the ideal 0.5 s (5 turns × 2 requests × 50 ms).
//! - 1 000 sessions × 5 turns at 0 ms: turns per second, the gateway's CPU
//!   time per turn (user + system, from `/proc/PID/stat`, over that phase
//!   only) and its peak RSS (`VmHWM`).
//! - With `CHITIN_BENCH_BASELINE=/path/to/chitin` (a binary built before
//!   the durable inbox): CPU per turn of both gateways, interleaved, so the
//!   inbox/outbox cost per turn shows as a difference within one run.
//!
//! The client (reqwest) and the mock LLM run in this process and share the
//! machine's cores with the gateway, so turns/s is a floor for the host.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin_testing::{MockLlm, MockReply};
use serde_json::{Value, json};

const TOKEN: &str = "bench-token";

fn main() {
    raise_fd_limit();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        println!("chitin gateway benchmark (through POST /v1/chat/completions)");
        let mock = tool_mock();
        let home = tempfile::tempdir().unwrap();
        let config = format!(
            "[agent]\nmodel = \"bench\"\nstream = false\nmax_concurrent_turns = 0\n[providers.openai]\nbase_url = \"{}\"\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"{TOKEN}\"\nmax_connections = 4096\nmax_connections_per_address = 4096\n",
            mock.base_url()
        );
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        let (mut child, base, last_line) = start_gateway(home.path());
        // 1 000 clients on one address: the per-address connection cap
        // (32 by default) is raised in the config above, else the gateway
        // turns most of them away. Idle connections are dropped after 5 s, below the gateway's 10 s
        // keep-alive limit (`header_timeout_secs`), where hyper answers an
        // idle connection with an unasked-for 408: a client that reuses
        // such a connection fails its request (hyper: "UnexpectedMessage").
        let client = reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(5)).build().unwrap();
        // Warm up: the first call compiles the fs plugin into the cache.
        turns(&client, &base, 1, 1, "warm").await;

        mock.set_latency(Duration::from_millis(50));
        let started = Instant::now();
        turns(&client, &base, 200, 5, "lat").await;
        let wall = started.elapsed();
        println!("  200 sessions × 5 turns, 50 ms mock latency: {:.3} s vs ideal 0.500 s ({:.2}×)", wall.as_secs_f64(), wall.as_secs_f64() / 0.5);

        mock.set_latency(Duration::ZERO);
        let cpu_before = cpu_seconds(child.id());
        let started = Instant::now();
        let n = turns(&client, &base, 1_000, 5, "fast").await;
        let wall = started.elapsed();
        let cpu = cpu_seconds(child.id()) - cpu_before;
        println!("  1 000 sessions × 5 turns, 0 ms mock: {:.2} s, {:.0} turns/s", wall.as_secs_f64(), n as f64 / wall.as_secs_f64());
        println!("  gateway CPU per turn (user + system): {:.3} ms ({:.2} s over {n} turns)", cpu * 1e3 / n as f64, cpu);
        let rss = std::fs::read_to_string(format!("/proc/{}/status", child.id())).ok().as_deref().and_then(vm_hwm_kib).unwrap_or(0);
        println!("  gateway peak RSS (1 200 sessions served): {:.1} MiB", rss as f64 / 1024.0);

        let stopping = Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        let waited = stopping.elapsed();
        std::thread::sleep(Duration::from_millis(50));
        let (line, at) = last_line.lock().unwrap().clone();
        let said = at.saturating_duration_since(stopping);
        println!("  SIGTERM to exit: {:.0} ms ({status}); to its last line {:.0} ms: {line:?}", waited.as_secs_f64() * 1e3, said.as_secs_f64() * 1e3);
        println!("  model requests served by the mock: {}", mock.request_count());

        // The durable inbox/outbox's cost per turn (issue 19): this
        // gateway against a baseline binary (one built before the inbox,
        // e.g. the previous release), both on the same mock, their rounds
        // interleaved so both see the same machine.
        match std::env::var_os("CHITIN_BENCH_BASELINE") {
            Some(baseline) => compare_with_baseline(&mock, std::path::Path::new(&baseline)).await,
            None => println!("  durable inbox cost: set CHITIN_BENCH_BASELINE=/path/to/an/older/chitin to compare CPU per turn side by side"),
        }
    });
}

/// CPU per turn of this gateway and of `baseline`, 4 interleaved rounds of
/// 200 sessions × 5 turns each (each gateway on a data dir of its own).
async fn compare_with_baseline(mock: &MockLlm, baseline: &std::path::Path) {
    let ours = std::path::PathBuf::from(env!("CARGO_BIN_EXE_chitin"));
    let mut gateways = Vec::new();
    for bin in [&ours, &baseline.to_path_buf()] {
        let home = tempfile::tempdir().unwrap();
        let config = format!(
            "[agent]\nmodel = \"bench\"\nstream = false\nmax_concurrent_turns = 0\n[providers.openai]\nbase_url = \"{}\"\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"{TOKEN}\"\nmax_connections = 4096\nmax_connections_per_address = 4096\n",
            mock.base_url()
        );
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        let (child, base, _) = start_gateway_bin(bin, home.path());
        gateways.push((child, base, home, 0.0_f64, 0_usize));
    }
    let client = reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(5)).build().unwrap();
    for (_, base, _, _, _) in &gateways {
        turns(&client, base, 1, 1, "warm").await;
    }
    for round in 0..4 {
        for (child, base, _, cpu, n) in gateways.iter_mut() {
            let before = cpu_seconds(child.id());
            *n += turns(&client, base, 200, 5, &format!("cmp{round}")).await;
            *cpu += cpu_seconds(child.id()) - before;
        }
    }
    let per_turn: Vec<f64> = gateways.iter().map(|(_, _, _, cpu, n)| cpu * 1e3 / *n as f64).collect();
    println!(
        "  durable inbox cost: gateway CPU per turn {:.3} ms vs baseline {:.3} ms ({:+.3} ms, {:.3}×; fsync policy: batch, fdatasync within 1 s); baseline {}",
        per_turn[0],
        per_turn[1],
        per_turn[0] - per_turn[1],
        per_turn[0] / per_turn[1],
        baseline.display()
    );
    for (mut child, _, home, _, _) in gateways {
        let _ = child.kill();
        let _ = child.wait();
        let inbox = home.path().join("inbox/inbox.log");
        if let Ok(meta) = std::fs::metadata(&inbox) {
            println!("  inbox log after the rounds: {} bytes", meta.len());
        }
    }
}

/// `sessions` clients in parallel, each running `per_session` turns one
/// after the other on its own session; returns the turns answered.
async fn turns(client: &reqwest::Client, base: &str, sessions: usize, per_session: usize, tag: &str) -> usize {
    let url = Arc::new(format!("{base}/v1/chat/completions"));
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..sessions {
        let (client, url, session) = (client.clone(), url.clone(), format!("{tag}-{s}"));
        tasks.spawn(async move {
            for t in 0..per_session {
                let body = json!({"model": "any", "messages": [{"role": "user", "content": format!("turn {t}")}]});
                let response = client.post(url.as_str()).bearer_auth(TOKEN).header("x-chitin-session", &session).json(&body).send().await.expect("request");
                let status = response.status();
                let answer: Value = response.json().await.expect("json answer");
                assert!(status.is_success() && answer["choices"][0]["message"]["content"] == "done", "{status}: {answer}");
            }
            per_session
        });
    }
    let mut done = 0;
    while let Some(n) = tasks.join_next().await {
        done += n.expect("client task");
    }
    done
}

/// Calls `list_dir` when the last message is the user's, answers "done"
/// after the tool result. Reads only the roles: a full parse per request
/// would make the mock, which shares the cores, the bottleneck.
fn tool_mock() -> MockLlm {
    #[derive(serde::Deserialize)]
    struct Roles {
        messages: Vec<Role>,
    }
    #[derive(serde::Deserialize)]
    struct Role {
        role: String,
    }
    MockLlm::with_body_handler(|body, _| {
        let last = serde_json::from_slice::<Roles>(body).ok().and_then(|r| r.messages.into_iter().last()).map(|m| m.role);
        if last.as_deref() == Some("tool") { MockReply::text("done") } else { MockReply::tool_call("list_dir", "{}") }
    })
}

/// Starts `chitin gateway` and reads the address it prints.
fn start_gateway(home: &std::path::Path) -> (Child, String, Arc<std::sync::Mutex<(String, Instant)>>) {
    start_gateway_bin(std::path::Path::new(env!("CARGO_BIN_EXE_chitin")), home)
}

/// [`start_gateway`] with the binary `bin`.
fn start_gateway_bin(bin: &std::path::Path, home: &std::path::Path) -> (Child, String, Arc<std::sync::Mutex<(String, Instant)>>) {
    let mut child = std::process::Command::new(bin)
        .arg("gateway")
        .env("CHITIN_HOME", home)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chitin gateway");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("the gateway says where it listens").unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the gateway never blocks on a full pipe; the
    // last line (the shutdown summary) is printed at the end.
    let last = Arc::new(std::sync::Mutex::new((String::new(), Instant::now())));
    let keep = last.clone();
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| *keep.lock().unwrap() = (l, Instant::now())));
    (child, base, last)
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`, which may contain spaces: utime and stime
    // are the 14th and 15th fields of the line, the 12th and 13th after it.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0) + fields.get(12).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / per_second
}

/// The `VmHWM` (peak resident set) of a `/proc/PID/status` text, in KiB.
fn vm_hwm_kib(status: &str) -> Option<u64> {
    status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse().ok())
}

/// 1 000 parallel clients need ~3 000 descriptors here (client and mock
/// sockets); the gateway inherits the raised limit.
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit with a valid pointer.
    unsafe {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max.min(65_536);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
