//! Plugin runtime benchmark. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench plugins`. Figures to compare within one
//! run (these machines are noisy): load cold vs warm; per-call host overhead
//! (validation + WASI context + instantiate + call + drop) for a trivial tool;
//! calls per second with parallel callers; process start to first result
//! with a warm cache; startup with 50 installed plugins; compiling the
//! built-in fs plugin in the compile child vs in process; the cost of one
//! channel callback (fresh instance + call + step bounds check); the
//! per-call overhead of secret redaction on a 1 MiB response (the body
//! alone, and a whole `wasi:http` call of the hostile guest), against the
//! same response unredacted in the same run.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::app::{App, AppOptions};
use chitin::config::DataDir;
use chitin::plugins::manifest::{self, Manifest};
use chitin::plugins::{CallContext, PluginRuntime, PluginSource, RuntimeConfig};
use serde_json::json;

const HELLO_WASM: &str = chitin_testing::HELLO_WASM;
const ECHO_CHANNEL_WASM: &str = chitin_testing::ECHO_CHANNEL_WASM;
const CHITIN_BIN: &str = env!("CARGO_BIN_EXE_chitin");
const HOSTILE_WASM: &str = chitin_testing::HOSTILE_WASM;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let home = tempfile::tempdir().unwrap();
    let hello = std::fs::read(HELLO_WASM).expect("hello-tool is built by host/build.rs");

    println!("chitin plugin benchmark (hello-tool, {} KiB)", hello.len() / 1024);
    rt.block_on(channel_callback(home.path()));
    rt.block_on(redaction_body());
    rt.block_on(redaction_call(home.path()));
    load_cold_vs_warm(&rt, &hello, home.path());
    compile_child_vs_in_process(&rt, home.path());
    let app = App::open(DataDir::at(home.path()), AppOptions { extra_plugins: vec![HELLO_WASM.into()], ..Default::default() }).unwrap();
    rt.block_on(per_call_overhead(&app));
    rt.block_on(parallel_throughput(&app));
    process_start(home.path());
    fifty_plugins(&hello);
}

fn load_cold_vs_warm(rt: &tokio::runtime::Runtime, bytes: &[u8], home: &Path) {
    let cache = home.join("bench-cache");
    let measure = || {
        let runtime = PluginRuntime::new(RuntimeConfig { workspace: home.to_path_buf(), cache_dir: Some(cache.clone()), limits: Default::default() }).unwrap();
        let plugin = runtime.load(PluginSource::Builtin, Arc::from(bytes), &Default::default()).unwrap();
        let started = Instant::now();
        rt.block_on(runtime.prepare(&plugin)).unwrap();
        started.elapsed()
    };
    let _ = std::fs::remove_dir_all(&cache);
    let cold = measure();
    let warm: Vec<Duration> = (0..5).map(|_| measure()).collect();
    let warm = median(warm);
    println!("load: cold (compile) {:.1} ms, warm (cache) {:.2} ms, ratio {:.0}x", ms(cold), ms(warm), cold.as_secs_f64() / warm.as_secs_f64());
}

/// Compile (no cache) of the fs plugin: in this process vs in the compile
/// child (`chitin __compile` under its CPU and memory limits), medians of 5.
fn compile_child_vs_in_process(rt: &tokio::runtime::Runtime, home: &Path) {
    let fs = chitin::plugins::builtin("fs").expect("fs is built in");
    let measure = |child: bool| {
        let runtime = PluginRuntime::new(RuntimeConfig { workspace: home.to_path_buf(), cache_dir: None, limits: Default::default() }).unwrap();
        let runtime = if child { runtime.with_compile_child(CHITIN_BIN.into()) } else { runtime };
        let plugin = runtime.load_builtin(fs, &Default::default()).unwrap();
        let started = Instant::now();
        rt.block_on(runtime.prepare(&plugin)).unwrap();
        started.elapsed()
    };
    let in_process = median((0..5).map(|_| measure(false)).collect());
    let child = median((0..5).map(|_| measure(true)).collect());
    println!(
        "compile fs ({} KiB): in process {:.1} ms, in the compile child {:.1} ms ({:.2}x)",
        fs.bytes.len() / 1024,
        ms(in_process),
        ms(child),
        child.as_secs_f64() / in_process.as_secs_f64()
    );
}

async fn per_call_overhead(app: &App) {
    let ctx = CallContext::default();
    let args = json!({"text": "hi"});
    for _ in 0..200 {
        app.tools.call("shout", &args, &ctx, None).await.unwrap();
    }
    let mut full = Vec::with_capacity(5000);
    let mut validate = Vec::with_capacity(5000);
    for _ in 0..5000 {
        let started = Instant::now();
        let call = app.tools.prepare_call("shout", &args).unwrap();
        validate.push(started.elapsed());
        app.tools.execute(&call, &ctx, None).await.unwrap();
        full.push(started.elapsed());
    }
    let (p50, p99) = percentiles(&mut full);
    let (v50, _) = percentiles(&mut validate);
    println!("per call (validate + WASI ctx + instantiate + call + drop): p50 {:.1} µs, p99 {:.1} µs; validation alone p50 {:.1} µs", us(p50), us(p99), us(v50));
}

