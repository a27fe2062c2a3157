//! The channel world through the plugin runtime: a real `chitin:plugin@0.2.0`
//! channel component (`tests/guests/echo-channel`) driven callback by
//! callback, with the state carried by the test as the channel manager will
//! carry it; its hostile behaviours against the runtime's bounds; and 0.1.0
//! and 0.2.0 components of both worlds side by side in one runtime.

use std::time::{Duration, Instant};

use chitin::plugins::channel::{
    Action, Callback, ChatStatus, HttpMethod, HttpResponse, Inbound, Outgoing, SocketEvent, Step, Trigger, WebhookRequest,
    MAX_ACTIONS, MAX_STATE_BYTES,
};
use chitin::plugins::manifest::{self, Manifest};
use chitin::plugins::world::World;
use chitin::plugins::{ChannelFailure, GrantConfig, Limits, PluginError, PluginSource, WorkspaceAccess};
use chitin_testing::{ECHO_CHANNEL_WASM, ECHO_TOOL_V2_WASM, HELLO_WASM, HOSTILE_WASM, OnePlugin, guest_bytes};
use serde_json::json;

fn echo_channel() -> OnePlugin {
    OnePlugin::new(ECHO_CHANNEL_WASM, GrantConfig::default(), Limits { timeout_ms: 1_000, memory_mb: 64, ..Limits::default() })
}

fn updates(list: &[(u64, &str)]) -> HttpResponse {
    let updates: Vec<_> = list.iter().map(|(id, text)| json!({"id": id, "text": text})).collect();
    HttpResponse { status: 200, headers: vec![], body: json!({ "updates": updates }).to_string().into_bytes() }
}

async fn poll(host: &OnePlugin, response: &HttpResponse, state: &[u8]) -> Result<Step, PluginError> {
    host.runtime.channel_step(&host.plugin, Callback::PollResponse(response), state).await
}

fn emitted(step: &Step) -> Vec<&Inbound> {
    step.actions.iter().filter_map(|a| if let Action::Emit(m) = a { Some(m) } else { None }).collect()
}

