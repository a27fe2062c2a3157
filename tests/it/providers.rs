//! The same agent scenarios against both providers (issue 13): OpenAI chat
//! completions and Anthropic Messages, each plain and streamed, over the
//! one scripted mock (`MockLlm` renders each reply in the API the request
//! came in). Each scenario also checks the request bodies against the
//! documented shapes of its API.

use std::time::{Duration, Instant};

use chitin::provider::{REASONING, THINKING_BLOCKS};
use chitin::session::Role;
use chitin_testing::{MockLlm, MockReply};
use chitin_testing::agent::{TEST_ANTHROPIC_KEY, TestAgent, TestApi};
use serde_json::{Value, json};

/// Every (api, streaming) pair.
const CASES: [(TestApi, bool); 4] = [(TestApi::OpenAi, false), (TestApi::OpenAi, true), (TestApi::Anthropic, false), (TestApi::Anthropic, true)];

fn agent(api: TestApi, stream: bool, script: Vec<MockReply>) -> TestAgent {
    TestAgent::over(MockLlm::start(script), api, stream)
}

/// The documented top-level shape of one request body.
fn check_shape(api: TestApi, body: &Value, stream: bool) {
    assert_eq!(body["model"], "mock-model", "{body}");
    assert!(body["max_tokens"].as_u64().is_some(), "{body}");
    match api {
        TestApi::OpenAi => {
            let messages = body["messages"].as_array().expect("messages");
            assert_eq!(messages[0]["role"], "system");
            assert!(body["tools"].as_array().map_or(&[][..], Vec::as_slice).iter().all(|t| t["type"] == "function" && t["function"]["name"].is_string()));
            assert_eq!(body["stream"], stream);
        }
        TestApi::Anthropic => {
            // System blocks at the top, never a system message.
            let system = body["system"].as_array().expect("system blocks");
            assert_eq!(system[0]["type"], "text");
            assert_eq!(system.last().unwrap()["cache_control"], json!({"type": "ephemeral"}));
            let messages = body["messages"].as_array().expect("messages");
            assert_eq!(messages[0]["role"], "user");
            for pair in messages.windows(2) {
                assert_ne!(pair[0]["role"], pair[1]["role"], "roles alternate: {body}");
            }
            for message in messages {
                assert!(matches!(message["role"].as_str(), Some("user" | "assistant")), "{message}");
                assert!(message["content"].as_array().is_some_and(|c| !c.is_empty()), "content is a non-empty block list: {message}");
            }
            // A request without tools (a continuation) has no `tools`.
            let tools = body["tools"].as_array().map_or(&[][..], Vec::as_slice);
            assert!(tools.iter().all(|t| t["name"].is_string() && t["input_schema"]["type"] == "object" && t.get("type").is_none()), "{body}");
            if let Some(last) = tools.last() {
                assert_eq!(last["cache_control"], json!({"type": "ephemeral"}));
            }
            assert!(body.to_string().matches("cache_control").count() <= 4, "at most 4 breakpoints");
            if stream {
                assert_eq!(body["stream"], true);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_text_answer_and_the_request_headers() {
    for (api, stream) in CASES {
        let t = agent(api, stream, vec![MockReply::text("Hello there.")]);
        assert_eq!(t.ask("hi").await, "Hello there.", "{api:?} stream={stream}");
        let request = &t.mock.requests()[0];
        check_shape(api, request, stream);
        let headers = &t.mock.request_headers()[0];
        match api {
            TestApi::OpenAi => assert!(headers.iter().all(|(name, _)| name != "x-api-key" && name != "anthropic-version"), "{headers:?}"),
            TestApi::Anthropic => {
                assert!(headers.contains(&("x-api-key".into(), TEST_ANTHROPIC_KEY.into())), "{headers:?}");
                assert!(headers.contains(&("anthropic-version".into(), chitin::provider::anthropic::API_VERSION.into())), "{headers:?}");
                assert!(headers.iter().all(|(name, _)| name != "authorization"), "no bearer token: {headers:?}");
            }
        }
        let deltas: String = t.recorder.events().iter().filter_map(|e| e.strip_prefix("delta:")).collect();
        assert_eq!(deltas, if stream { "Hello there." } else { "" }, "{api:?} stream={stream}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_runs_and_its_result_goes_back_in_the_apis_shape() {
    for (api, stream) in CASES {
        let t = agent(api, stream, vec![MockReply::tool_call("list_dir", "{}"), MockReply::text("Empty.")]);
        std::fs::write(t.workspace().join("note.txt"), "x").unwrap();
        assert_eq!(t.ask("what is here?").await, "Empty.", "{api:?} stream={stream}");
        let requests = t.mock.requests();
        assert_eq!(requests.len(), 2);
        let second = &requests[1];
        check_shape(api, second, stream);
        match api {
            TestApi::OpenAi => {
                let messages = second["messages"].as_array().unwrap();
                let call = &messages[messages.len() - 2];
                assert_eq!(call["tool_calls"][0]["function"]["name"], "list_dir");
                let result = messages.last().unwrap();
                assert_eq!(result["role"], "tool");
                assert_eq!(result["tool_call_id"], call["tool_calls"][0]["id"]);
                assert!(result["content"].as_str().unwrap().contains("note.txt"));
            }
            TestApi::Anthropic => {
                let messages = second["messages"].as_array().unwrap();
                let assistant = &messages[messages.len() - 2];
                assert_eq!(assistant["role"], "assistant");
                let tool_use = assistant["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_use").expect("tool_use block");
                assert_eq!(tool_use["name"], "list_dir");
                assert_eq!(tool_use["input"], json!({}));
                let user = messages.last().unwrap();
                assert_eq!(user["role"], "user");
                let result = &user["content"][0];
                assert_eq!(result["type"], "tool_result");
                assert_eq!(result["tool_use_id"], tool_use["id"]);
                assert!(result["content"].as_str().unwrap().contains("note.txt"));
                assert_eq!(result["cache_control"], json!({"type": "ephemeral"}), "the conversation end is a cache breakpoint");
            }
        }
        let session = t.stored("cli:test");
        assert!(session.messages.iter().any(|m| m.role == Role::Tool && m.text().contains("note.txt")));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_cut_at_max_tokens_is_continued() {
    for (api, stream) in CASES {
        let t = agent(api, stream, vec![MockReply::Length("The first half, ".into()), MockReply::text("and the second.")]);
        assert_eq!(t.ask("tell me").await, "The first half, and the second.", "{api:?} stream={stream}");
        assert_eq!(t.mock.request_count(), 2);
        let second = &t.mock.requests()[1];
        let text = second.to_string();
        assert!(text.contains("cut off by the length limit"), "{api:?}: the continuation prompt: {text}");
        if api == TestApi::Anthropic {
            check_shape(api, second, stream);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn overload_and_server_errors_are_retried_and_retry_after_is_honoured() {
    for (api, stream) in CASES {
        let overloaded = match api {
            TestApi::OpenAi => MockReply::api_error(503, "overloaded"),
            TestApi::Anthropic => MockReply::anthropic_error(529, "Overloaded"),
        };
        let limited = MockReply::Status { status: 429, body: "{\"error\":{\"message\":\"slow down\"}}".into(), retry_after: Some("1".into()) };
        let t = agent(api, stream, vec![overloaded, limited, MockReply::text("Finally.")]);
        let started = Instant::now();
        assert_eq!(t.ask("hi").await, "Finally.", "{api:?} stream={stream}");
        assert_eq!(t.mock.request_count(), 3);
        assert!(started.elapsed() >= Duration::from_millis(950), "Retry-After: 1 was waited: {:?}", started.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_key_is_not_retried() {
    for (api, stream) in CASES {
        let refused = match api {
            TestApi::OpenAi => MockReply::api_error(401, "Incorrect API key"),
            TestApi::Anthropic => MockReply::anthropic_error(401, "invalid x-api-key"),
        };
        let t = agent(api, stream, vec![refused]);
        let reply = t.ask("hi").await;
        assert!(reply.contains("refused the API key"), "{api:?}: {reply}");
        assert_eq!(t.mock.request_count(), 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reasoning_is_kept_shown_and_replayed_only_where_required() {
    for (api, stream) in CASES {
        let script = vec![MockReply::thinking("I should list the files.", MockReply::tool_call("list_dir", "{}")), MockReply::text("Done.")];
        let t = agent(api, stream, script);
        assert_eq!(t.ask("look").await, "Done.", "{api:?} stream={stream}");
        assert!(t.recorder.events().contains(&"reasoning:I should list the files.".to_string()), "{api:?}: {:?}", t.recorder.events());
        let session = t.stored("cli:test");
        let calling = session.messages.iter().find(|m| !m.tool_calls.is_empty()).expect("the tool-calling message");
        assert_eq!(calling.meta.get(REASONING).and_then(Value::as_str), Some("I should list the files."));
        let second = &t.mock.requests()[1];
        match api {
            TestApi::OpenAi => {
                // Not replayed: DeepSeek refuses `reasoning_content` in requests.
                assert!(!second.to_string().contains("reasoning"), "{second}");
                assert!(calling.meta.get(THINKING_BLOCKS).is_none());
            }
            TestApi::Anthropic => {
                assert!(calling.meta.get(THINKING_BLOCKS).is_some(), "the thinking blocks are kept in history: {calling:?}");
                let assistant = second["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "assistant").unwrap();
                let first = &assistant["content"][0];
                assert_eq!(first["type"], "thinking", "thinking comes first, as the API requires: {assistant}");
                assert_eq!(first["thinking"], "I should list the files.");
                assert!(first["signature"].as_str().unwrap().starts_with("mock-sig-"), "signature kept: {first}");
                check_shape(api, second, stream);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_prompt_caching_reads_the_stable_prefix_on_the_next_turn() {
    let t = agent(TestApi::Anthropic, false, vec![MockReply::text("One."), MockReply::text("Two."), MockReply::text("Three.")]);
    for question in ["first?", "second?", "third?"] {
        t.ask(question).await;
    }
    let stats = t.mock.cache_stats();
    eprintln!("anthropic cache over 3 turns: {stats:?}, hit ratio {:.2}", stats.hit_ratio());
    // Turn 1 writes tools + system + conversation; turns 2 and 3 read all of
    // the previous request back.
    assert!(stats.read_tokens > 0 && stats.hit_ratio() > 0.5, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_500_storm_falls_back_to_the_next_model_and_status_says_so() {
    use chitin::provider::{FallbackEntry, FallbackProvider, ModelHandle, OpenAiOptions, OpenAiProvider, RetryPolicy};
    use std::sync::Arc;
    let storm = MockLlm::start(chitin_testing::Script::default().or_else(MockReply::api_error(500, "upstream down")));
    let backup = MockLlm::start(vec![MockReply::text("From the backup.")]);
    let options = |url: String| OpenAiOptions { retry: RetryPolicy::fast(), stream: false, ..OpenAiOptions::new(url) };
    let primary = Arc::new(OpenAiProvider::new(options(storm.base_url())).unwrap());
    let secondary = Arc::new(OpenAiProvider::new(options(backup.base_url())).unwrap());
    let handle = ModelHandle { provider: "backup".into(), model: "backup-model".into(), context_window: 65_536, max_output_tokens: 1024 };
    let provider = FallbackProvider::new(primary, "mock/mock-model", vec![FallbackEntry { handle, provider: secondary }]);
    let t = TestAgent::with_provider(storm, Arc::new(provider));
    assert_eq!(t.ask("hi").await, "From the backup.");
    assert_eq!(t.mock.request_count(), 4, "the main model got its four attempts first");
    let sent = &backup.requests()[0];
    assert_eq!(sent["model"], "backup-model");
    assert_eq!(sent["max_tokens"], 1024, "the fallback's own output limit");
    let status = t.ask("/status").await;
    assert!(status.contains("fell back from mock/mock-model to backup/backup-model") && status.contains("upstream down"), "{status}");

    // A request the API rejects does not fall back.
    let rejecting = MockLlm::start(vec![MockReply::api_error(400, "bad request shape")]);
    let backup = MockLlm::start(vec![MockReply::text("never")]);
    let handle = ModelHandle { provider: "backup".into(), model: "b".into(), context_window: 65_536, max_output_tokens: 1024 };
    let provider = FallbackProvider::new(
        Arc::new(OpenAiProvider::new(options(rejecting.base_url())).unwrap()),
        "mock/mock-model",
        vec![FallbackEntry { handle, provider: Arc::new(OpenAiProvider::new(options(backup.base_url())).unwrap()) }],
    );
    let t = TestAgent::with_provider(rejecting, Arc::new(provider));
    assert!(t.ask("hi").await.contains("bad request shape"));
    assert_eq!(backup.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fallback_with_a_smaller_context_window_governs_the_rest_of_the_run() {
    use chitin::provider::{FallbackEntry, FallbackProvider, ModelHandle, OpenAiOptions, OpenAiProvider, RetryPolicy};
    use std::sync::Arc;
    // ~3 500 tokens of file (under the tool-result cap, so it is sent
    // inline): far inside the main model's window, over a 6 000-token
    // fallback's input budget once the system prompt and tools are added.
    let big: String = (0..560).map(|i| format!("line {i:03} of the big file\n")).collect();
    let second_request = |context_window: usize| {
        let big = big.clone();
        async move {
            let storm = MockLlm::start(chitin_testing::Script::default().or_else(MockReply::api_error(500, "upstream down")));
            let backup = MockLlm::start(vec![MockReply::tool_call("read_file", "{\"path\": \"big.txt\"}"), MockReply::text("Read it.")]);
            let options = |url: String| OpenAiOptions { retry: RetryPolicy::fast(), stream: false, ..OpenAiOptions::new(url) };
            let handle = ModelHandle { provider: "backup".into(), model: "backup-model".into(), context_window, max_output_tokens: 1024 };
            let provider = FallbackProvider::new(
                Arc::new(OpenAiProvider::new(options(storm.base_url())).unwrap()),
                "mock/mock-model",
                vec![FallbackEntry { handle, provider: Arc::new(OpenAiProvider::new(options(backup.base_url())).unwrap()) }],
            );
            let t = TestAgent::with_provider(storm, Arc::new(provider));
            std::fs::write(t.workspace().join("big.txt"), &big).unwrap();
            assert_eq!(t.ask("read big.txt").await, "Read it.");
            assert_eq!(backup.request_count(), 2);
            backup.requests()[1].to_string()
        }
    };
    let roomy = second_request(200_000).await;
    assert!(roomy.contains("line 559 of the big file"), "a roomy fallback gets the result as the main model would");
    assert!(!roomy.contains("compacted to fit the context window"));
    let tight = second_request(6_000).await;
    assert!(tight.contains("compacted to fit the context window"), "the fallback's own window governed the request: {}", &tight[..tight.len().min(2000)]);
    assert!(!tight.contains("line 559 of the big file"));
}
