//! Token estimator benchmark. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench tokens`. Figures: first-use load of the
//! cl100k tokenizer in fresh processes; counting throughput on ~4 KB of
//! English + code; µs per typical 200-byte message; the bytes/4 fast path;
//! worst cases (100 KB without spaces, a text at the 256 KiB cap); a
//! 10 000-message prompt counted from scratch. These machines are noisy:
//! compare figures within one run.

use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

use chitin::session::Message;
use chitin::tokens::{MAX_BPE_BYTES, count_tokens, estimate_request, estimate_text_fast, warm_up};

const CHILD: &str = "CHITIN_TOKENS_BENCH_CHILD";

const PROSE: &str = "The agent host runs each tool inside a sandboxed WebAssembly component. When a user \
sends a message, the loop builds a prompt from the system instructions, the recent history, and any skills \
that are marked always-on. It then asks the model for an answer and, if the model requests tool calls, \
executes them in order and feeds the results back. Context governance keeps the request under the model's \
input budget: large tool results are compacted, old history is snipped, and consolidation summarises what \
was dropped.\n";

const CODE: &str = "fn estimate_message(message: &Message) -> usize {\n    let calls: usize = message\n        \
.tool_calls\n        .iter()\n        .map(|c| estimate_text(&c.function.name) + estimate_text(&c.function.arguments) + 4)\n        \
.sum();\n    PER_MESSAGE_OVERHEAD + estimate_text(message.text()) + calls\n}\n\
{\"role\": \"tool\", \"tool_call_id\": \"call_8f2a91\", \"content\": \"Found 12 matches in src/agent/runner.rs:\\n  \
L42: let budget = spec.context_window * 85 / 100;\"}\n";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        // A fresh process: time the load alone, and the load plus the first count.
        let started = Instant::now();
        let available = warm_up();
        let load = started.elapsed();
        black_box(count_tokens(PROSE));
        println!("{} {} {}", load.as_nanos(), started.elapsed().as_nanos(), u8::from(available));
        return;
    }
    println!("chitin token estimator benchmark (cl100k BPE, bpe-openai)");
    first_use();
    let text = english_and_code(4096);
    let message = &text[..char_boundary(&text, 200)];
    throughput("4 KB English + code", &text, 2000);
    throughput("200-byte message", message, 50_000);
    let fast = time_per_call(1_000_000, || estimate_text_fast(black_box(&text)));
    println!("estimate_text_fast (bytes/4), any size: {:.1} ns", fast * 1e9);
    worst_cases();
    session(&text);
}

fn first_use() {
    let exe = std::env::current_exe().expect("own path");
    let mut loads = Vec::new();
    let mut firsts = Vec::new();
    for _ in 0..5 {
        let out = Command::new(&exe).env(CHILD, "1").output().expect("child runs");
        let line = String::from_utf8_lossy(&out.stdout);
        let fields: Vec<u64> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        if fields.len() != 3 || fields[2] != 1 {
            println!("first use: child failed or tokenizer unavailable: {line:?}");
            return;
        }
        loads.push(Duration::from_nanos(fields[0]));
        firsts.push(Duration::from_nanos(fields[1]));
    }
    println!(
        "first use in a fresh process (median of 5): load {:.1} ms, load + first count {:.1} ms (min {:.1}, max {:.1})",
        ms(median(loads)),
        ms(median(firsts.clone())),
        ms(*firsts.iter().min().unwrap()),
        ms(*firsts.iter().max().unwrap()),
    );
    let started = Instant::now();
    warm_up();
    println!("this process: load {:.1} ms", ms(started.elapsed()));
}

fn throughput(name: &str, text: &str, iterations: usize) {
    let tokens = count_tokens(text);
    let per_call = time_per_call(iterations, || count_tokens(black_box(text)));
    println!(
        "count_tokens, {name} ({} bytes, {tokens} tokens, {:.2} bytes/token, bytes/4 says {}): {:.2} µs/call, {:.2} M tokens/s, {:.1} MB/s",
        text.len(),
        text.len() as f64 / tokens as f64,
        estimate_text_fast(text),
        per_call * 1e6,
        tokens as f64 / per_call / 1e6,
        text.len() as f64 / per_call / 1e6,
    );
}

fn worst_cases() {
    // A deterministic pseudo-random run of letters: one 100 KB pre-token.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let letters: String = (0..100_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[(state % 52) as usize])
        })
        .collect();
    let capped = english_and_code(MAX_BPE_BYTES);
    for (name, text) in [("100 KB of random letters", letters.as_str()), ("text at the 256 KiB cap", capped.as_str())] {
        let started = Instant::now();
        let tokens = count_tokens(text);
        println!("worst case, {name}: {tokens} tokens in {:.1} ms", ms(started.elapsed()));
    }
}

fn session(text: &str) {
    // 10 000 messages of 50–650 bytes: the first estimate counts them all;
    // a second one shows what caching per-message counts saves.
    let messages: Vec<Message> = (0..10_000)
        .map(|i| {
            let body = &text[..char_boundary(text, 50 + (i * 37) % 600)];
            if i % 2 == 0 { Message::user(body) } else { Message::assistant(body) }
        })
        .collect();
    let started = Instant::now();
    let tokens = estimate_request(black_box(&messages), &[]);
    println!("10 000-message prompt, first count: {tokens} tokens in {:.1} ms", ms(started.elapsed()));
    let started = Instant::now();
    let tokens = estimate_request(black_box(&messages), &[]);
    println!("10 000-message prompt, again (per-message memo, if any): {tokens} tokens in {:.2} ms", ms(started.elapsed()));
}

/// `len` bytes (or a little less, at a character boundary) of prose and code.
fn english_and_code(len: usize) -> String {
    let mut text = String::with_capacity(len + PROSE.len() + CODE.len());
    while text.len() < len {
        text.push_str(PROSE);
        text.push_str(CODE);
    }
    text.truncate(char_boundary(&text, len));
    text
}

fn char_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Seconds per call, best of 5 rounds.
fn time_per_call<T>(iterations: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..5)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..iterations {
                black_box(f());
            }
            started.elapsed().as_secs_f64() / iterations as f64
        })
        .fold(f64::MAX, f64::min)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