async fn parallel_throughput(app: &App) {
    for callers in [1usize, 2, 4, 8] {
        let per_caller = 2000;
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let tools = app.tools.clone();
                tokio::spawn(async move {
                    let ctx = CallContext::default();
                    for _ in 0..per_caller {
                        tools.call("shout", &json!({"text": "hi"}), &ctx, None).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let rate = (callers * per_caller) as f64 / started.elapsed().as_secs_f64();
        println!("throughput: {callers} parallel callers on 2 worker threads: {rate:.0} calls/s");
    }
}

fn process_start(home: &Path) {
    let run = || {
        let started = Instant::now();
        let out = Command::new(CHITIN_BIN)
            .args(["tool", "call", "shout", "--args", r#"{"text":"hi"}"#, "--plugin", HELLO_WASM])
            .env("CHITIN_HOME", home)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        started.elapsed()
    };
    run(); // warms the compile cache
    let times: Vec<Duration> = (0..10).map(|_| run()).collect();
    println!("process start to first tool result (warm cache): median {:.1} ms over 10 runs", ms(median(times)));
}

fn fifty_plugins(hello: &[u8]) {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let base = Manifest::from_component(hello).unwrap();
    for i in 0..50 {
        let mut m = base.clone();
        m.name = format!("hello{i}");
        for t in &mut m.tools {
            t.name = format!("{}_{i}", t.name);
        }
        std::fs::write(dir.join(format!("hello{i}.wasm")), manifest::pack(hello, &m).unwrap()).unwrap();
    }
    let open = || {
        let started = Instant::now();
        let app = App::open(DataDir::at(home.path()), AppOptions::default()).unwrap();
        assert_eq!(app.catalog.iter().count(), 51);
        started.elapsed()
    };
    let times: Vec<Duration> = (0..5).map(|_| open()).collect();
    println!("ready with 50 installed plugins (in process, manifests + registry): median {:.1} ms", ms(median(times)));
    let run = || {
        let started = Instant::now();
        let out = Command::new(CHITIN_BIN).args(["tool", "call", "list_dir", "--args", "{}"]).env("CHITIN_HOME", home.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        started.elapsed()
    };
    run();
    let times: Vec<Duration> = (0..5).map(|_| run()).collect();
    println!("process start with 50 installed plugins to a tool result (warm): median {:.1} ms", ms(median(times)));
}

/// One channel callback as the channel manager will make it: a fresh
/// instance of the echo channel, `poll-response` with one update, the step
/// checked against its bounds, the store dropped; and `poll-request`.
async fn channel_callback(home: &Path) {
    use chitin::plugins::channel::{Callback, HttpResponse};
    let bytes: Arc<[u8]> = std::fs::read(ECHO_CHANNEL_WASM).expect("echo-channel is built by host/build.rs").into();
    let runtime = PluginRuntime::new(RuntimeConfig { workspace: home.to_path_buf(), cache_dir: None, limits: Default::default() }).unwrap();
    let plugin = runtime.load(PluginSource::File(ECHO_CHANNEL_WASM.into()), bytes.clone(), &Default::default()).unwrap();
    runtime.prepare(&plugin).await.unwrap();
    let response = HttpResponse { status: 200, headers: vec![], body: br#"{"updates":[{"id":7,"text":"hello"}]}"#.to_vec() };
    let state = b"6".to_vec();
    for _ in 0..200 {
        runtime.channel_step(&plugin, Callback::PollResponse(&response), &state).await.unwrap();
    }
    let mut step = Vec::with_capacity(5000);
    let mut request = Vec::with_capacity(5000);
    for _ in 0..5000 {
        let started = Instant::now();
        let next = runtime.channel_step(&plugin, Callback::PollResponse(&response), &state).await.unwrap();
        step.push(started.elapsed());
        assert_eq!(next.state, b"8");
        let started = Instant::now();
        runtime.channel_poll_request(&plugin, &next.state).await.unwrap();
        request.push(started.elapsed());
    }
    let (p50, p99) = percentiles(&mut step);
    let (r50, r99) = percentiles(&mut request);
    println!(
        "channel callback (instantiate + poll-response with 1 update + bounds + drop, echo-channel {} KiB): p50 {:.1} µs, p99 {:.1} µs; poll-request p50 {:.1} µs, p99 {:.1} µs (target ≤ 50 µs)",
        bytes.len() / 1024,
        us(p50),
        us(p99),
        us(r50),
        us(r99)
    );
}

/// A 1 MiB response (with the value in it twice) as hyper hands it over,
/// 16 KiB a frame.
fn one_mib(value: &str) -> Vec<bytes::Bytes> {
    let mut body = vec![b'a'; 1 << 20];
    for at in [1000, 700_000] {
        body[at..at + value.len()].copy_from_slice(value.as_bytes());
    }
    body.chunks(16 * 1024).map(bytes::Bytes::copy_from_slice).collect()
}

/// The body alone: streamed through [`RedactingBody`] and collected, vs
/// collected as it is. Medians of 200.
async fn redaction_body() {
    use chitin::plugins::manifest::channel::{Injection, SecretSpec};
    use chitin::plugins::redact::RedactingBody;
    use http_body_util::BodyExt;
    let value = "123456:ABC-real-token-value";
    let spec = SecretSpec { name: "bot_token".into(), audience: Some("api.telegram.org".into()), inject: vec![Injection::Path] };
    let secrets = chitin::plugins::secrets::Secrets::new(&[spec], |_| Some(value)).unwrap();
    let redactor = secrets.redactor().unwrap().clone();
    let chunks = one_mib(value);
    let body = || {
        let frames = chunks.iter().cloned().map(|c| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(c))).collect::<Vec<_>>();
        http_body_util::StreamBody::new(futures::stream::iter(frames))
    };
    let (mut plain, mut redacted) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let started = Instant::now();
        let out = body().collect().await.unwrap().to_bytes();
        plain.push(started.elapsed());
        assert_eq!(out.len(), 1 << 20);
        let started = Instant::now();
        let out = RedactingBody::new(body(), &redactor, |_, e| e).collect().await.unwrap().to_bytes();
        redacted.push(started.elapsed());
        assert!(!out.windows(value.len()).any(|w| w == value.as_bytes()));
    }
    let (plain, redacted) = (median(plain), median(redacted));
    println!(
        "redaction, 1 MiB body in 16 KiB frames: plain {:.3} ms, redacted {:.3} ms, overhead {:.3} ms (target ≤ 2 ms), ratio {:.2}x",
        ms(plain),
        ms(redacted),
        ms(redacted.saturating_sub(plain)),
        redacted.as_secs_f64() / plain.as_secs_f64()
    );
}

/// A whole call: the hostile guest GETs a 1 MiB response from a server on
/// 127.0.0.1 through `wasi:http` and returns it, with its secret set (every
/// response redacted) and without (none). Medians of 20 each, interleaved.
async fn redaction_call(home: &Path) {
    use chitin::plugins::grants::SecretValues;
    use chitin::plugins::{GrantConfig, Limits};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let value = "777:bench-token-value";
    let body: Vec<u8> = one_mib(value).concat();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut read = 0;
                while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf[read..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                }
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            });
        }
    });
    let bytes: Arc<[u8]> = std::fs::read(HOSTILE_WASM).expect("the hostile guest is built by host/build.rs").into();
    let limits = Limits { max_output_kb: 8 * 1024, ..Limits::default() };
    let runtime = PluginRuntime::new(RuntimeConfig { workspace: home.to_path_buf(), cache_dir: Some(home.join("bench-cache")), limits }).unwrap();
    let grant = |secret: bool| GrantConfig {
        network: vec!["127.0.0.1".into()],
        secrets: if secret { SecretValues([("token".to_string(), value.to_string())].into()) } else { SecretValues::default() },
        ..GrantConfig::default()
    };
    let with = runtime.load(PluginSource::File(HOSTILE_WASM.into()), bytes.clone(), &grant(true)).unwrap();
    let without = runtime.load(PluginSource::File(HOSTILE_WASM.into()), bytes.clone(), &grant(false)).unwrap();
    let ctx = CallContext { session_key: "bench:1".into(), channel: "bench".into(), chat_id: "1".into(), call_id: "c".into() };
    let args = json!({"url": format!("http://{addr}/big")}).to_string();
    let (mut plain, mut redacted) = (Vec::new(), Vec::new());
    for round in 0..23 {
        let started = Instant::now();
        let out = runtime.call(&without, "http_request", &args, &ctx, None).await.unwrap();
        let took = started.elapsed();
        assert!(out.len() > 2 << 20);
        let started = Instant::now();
        let out = runtime.call(&with, "http_request", &args, &ctx, None).await.unwrap();
        let took_redacted = started.elapsed();
        assert!(out.len() > 2 << 20);
        if round >= 3 {
            plain.push(took);
            redacted.push(took_redacted);
        }
    }
    let (plain, redacted) = (median(plain), median(redacted));
    println!(
        "redaction, whole wasi:http call reading 1 MiB (hostile guest, hex result): unredacted {:.2} ms, redacted {:.2} ms, overhead {:.2} ms (target ≤ 2 ms), ratio {:.3}x",
        ms(plain),
        ms(redacted),
        ms(redacted.saturating_sub(plain)),
        redacted.as_secs_f64() / plain.as_secs_f64()
    );
}

fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    (at(0.50), at(0.99))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

