//! The built-in `telegram` channel component (`plugins/telegram`, world
//! `channel-plugin` of `chitin:plugin@0.2.0`) driven through the plugin
//! runtime against `MockTelegram`, the way the channel manager will drive
//! it: the test calls `poll-request`, runs the request it returns with
//! reqwest (substituting `{{secret:bot_token}}` itself — the host's job),
//! hands the answer to `poll-response`, and carries the committed state
//! from step to step. Nothing here calls the crate's parsers directly
//! except where the 0.2 WIT gives the component no way to reach the mock
//! (`deliver` sees no config, so it always targets api.telegram.org).

use std::time::Duration;

use chitin::plugins::channel::{Action, Callback, HttpMethod, HttpRequest, HttpResponse, Inbound, Outgoing, Step, Trigger};
use chitin::plugins::world::World;
use chitin::plugins::{ChannelFailure, GrantConfig, Limits, LoadedPlugin, PluginError, PluginRuntime, RuntimeConfig};
use chitin_testing::{CONFLICT_POLLER, MockTelegram, MockUpdate};
use chitin_plugin_telegram::update::Conversation;
use chitin_plugin_telegram::{TOKEN_PLACEHOLDER, channel};
use chitin_testing::shared_cache_dir;
use serde_json::json;

struct Host {
    runtime: PluginRuntime,
    plugin: LoadedPlugin,
    client: reqwest::Client,
    _root: tempfile::TempDir,
}

/// The embedded component, loaded as the host loads a built-in (no network
/// grant is needed for the transport callbacks: the host runs those requests).
fn telegram() -> Host {
    let root = tempfile::tempdir().expect("temp dir");
    let runtime = PluginRuntime::new(RuntimeConfig {
        workspace: root.path().to_path_buf(),
        cache_dir: Some(shared_cache_dir()),
        limits: Limits { timeout_ms: 5_000, ..Limits::default() },
    })
    .expect("runtime");
    let telegram = chitin::plugins::builtin("telegram").expect("telegram is built in");
    let plugin = runtime.load_builtin(telegram, &GrantConfig::default()).expect("the component loads");
    Host { runtime, plugin, client: reqwest::Client::new(), _root: root }
}

impl Host {
    async fn start(&self, config: serde_json::Value, state: &[u8]) -> Result<Step, PluginError> {
        self.runtime.channel_step(&self.plugin, Callback::Start { config: &config.to_string() }, state).await
    }

    /// Runs `request` as the host will: the placeholder (and only it)
    /// replaced by the token at send time.
    async fn run(&self, request: &HttpRequest, token: &str) -> HttpResponse {
        assert!(request.url.contains(TOKEN_PLACEHOLDER), "the component writes the placeholder: {}", request.url);
        assert!(!request.url.contains(token), "the component never has the token: {}", request.url);
        let url = request.url.replace(TOKEN_PLACEHOLDER, token);
        let method = match request.method {
            HttpMethod::Get => reqwest::Method::GET,
            HttpMethod::Post => reqwest::Method::POST,
            other => panic!("unexpected method {other:?}"),
        };
        let mut builder = self.client.request(method, url).body(request.body.clone());
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        if request.timeout_ms > 0 {
            builder = builder.timeout(Duration::from_millis(request.timeout_ms.into()));
        }
        let response = builder.send().await.expect("the mock answers");
        let status = response.status().as_u16();
        HttpResponse { status, headers: vec![], body: response.bytes().await.expect("body").to_vec() }
    }

    /// One poll round: `poll-request`, run it, `poll-response`.
    async fn poll(&self, mock: &MockTelegram, state: &[u8]) -> (HttpRequest, Result<Step, PluginError>) {
        let request = self.runtime.channel_poll_request(&self.plugin, state).await.expect("poll-request");
        let response = self.run(&request, &mock.token()).await;
        (request.clone(), self.runtime.channel_step(&self.plugin, Callback::PollResponse(&response), state).await)
    }

