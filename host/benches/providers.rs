//! Provider benchmark (issue 13). Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p chitin --bench providers`. Figures:
//! 1. per-request host overhead for a 200-message history, per provider:
//!    encoding the request body, and reading an answer (plain JSON and a
//!    server-sent-event stream) into a response;
//! 2. prompt-cache hit ratio over 20 agent turns against the mock's cache
//!    accounting (Anthropic `cache_control` breakpoints; OpenAI automatic
//!    prefix caching), through the real agent (prompt, tools, history).
//!
//! These machines are noisy: compare figures within one run.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use chitin::agent::{AgentLoop, TurnOutcome};
use chitin::app::{App, AppOptions};
use chitin::bus::MessageBus;
use chitin::config::DataDir;
use chitin::provider::openai::OpenAi;
use chitin::provider::sse::SseParser;
use chitin::provider::{Anthropic, AnthropicProvider, ChatRequest, OpenAiOptions, OpenAiProvider, Provider, RetryPolicy, StreamDecoder, Wire};
use chitin::session::{Message, ToolCall};
use chitin_testing::{MockLlm, MockReply};
use serde_json::json;

const ITERATIONS: u32 = 300;

/// A 200-message history shaped like a working session: a system prompt,
/// then rounds of user question, assistant tool call, tool result, answer.
fn history() -> Vec<Message> {
    let mut messages = vec![Message::system("You are chitin, a personal agent. ".repeat(120))];
    let mut n = 0;
    while messages.len() < 200 {
        n += 1;
        messages.push(Message::user(format!("Question {n}: what is in file {n}.txt and how does it relate to the plan?")));
        let call = ToolCall::new(format!("call_{n}"), "read_file", json!({"path": format!("notes/{n}.txt")}).to_string());
        messages.push(Message::assistant_calls(Some("Let me look.".into()), vec![call]));
        messages.push(Message::tool_result(format!("call_{n}"), "read_file", "A line of the file with some content.\n".repeat(20)));
        messages.push(Message::assistant(format!("File {n} holds the notes for step {n}; it matches the plan. ").repeat(3)));
    }
    messages.truncate(200);
    messages
}

fn tools() -> Arc<[serde_json::Value]> {
    (0..20)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i:02}"), "description": "Does one thing well, described at some length. ".repeat(4),
                "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "A path."}, "limit": {"type": "integer"}}, "required": ["path"]}}})
        })
        .collect::<Vec<_>>()
        .into()
}

fn per_request_us(mut f: impl FnMut()) -> f64 {
    f(); // warm
    let started = Instant::now();
    for _ in 0..ITERATIONS {
        f();
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(ITERATIONS)
}

fn stream_us<W: Wire>(wire: &W, body: &str) -> f64 {
    per_request_us(|| {
        let mut parser = SseParser::default();
        let mut decoder = wire.stream();
        for event in parser.push(body.as_bytes()).into_iter().chain(parser.finish()) {
            if !decoder.event(&event, None) {
                break;
            }
        }
        black_box(decoder.finish(None));
    })
}

fn overhead() {
    let request = ChatRequest { model: "bench".into(), messages: history(), tools: tools(), max_tokens: 4096, temperature: None };
    let answer_text = "Here is what I found in the files, summarised for you. ".repeat(8);
    let openai_plain = json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": answer_text,
        "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 9000, "completion_tokens": 120}})
    .to_string();
    let anthropic_plain = json!({"id": "msg", "type": "message", "role": "assistant", "content": [{"type": "text", "text": answer_text},
        {"type": "tool_use", "id": "toolu_x", "name": "read_file", "input": {"path": "a.txt"}}], "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 120, "cache_read_input_tokens": 8900, "cache_creation_input_tokens": 0}})
    .to_string();
    let words: Vec<String> = answer_text.split_inclusive(' ').map(str::to_string).collect();
    let openai_sse: String = words.iter().map(|w| format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {"content": w}}]}))).collect::<String>()
        + "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let anthropic_sse: String = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100}}}\n\n\
        event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
        .to_string()
        + &words.iter().map(|w| format!("event: content_block_delta\ndata: {}\n\n", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}))).collect::<String>()
        + "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":120}}\n\n\
           event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    let anthropic = Anthropic::default();
    let rows = [
        ("openai", OpenAi.encode(&request, false).unwrap().len(), per_request_us(|| { black_box(OpenAi.encode(&request, true).unwrap()); }),
            per_request_us(|| { black_box(OpenAi.decode(&openai_plain, "bench", "")); }), stream_us(&OpenAi, &openai_sse)),
        ("anthropic", anthropic.encode(&request, false).unwrap().len(), per_request_us(|| { black_box(anthropic.encode(&request, true).unwrap()); }),
            per_request_us(|| { black_box(anthropic.decode(&anthropic_plain, "bench", "")); }), stream_us(&anthropic, &anthropic_sse)),
    ];
    println!("per-request host overhead, 200-message history + 20 tools ({ITERATIONS} iterations):");
    println!("  {:<10} {:>10} {:>12} {:>14} {:>16}", "provider", "body KiB", "encode µs", "parse plain µs", "parse stream µs");
    for (name, bytes, encode, plain, stream) in rows {
        println!("  {name:<10} {:>10.1} {encode:>12.1} {plain:>14.1} {stream:>16.1}", bytes as f64 / 1024.0);
    }
    println!("  (stream: {} text deltas per answer)", words.len());
}

async fn cache_ratio(anthropic: bool) {
    let script: Vec<MockReply> = (0..20).map(|i| if i % 2 == 0 { MockReply::tool_call("list_dir", "{}") } else { MockReply::text(format!("Answer {i}.")) }).collect();
    let mock = MockLlm::start(script.into_iter().cycle().take(40).collect::<Vec<_>>()).with_openai_cache();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), format!("[agent]\nmodel = \"bench\"\nstream = false\n[providers.openai]\nbase_url = \"{}\"\n", mock.base_url())).unwrap();
    let app = App::open(DataDir::at(home.path()), AppOptions::default()).unwrap();
    let options = OpenAiOptions { base_url: mock.base_url(), api_key: Some("bench".into()), retry: RetryPolicy::none(), stream: false, ..OpenAiOptions::default() };
    let provider: Arc<dyn Provider> = if anthropic {
        Arc::new(AnthropicProvider::anthropic(Anthropic::default(), options).unwrap())
    } else {
        Arc::new(OpenAiProvider::new(options).unwrap())
    };
    let agent = AgentLoop::new(Arc::new(app.agent_core(provider, Arc::new(MessageBus::new()))));
    for turn in 0..20 {
        match agent.process_direct(&format!("Turn {turn}: what is in the workspace?"), "cli:bench", chitin::agent::sink::silent()).await {
            TurnOutcome::Done(_) => {}
            _ => panic!("turn failed"),
        }
    }
    let stats = mock.cache_stats();
    println!(
        "  {:<10} {:>3} requests, {:>8} prompt tokens, {:>8} read from cache, {:>7} written: hit ratio {:.3}",
        if anthropic { "anthropic" } else { "openai" },
        mock.request_count(),
        stats.prompt_tokens,
        stats.read_tokens,
        stats.written_tokens,
        stats.hit_ratio()
    );
}

fn main() {
    overhead();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    println!("prompt-cache hit ratio over 20 agent turns (mock accounting, tokens ≈ bytes/4):");
    runtime.block_on(cache_ratio(true));
    runtime.block_on(cache_ratio(false));
}