/// The channel still steps correctly from `state` after whatever happened.
async fn assert_recovers(host: &OnePlugin, state: &[u8]) {
    let step = poll(host, &updates(&[(41, "still here")]), state).await.expect("the call after a failure works");
    assert_eq!(emitted(&step)[0].text, "still here");
    assert_eq!(step.state, b"42");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poll_round_trip_moves_the_offset_in_the_state_the_caller_carries() {
    let host = echo_channel();
    assert_eq!(host.plugin.world, World::ChannelV0_2);
    let channel = host.plugin.manifest.channel.as_ref().expect("the manifest's channel section is read at load");
    assert_eq!(channel.secrets[0].name, "token");

    let start = host.runtime.channel_step(&host.plugin, Callback::Start { config: "{}" }, b"").await.unwrap();
    assert!(start.state.is_empty());
    assert!(matches!(start.actions.as_slice(), [Action::PollAfter(0)]), "{:?}", start.actions);

    let mut state: Vec<u8> = start.state;
    let request = host.runtime.channel_poll_request(&host.plugin, &state).await.unwrap();
    assert_eq!(request.method, HttpMethod::Get);
    assert_eq!(request.url, "https://api.example.test/bot{{secret:token}}/getUpdates?offset=0&timeout=30");

    let step = poll(&host, &updates(&[(5, "hello"), (6, "/start")]), &state).await.unwrap();
    let messages = emitted(&step);
    assert_eq!(messages.iter().map(|m| m.event_id.as_str()).collect::<Vec<_>>(), ["upd-5", "upd-6"]);
    assert_eq!(messages[0].text, "hello");
    assert_eq!(messages[0].trigger, Trigger::empty());
    assert_eq!(messages[1].trigger, Trigger::COMMAND);
    assert!(matches!(step.actions.last(), Some(Action::PollAfter(0))));
    assert_eq!(step.state, b"7");
    state = step.state;

    // The next poll asks past what was emitted: the committed state is the
    // only memory the channel has (every callback is a fresh instance).
    let request = host.runtime.channel_poll_request(&host.plugin, &state).await.unwrap();
    assert!(request.url.contains("offset=7&"), "{}", request.url);
    let idle = poll(&host, &updates(&[]), &state).await.unwrap();
    assert!(emitted(&idle).is_empty());
    assert_eq!(idle.state, b"7");

    // The same response again from the same state is the same step: a
    // caller that did not commit (a crash) re-emits, and dedups by event id.
    let again = poll(&host, &updates(&[(7, "once")]), &state).await.unwrap();
    let twice = poll(&host, &updates(&[(7, "once")]), &state).await.unwrap();
    assert_eq!(emitted(&again)[0].event_id, emitted(&twice)[0].event_id);
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_socket_timer_deliver_stream_and_status_callbacks_answer() {
    let host = echo_channel();
    let request = WebhookRequest {
        method: HttpMethod::Post,
        path: "/".into(),
        query: String::new(),
        headers: vec![],
        body: json!({"updates": [{"id": 3, "text": "via webhook"}]}).to_string().into_bytes(),
    };
    let step = host.runtime.channel_step(&host.plugin, Callback::Webhook(&request), b"").await.unwrap();
    assert_eq!(emitted(&step)[0].text, "via webhook");
    assert!(step.actions.iter().any(|a| matches!(a, Action::Respond(r) if r.status == 200 && r.body == b"ok")));
    assert_eq!(step.state, b"4");

    let event = SocketEvent::Text("frame text".into());
    let step = host.runtime.channel_step(&host.plugin, Callback::Socket { name: "gw", event: &event }, b"4").await.unwrap();
    assert_eq!(emitted(&step)[0].event_id, "gw-10");
    assert_eq!(step.state, b"4");
    let step = host.runtime.channel_step(&host.plugin, Callback::Timer { name: "tick" }, b"4").await.unwrap();
    assert!(matches!(step.actions.as_slice(), [Action::PollAfter(0)]));

    let outgoing = Outgoing { chat_id: "chat-1".into(), thread: None, text: "a reply".into(), reply_to: None, media: vec![] };
    assert_eq!(host.runtime.channel_deliver(&host.plugin, &outgoing).await.unwrap(), ["chat-1:7"]);
    let handle = host.runtime.channel_stream_update(&host.plugin, "chat-1", None, None, "a re", false).await.unwrap();
    assert_eq!(handle, "stream-1");
    let handle = host.runtime.channel_stream_update(&host.plugin, "chat-1", None, Some(&handle), "a reply", true).await.unwrap();
    assert_eq!(handle, "stream-1");
    host.runtime.channel_set_status(&host.plugin, "chat-1", ChatStatus::Typing).await.unwrap();

    let trap = Outgoing { text: "trap".into(), ..outgoing.clone() };
    let err = host.runtime.channel_deliver(&host.plugin, &trap).await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err:?}");
    assert!(err.to_string().contains("channel callback `deliver`"), "{err}");
    assert_eq!(host.runtime.channel_deliver(&host.plugin, &outgoing).await.unwrap(), ["chat-1:7"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trap_is_named_and_the_next_call_works() {
    let host = echo_channel();
    let err = poll(&host, &updates(&[(1, "trap")]), b"0").await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err:?}");
    assert!(err.to_string().contains("channel callback `poll-response` of plugin echo-channel"), "{err}");
    assert_recovers(&host, b"0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_loop_times_out_and_the_next_call_works() {
    let host = echo_channel();
    let started = Instant::now();
    let err = poll(&host, &updates(&[(1, "loop")]), b"0").await.unwrap_err();
    assert!(matches!(err, PluginError::Timeout { limit_ms: 1_000, .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(4), "stopped promptly: {:?}", started.elapsed());
    assert_recovers(&host, b"0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_huge_state_is_refused_and_the_next_call_works() {
    let host = echo_channel();
    let err = poll(&host, &updates(&[(1, "huge-state")]), b"0").await.unwrap_err();
    match &err {
        PluginError::StateTooLarge { size, limit, .. } => assert_eq!((*size, *limit), (1 << 20, MAX_STATE_BYTES)),
        other => panic!("expected StateTooLarge, got {other:?}"),
    }
    assert!(err.to_string().contains("not committed"), "{err}");
    assert_recovers(&host, b"0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_emits_is_refused_and_the_next_call_works() {
    let host = echo_channel();
    let err = poll(&host, &updates(&[(1, "flood")]), b"0").await.unwrap_err();
    match &err {
        // 10 000 emits and the trailing poll-after.
        PluginError::TooManyActions { count, limit, .. } => assert_eq!((*count, *limit), (10_001, MAX_ACTIONS)),
        other => panic!("expected TooManyActions, got {other:?}"),
    }
    assert_recovers(&host, b"0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_message_text_is_refused_and_the_next_call_works() {
    let host = echo_channel();
    let err = poll(&host, &updates(&[(1, "long-text")]), b"0").await.unwrap_err();
    match &err {
        PluginError::FieldTooLarge { field, size, .. } => {
            assert_eq!(field, "actions[0].emit.text");
            assert_eq!(*size, 100 * 1024);
        }
        other => panic!("expected FieldTooLarge, got {other:?}"),
    }
    assert_recovers(&host, b"0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_channels_own_errors_keep_their_kind() {
    let host = echo_channel();
    let err = poll(&host, &updates(&[(1, "fail")]), b"0").await.unwrap_err();
    assert!(matches!(&err, PluginError::Channel { kind: ChannelFailure::Transient, message, .. } if message.contains("502")), "{err:?}");
    let err = poll(&host, &updates(&[(1, "fatal")]), b"0").await.unwrap_err();
    assert!(matches!(&err, PluginError::Channel { kind: ChannelFailure::Fatal, message, .. } if message.contains("401")), "{err:?}");
    let status = HttpResponse { status: 409, headers: vec![], body: vec![] };
    let err = poll(&host, &status, b"0").await.unwrap_err();
    assert!(matches!(&err, PluginError::Channel { kind: ChannelFailure::Fatal, .. }), "{err:?}");
    assert_recovers(&host, b"0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_0_1_0_tool_component_loads_and_runs_unchanged() {
    // The hostile guest and the SDK example are built against
    // `wit/chitin.wit` (0.1.0), which 0.2.0 did not touch.
    let host = OnePlugin::new(HOSTILE_WASM, GrantConfig::default(), Limits::default());
    assert_eq!(host.plugin.world, World::ToolV0_1);
    assert_eq!(host.call("echo", json!({"text": "0.1.0 still works"})).await.unwrap(), "0.1.0 still works");
    let hello = OnePlugin::new(HELLO_WASM, GrantConfig::default(), Limits::default());
    assert_eq!(hello.plugin.world, World::ToolV0_1);
    let fs = chitin::plugins::builtin("fs").expect("fs is built in");
    assert_eq!(World::detect(fs.bytes).unwrap(), World::ToolV0_1);
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_of_0_1_0_and_0_2_0_and_a_channel_of_0_2_0_run_in_one_runtime() {
    let host = OnePlugin::new(HOSTILE_WASM, GrantConfig { workspace: WorkspaceAccess::None, ..GrantConfig::default() }, Limits::default());
    let runtime = &host.runtime;
    let v2 = runtime.load(PluginSource::File(ECHO_TOOL_V2_WASM.into()), guest_bytes(ECHO_TOOL_V2_WASM), &GrantConfig::default()).unwrap();
    let channel = runtime.load(PluginSource::File(ECHO_CHANNEL_WASM.into()), guest_bytes(ECHO_CHANNEL_WASM), &GrantConfig::default()).unwrap();
    assert_eq!((host.plugin.world, v2.world, channel.world), (World::ToolV0_1, World::ToolV0_2, World::ChannelV0_2));

    let ctx = chitin::plugins::CallContext::default();
    // Interleaved, so each prepared component is used after the others.
    for round in 0..2 {
        assert_eq!(host.call("echo", json!({"text": format!("v1 {round}")})).await.unwrap(), format!("v1 {round}"));
        assert_eq!(runtime.call(&v2, "echo_v2", r#"{"text":"x"}"#, &ctx, None).await.unwrap(), r#"0.2.0 {"text":"x"}"#);
        let step = runtime.channel_step(&channel, Callback::PollResponse(&updates(&[(1, "hi")])), b"").await.unwrap();
        assert_eq!(emitted(&step)[0].text, "hi");
    }

    // Each world is asked only for what it exports.
    let err = runtime.call(&channel, "echo", "{}", &ctx, None).await.unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { world: World::ChannelV0_2, .. }), "{err:?}");
    let err = runtime.channel_step(&v2, Callback::Timer { name: "t" }, b"").await.unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { world: World::ToolV0_2, .. }), "{err:?}");
    assert!(err.to_string().contains("no channel callbacks"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_manifest_must_match_the_world_at_load() {
    let host = OnePlugin::new(HOSTILE_WASM, GrantConfig::default(), Limits::default());
    let channel_bytes = guest_bytes(ECHO_CHANNEL_WASM);
    let tool_bytes = guest_bytes(HOSTILE_WASM);
    let channel_manifest = Manifest::from_component(&channel_bytes).unwrap();
    let tool_manifest = Manifest::from_component(&tool_bytes).unwrap();

    // A channel component carrying a tool manifest, and the other way round.
    let cases = [(manifest::pack(&channel_bytes, &tool_manifest).unwrap(), "must have a `channel` section"), (
        manifest::pack(&tool_bytes, &channel_manifest).unwrap(),
        "must not have a `channel` section",
    )];
    for (bytes, expected) in cases {
        let err = host.runtime.load(PluginSource::Builtin, bytes.into(), &GrantConfig::default()).err().expect("refused at load");
        match &err {
            PluginError::Manifest { source, .. } => assert_eq!(source.field, "channel", "{err}"),
            other => panic!("expected a manifest error, got {other:?}"),
        }
        assert!(err.to_string().contains(expected), "{err}");
    }
}