    /// Started against `mock` with the username given, so the first poll is
    /// `getUpdates`.
    async fn started(&self, mock: &MockTelegram) -> Vec<u8> {
        let step = self.start(json!({"api_base": mock.api_base(), "bot_username": mock.username()}), b"").await.expect("start");
        for action in &step.actions {
            if let Action::Http(request) = action {
                let response = self.run(request, &mock.token()).await;
                assert_eq!(response.status, 200, "{}", String::from_utf8_lossy(&response.body));
            }
        }
        step.state
    }
}

fn emitted(step: &Step) -> Vec<&Inbound> {
    step.actions.iter().filter_map(|a| if let Action::Emit(m) = a { Some(m) } else { None }).collect()
}

fn offset_of(state: &[u8]) -> Option<i64> {
    channel::State::decode(state).expect("state").offset
}

#[tokio::test(flavor = "multi_thread")]
async fn it_is_a_built_in_channel_with_the_telegram_manifest() {
    let host = telegram();
    assert_eq!(host.plugin.world, World::ChannelV0_2);
    let manifest = &host.plugin.manifest;
    assert_eq!(manifest.name, "telegram");
    assert_eq!(manifest.capabilities.network, ["api.telegram.org"]);
    let spec = manifest.channel.as_ref().expect("channel section");
    assert_eq!(spec.secrets[0].name, "bot_token");
    assert_eq!(spec.secrets[0].audience.as_deref(), Some("api.telegram.org"));
    assert_eq!(spec.webhook.as_ref().map(|w| w.route.as_str()), Some("/telegram"));
    assert_eq!((spec.limits.max_text, spec.limits.typing_refresh_ms), (4096, 4000));
    let grant = chitin::plugins::catalog::builtin_default_grant("telegram").expect("a default grant");
    assert_eq!(grant.network, ["api.telegram.org"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn start_learns_the_username_with_get_me_when_not_configured() {
    let mock = MockTelegram::start();
    let host = telegram();
    let step = host.start(json!({"api_base": mock.api_base()}), b"").await.unwrap();
    assert!(matches!(step.actions.as_slice(), [Action::Http(r), Action::PollAfter(0)] if r.url.ends_with("/deleteWebhook")), "{:?}", step.actions);
    let (request, step) = host.poll(&mock, &step.state).await;
    assert!(request.url.ends_with("/getMe"), "{}", request.url);
    let state = step.unwrap().state;
    assert_eq!(channel::State::decode(&state).unwrap().bot_username.as_deref(), Some(mock.username().as_str()));
    let request = host.runtime.channel_poll_request(&host.plugin, &state).await.unwrap();
    assert!(request.url.contains("/getUpdates?"), "{}", request.url);
}

#[tokio::test(flavor = "multi_thread")]
async fn polled_updates_are_emitted_and_confirmed_by_the_next_offset() {
    let mock = MockTelegram::start();
    let host = telegram();
    let state = host.started(&mock).await;
    let first = mock.push(MockUpdate::text(42, 7, "hello there").username("alice"));
    let second = mock.push(MockUpdate::text(-100_5, 8, format!("/start@{} now", mock.username())).topic(77));
    let third = mock.push(MockUpdate::photo(-100_5, 9, "PHOTO-1").caption(format!("look @{}", mock.username())));

    let (request, step) = host.poll(&mock, &state).await;
    assert!(request.url.starts_with(&format!("{}/bot{TOKEN_PLACEHOLDER}/getUpdates?", mock.api_base())), "{}", request.url);
    assert!(request.url.contains("timeout=50") && request.url.contains("allowed_updates=") && request.url.contains("limit=50"), "{}", request.url);
    assert!(!request.url.contains("offset="), "no offset before the first update: {}", request.url);
    assert_eq!(request.timeout_ms, 60_000, "the host waits the long poll plus a margin");
    let step = step.unwrap();
    let messages = emitted(&step);
    let ids: Vec<String> = [first, second, third].iter().map(|id| format!("telegram:{id}")).collect();
    assert_eq!(messages.iter().map(|m| m.event_id.clone()).collect::<Vec<_>>(), ids);

    let dm = messages[0];
    assert_eq!((dm.sender_id.as_str(), dm.chat_id.as_str(), dm.text.as_str()), ("7", "42", "hello there"));
    assert_eq!(dm.chat_kind, chitin::plugins::channel::ChatKind::Direct);
    assert_eq!((dm.thread.as_deref(), dm.trigger), (None, Trigger::empty()));
    let topic = messages[1];
    assert_eq!((topic.chat_id.as_str(), topic.thread.as_deref()), ("-1005", Some("77")), "a forum topic is the thread");
    assert_eq!(topic.chat_kind, chitin::plugins::channel::ChatKind::Group);
    assert!(topic.trigger.contains(Trigger::COMMAND), "{:?}", topic.trigger);
    let photo = messages[2];
    assert_eq!((photo.media.len(), photo.media[0].kind.as_str(), photo.media[0].reference.as_str()), (1, "photo", "PHOTO-1"));
    assert!(photo.trigger.contains(Trigger::MENTION), "{:?}", photo.trigger);

    // The offset moved in the state only; the mock still holds the updates
    // until a getUpdates asks past them.
    assert_eq!(offset_of(&step.state), Some(third + 1));
    assert!(step.state.len() <= 1024, "state is {} bytes", step.state.len());
    assert_eq!(mock.pending_updates().len(), 3);

    let fourth = mock.push(MockUpdate::text(42, 7, "and again"));
    let (request, next) = host.poll(&mock, &step.state).await;
    assert!(request.url.contains(&format!("offset={}", third + 1)), "{}", request.url);
    let next = next.unwrap();
    assert_eq!(emitted(&next).iter().map(|m| m.event_id.clone()).collect::<Vec<_>>(), [format!("telegram:{fourth}")]);
    let pending: Vec<i64> = mock.pending_updates().iter().filter_map(|u| u["update_id"].as_i64()).collect();
    assert_eq!(pending, [fourth], "the second poll confirmed the first three");
    assert_eq!(offset_of(&next.state), Some(fourth + 1));

    // Not committing (a crash) and polling again from the old state re-emits
    // the same event ids: the host's dedup key.
    let (_, replay) = host.poll(&mock, &step.state).await;
    assert_eq!(emitted(&replay.unwrap())[0].event_id, format!("telegram:{fourth}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_poller_is_fatal_with_the_reason() {
    let mock = MockTelegram::start();
    let host = telegram();
    let state = host.started(&mock).await;
    // The component's long poll is held (no updates) when another instance
    // polls with the same token; Telegram ends the older one with 409.
    let request = host.runtime.channel_poll_request(&host.plugin, &state).await.unwrap();
    let held = {
        let client = host.client.clone();
        let url = request.url.replace(TOKEN_PLACEHOLDER, &mock.token());
        tokio::spawn(async move {
            let response = client.get(url).send().await.expect("answered");
            (response.status().as_u16(), response.bytes().await.unwrap().to_vec())
        })
    };
    mock.wait_for_poller().await;
    let other = format!("{}/bot{}/getUpdates?timeout=1", mock.api_base(), mock.token());
    let _ = host.client.get(other).send().await;
    let (status, body) = held.await.unwrap();
    assert_eq!(status, 409);
    let response = HttpResponse { status, headers: vec![], body };
    let err = host.runtime.channel_step(&host.plugin, Callback::PollResponse(&response), &state).await.unwrap_err();
    match &err {
        PluginError::Channel { kind: ChannelFailure::Fatal, message, .. } => {
            assert!(message.contains("another bot instance") && message.contains(CONFLICT_POLLER), "{message}");
        }
        other => panic!("expected a fatal channel error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_401_is_fatal_a_429_waits_retry_after_and_a_5xx_is_transient() {
    let mock = MockTelegram::start();
    let host = telegram();
    let state = host.started(&mock).await;

    mock.fail_next("getUpdates", 429, Some(3));
    let (_, step) = host.poll(&mock, &state).await;
    let step = step.unwrap();
    assert_eq!(step.state, state, "nothing moves while rate limited");
    assert!(matches!(step.actions.as_slice(), [Action::PollAfter(3000)]), "{:?}", step.actions);

    mock.fail_next("getUpdates", 502, None);
    let (_, step) = host.poll(&mock, &state).await;
    assert!(matches!(step, Err(PluginError::Channel { kind: ChannelFailure::Transient, .. })), "{step:?}");

    // A revoked token: the host's substitution sends a token the mock refuses.
    let request = host.runtime.channel_poll_request(&host.plugin, &state).await.unwrap();
    let response = host.run(&request, "1:revoked").await;
    assert_eq!(response.status, 401);
    let err = host.runtime.channel_step(&host.plugin, Callback::PollResponse(&response), &state).await.unwrap_err();
    assert!(matches!(&err, PluginError::Channel { kind: ChannelFailure::Fatal, message, .. } if message.contains("401")), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_component_never_holds_the_token() {
    let mock = MockTelegram::start();
    let host = telegram();
    let token = mock.token();
    let state = host.started(&mock).await;
    assert!(!String::from_utf8_lossy(&state).contains(&token));

    // An error that echoes the substituted URL: the host redacts it before
    // the component sees the response, and nothing of it comes back.
    mock.fail_next_with("getUpdates", 400, &format!("Bad Request: invalid request to /bot{token}/getUpdates"), None);
    let request = host.runtime.channel_poll_request(&host.plugin, &state).await.unwrap();
    let mut response = host.run(&request, &token).await;
    assert!(String::from_utf8_lossy(&response.body).contains(&token), "the mock echoed the token");
    response.body = String::from_utf8_lossy(&response.body).replace(&token, "[redacted]").into_bytes();
    let err = host.runtime.channel_step(&host.plugin, Callback::PollResponse(&response), &state).await.unwrap_err();
    assert!(err.to_string().contains("[redacted]") && !err.to_string().contains(&token), "{err}");

    let id = mock.push(MockUpdate::text(42, 7, "hi"));
    let (_, step) = host.poll(&mock, &state).await;
    let step = step.unwrap();
    assert_eq!(offset_of(&step.state), Some(id + 1));
    assert!(!String::from_utf8_lossy(&step.state).contains(&token));
    assert!(!format!("{:?}", step.actions).contains(&token));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_update_is_emitted_and_answered_200() {
    let mock = MockTelegram::start();
    let host = telegram();
    let step = host
        .start(json!({"api_base": mock.api_base(), "bot_username": mock.username(), "mode": "webhook", "webhook_url": "https://me.example/telegram"}), b"")
        .await
        .unwrap();
    let [Action::Http(set)] = step.actions.as_slice() else { panic!("{:?}", step.actions) };
    assert!(set.url.ends_with("/setWebhook"));
    let body: serde_json::Value = serde_json::from_slice(&set.body).unwrap();
    assert_eq!(body["secret_token"], "{{secret:webhook_secret}}", "the webhook secret is a placeholder too");

    let mut update = mock.update_json(&MockUpdate::text(42, 7, "via webhook"));
    update["update_id"] = json!(900);
    let request = chitin::plugins::channel::WebhookRequest {
        method: HttpMethod::Post,
        path: "/".into(),
        query: String::new(),
        headers: vec![],
        body: update.to_string().into_bytes(),
    };
    let hook = host.runtime.channel_step(&host.plugin, Callback::Webhook(&request), &step.state).await.unwrap();
    let messages = emitted(&hook);
    assert_eq!((messages.len(), messages[0].event_id.as_str(), messages[0].text.as_str()), (1, "telegram:900", "via webhook"));
    assert!(hook.actions.iter().any(|a| matches!(a, Action::Respond(r) if r.status == 200)));
    assert_eq!(hook.state, step.state);
}

/// `deliver` sees no config in the 0.2 WIT, so the component sends to
/// api.telegram.org over `wasi:http` under its grant; without a grant the
/// host refuses the request and the delivery fails as transient (retried).
#[tokio::test(flavor = "multi_thread")]
async fn deliver_goes_through_wasi_http_under_the_grant() {
    let host = telegram();
    let outgoing = Outgoing { chat_id: "42".into(), thread: None, text: "hi".into(), reply_to: None, media: vec![] };
    let err = host.runtime.channel_deliver(&host.plugin, &outgoing).await.unwrap_err();
    assert!(matches!(&err, PluginError::Channel { kind: ChannelFailure::Transient, message, .. } if message.contains("Denied")), "{err:?}");
    let bad = Outgoing { chat_id: "not-a-chat".into(), ..outgoing };
    let err = host.runtime.channel_deliver(&host.plugin, &bad).await.unwrap_err();
    assert!(matches!(&err, PluginError::Channel { kind: ChannelFailure::Fatal, .. }), "{err:?}");
}

/// The requests `deliver` makes (the same function the component runs),
/// performed against the mock: a 10 000-character reply into a forum topic
/// becomes ≥ 3 messages the mock accepts under its own 4096 check, in order,
/// and its photo (by file id) follows.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_reply_is_split_into_messages_the_mock_accepts_in_order_then_its_media() {
    let mock = MockTelegram::start();
    let host = telegram();
    let words: Vec<String> = (0..1_250).map(|i| format!("w{i:05}")).collect();
    let mut reply = String::new();
    for (i, word) in words.iter().enumerate() {
        reply.push_str(word);
        reply.push_str(if i % 20 == 19 { "\n\n" } else { " " });
    }
    assert!(reply.chars().count() >= 8_700);
    let reply = format!("{reply}{}", "x".repeat(10_000 - reply.chars().count().min(10_000)));
    let to = Conversation { chat_id: -100_5, topic: Some(77) };
    let photo = mock.add_file("photos/cat.jpg", b"\xff\xd8 not really a jpeg".to_vec());
    let media = [channel::OutMedia { kind: "photo".into(), reference: photo.clone() }];
    let requests = channel::deliver_requests(&mock.api_base(), &to, &reply, Some("12"), &media).unwrap();
    let (texts, files) = requests.split_at(requests.len() - 1);
    assert!(texts.len() >= 3, "{} parts", texts.len());
    for request in &requests {
        let request = HttpRequest {
            method: HttpMethod::Post,
            url: request.url.clone(),
            headers: request.headers.clone(),
            body: request.body.clone().unwrap_or_default().into_bytes(),
            timeout_ms: 0,
        };
        let response = host.run(&request, &mock.token()).await;
        assert_eq!(response.status, 200, "{}", String::from_utf8_lossy(&response.body));
    }
    let sent = mock.sent_messages();
    assert_eq!(sent.len(), texts.len());
    assert!(files[0].url.ends_with("/sendPhoto"));
    let photos = mock.sent_media();
    assert_eq!((photos.len(), photos[0].kind.as_str(), photos[0].file_id.as_str()), (1, "photo", photo.as_str()));
    assert!(sent.iter().all(|m| m.message_thread_id == Some(77) && m.chat_id == -100_5));
    assert_eq!(sent[0].reply_to_message_id, Some(12));
    assert!(sent[1..].iter().all(|m| m.reply_to_message_id.is_none()));
    let received: Vec<&str> = sent.iter().flat_map(|m| m.text.split_whitespace()).filter(|w| w.starts_with('w')).collect();
    assert_eq!(received, words.iter().map(String::as_str).collect::<Vec<_>>(), "every word, once, in order");
}
