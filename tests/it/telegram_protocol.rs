//! The Telegram adapter's protocol functions (`chitin-plugin-telegram`)
//! against `MockTelegram`, with reqwest standing in for the host: the
//! requests the adapter describes are run as the host will run them (the
//! `{{secret:bot_token}}` placeholder substituted at send time), and the
//! answers go back through the adapter's parsers. What this proves before
//! any component glue exists: the poll → parse → offset loop confirms
//! updates and never replays one, a long reply arrives as valid messages in
//! order, and 429 / 409 / 401 come back classified the way the host must
//! act on them.

use chitin_testing::{MockTelegram, MockUpdate};
use chitin_plugin_telegram::api::{self, ALLOWED_UPDATES, ChatAction};
use chitin_plugin_telegram::error::{Action, ApiError, TelegramError, api_result};
use chitin_plugin_telegram::render::{OutgoingText, ParseMode, render_preview, render_reply};
use chitin_plugin_telegram::split::html_visible_len;
use chitin_plugin_telegram::update::{Batch, Conversation, InboundEvent, MediaKind, parse_get_updates, parse_webhook};
use chitin_plugin_telegram::{HttpMethod, HttpRequest, MAX_MESSAGE_UTF16, TOKEN_PLACEHOLDER};

/// Runs `request` as the host would, substituting `token` for the
/// placeholder; returns the HTTP status and body.
async fn run(client: &reqwest::Client, request: &HttpRequest, token: &str) -> (u16, Vec<u8>) {
    assert!(request.url.contains(TOKEN_PLACEHOLDER), "the adapter writes the placeholder: {}", request.url);
    let url = request.url.replace(TOKEN_PLACEHOLDER, token);
    let mut builder = match request.method {
        HttpMethod::Get => client.get(url),
        HttpMethod::Post => client.post(url),
    };
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    if let Some(body) = &request.body {
        builder = builder.body(body.clone());
    }
    let response = builder.send().await.expect("the mock answers");
    let status = response.status().as_u16();
    (status, response.bytes().await.expect("body").to_vec())
}

async fn poll(client: &reqwest::Client, mock: &MockTelegram, offset: Option<i64>, timeout: u32) -> Result<Batch, TelegramError> {
    let request = api::get_updates(&mock.api_base(), offset, timeout, ALLOWED_UPDATES);
    let (status, body) = run(client, &request, &mock.token()).await;
    parse_get_updates(status, &body, &mock.username())
}

async fn call(client: &reqwest::Client, mock: &MockTelegram, request: &HttpRequest) -> Result<serde_json::Value, ApiError> {
    let (status, body) = run(client, request, &mock.token()).await;
    api_result(status, &body)
}

/// A reply of about 11 000 characters: paragraphs, a long code block,
/// characters that need escaping, and emoji.
fn long_reply() -> String {
    let mut reply = String::from("# Weekend plan\n\nHere is **everything** you asked for, <all> of it & more 😀.\n\n");
    for i in 0..30 {
        reply.push_str(&format!("Paragraph {i}: {}\n\n", "some words that go on ".repeat(8)));
    }
    reply.push_str("```python\n");
    for i in 0..150 {
        reply.push_str(&format!("    print(\"step {i}\")  # <{i}>\n"));
    }
    reply.push_str("```\n\nThat's *all*.");
    reply
}

#[tokio::test]
async fn poll_parse_offset_and_a_split_reply_in_order() {
    let mock = MockTelegram::start();
    let client = reqwest::Client::new();
    let base = mock.api_base();

    // Polling starts by deleting any webhook (getUpdates is refused while one is set).
    call(&client, &mock, &api::delete_webhook(&base, false)).await.expect("deleteWebhook");

    let first = mock.push(MockUpdate::text(42, 7, "hello @chitin_test_bot").username("ada"));
    let second = mock.push(MockUpdate::text(-100, 8, "/start@chitin_test_bot go").topic(5));
    let batch = poll(&client, &mock, None, 30).await.expect("first poll");
    assert_eq!(batch.events.iter().map(|e| e.update_id).collect::<Vec<_>>(), [first, second]);
    assert_eq!(batch.next_offset, Some(second + 1));
    let dm = &batch.events[0];
    assert_eq!((dm.session_key.as_str(), dm.text.as_str(), dm.mentions_bot), ("telegram:42", "hello @chitin_test_bot", true));
    assert_eq!((dm.sender.id, dm.sender.username.as_deref()), (7, Some("ada")));
    let topic = &batch.events[1];
    assert_eq!(topic.session_key, "telegram:-100:topic:5");
    assert_eq!(topic.command.as_ref().map(|c| (c.name.as_str(), c.args.as_str())), Some(("start", "go")));

    // The next poll carries the offset: both updates are confirmed, none comes back.
    let again = poll(&client, &mock, batch.next_offset, 0).await.expect("second poll");
    assert!(again.events.is_empty());
    assert_eq!(again.next_offset, None, "an empty batch keeps the offset");
    assert!(mock.pending_updates().is_empty(), "the offset confirmed them");

    // A held poll wakes for the next update, and only that one.
    let offset = batch.next_offset;
    let held = {
        let (client, base, token, bot) = (client.clone(), base.clone(), mock.token(), mock.username());
        tokio::spawn(async move {
            let request = api::get_updates(&base, offset, 30, ALLOWED_UPDATES);
            let (status, body) = run(&client, &request, &token).await;
            parse_get_updates(status, &body, &bot)
        })
    };
    mock.wait_for_poller().await;
    let third = mock.push(MockUpdate::text(42, 7, "and another"));
    let woken = held.await.unwrap().expect("held poll");
    assert_eq!(woken.events.iter().map(|e| e.update_id).collect::<Vec<_>>(), [third]);
    assert_eq!(woken.next_offset, Some(third + 1));
    let offsets: Vec<Option<String>> =
        mock.requests_for("getUpdates").iter().map(|r| r.params.get("offset").and_then(|o| o.as_str()).map(str::to_string)).collect();
    let next = Some((second + 1).to_string());
    assert_eq!(offsets, [None, next.clone(), next], "the offset only moves forward");

    // The reply: rendered, split, sent in order as replies to the message.
    let to = Conversation::from_session_key(&dm.session_key).unwrap();
    let parts = render_reply(&long_reply());
    assert!(parts.len() >= 3, "{} parts", parts.len());
    let mut ids = Vec::new();
    for part in &parts {
        assert!(html_visible_len(&part.text) <= MAX_MESSAGE_UTF16);
        let result = call(&client, &mock, &api::send_message(&base, &to, part, Some(dm.message_id))).await.expect("accepted by the mock");
        ids.push(api::message_id(&result).unwrap());
    }
    let sent = mock.sent_messages();
    assert_eq!(sent.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), parts.iter().map(|p| p.text.as_str()).collect::<Vec<_>>());
    assert_eq!(sent.iter().map(|m| m.message_id).collect::<Vec<_>>(), ids);
    assert!(sent.iter().all(|m| m.chat_id == 42 && m.parse_mode.as_deref() == Some("HTML") && m.reply_to_message_id == Some(dm.message_id)));
    assert!(sent[0].text.starts_with("<b>Weekend plan</b>"));
    assert!(sent[0].text.contains("&lt;all&gt; of it &amp; more 😀"));
    assert!(sent.iter().any(|m| m.text.starts_with("<pre><code class=\"language-python\">")), "the code block reopened in a later part");

    // The topic gets its reply in the topic, with typing first.
    let to_topic = Conversation::from_session_key(&topic.session_key).unwrap();
    call(&client, &mock, &api::send_chat_action(&base, &to_topic, ChatAction::Typing)).await.expect("typing");
    let plain = OutgoingText { text: "started".into(), parse_mode: None };
    call(&client, &mock, &api::send_message(&base, &to_topic, &plain, None)).await.expect("topic reply");
    let last = mock.sent_messages().pop().unwrap();
    assert_eq!((last.chat_id, last.message_thread_id, last.parse_mode), (-100, Some(5), None));
    let actions = mock.chat_actions();
    assert_eq!((actions[0].chat_id, actions[0].action.as_str(), actions[0].message_thread_id), (-100, "typing", Some(5)));
}

#[tokio::test]
async fn streaming_edits_and_an_unchanged_edit_is_ignored() {
    let mock = MockTelegram::start();
    let client = reqwest::Client::new();
    let base = mock.api_base();
    let to = Conversation { chat_id: 9, topic: None };
    let first = render_preview("Thinking").unwrap();
    let handle = api::message_id(&call(&client, &mock, &api::send_message(&base, &to, &first, None)).await.unwrap()).unwrap();
    let more = render_preview("Thinking about **it**").unwrap();
    assert_eq!(more.parse_mode, Some(ParseMode::Html));
    call(&client, &mock, &api::edit_message_text(&base, 9, handle, &more)).await.expect("edit");
    let same = call(&client, &mock, &api::edit_message_text(&base, 9, handle, &more)).await.unwrap_err();
    assert_eq!((same.clone(), same.action()), (ApiError::NotModified, Action::Ignore));
    assert_eq!(mock.edits().len(), 1);
    assert_eq!(mock.edits()[0].text, "Thinking about <b>it</b>");
}

#[tokio::test]
async fn a_429_is_classified_with_its_retry_after() {
    let mock = MockTelegram::start();
    let client = reqwest::Client::new();
    let to = Conversation { chat_id: 1, topic: None };
    let part = &render_reply("hi")[0];
    mock.fail_next("sendMessage", 429, Some(3));
    let err = call(&client, &mock, &api::send_message(&mock.api_base(), &to, part, None)).await.unwrap_err();
    assert_eq!(err, ApiError::RateLimited { retry_after: 3 });
    assert_eq!(err.action(), Action::RetryAfter { seconds: 3 });
    assert!(mock.sent_messages().is_empty());
    // The same request again, after the wait the host would take, goes through.
    call(&client, &mock, &api::send_message(&mock.api_base(), &to, part, None)).await.expect("retried");
    assert_eq!(mock.sent_messages().len(), 1);
    // A 5xx is retried with backoff, not fatal.
    mock.fail_next("getUpdates", 502, None);
    let err = poll(&client, &mock, None, 0).await.unwrap_err();
    assert!(matches!(err, TelegramError::Api(ref e) if e.action() == Action::Retry), "{err}");
}

#[tokio::test]
async fn a_second_poller_a_webhook_and_a_bad_token_are_fatal() {
    let mock = MockTelegram::start();
    let client = reqwest::Client::new();
    let held = {
        let (client, base, token, bot) = (client.clone(), mock.api_base(), mock.token(), mock.username());
        tokio::spawn(async move {
            let (status, body) = run(&client, &api::get_updates(&base, None, 30, ALLOWED_UPDATES), &token).await;
            parse_get_updates(status, &body, &bot)
        })
    };
    mock.wait_for_poller().await;
    // Another instance polls with the same token: the held poll is terminated.
    let other = {
        let (client, base, token, bot) = (client.clone(), mock.api_base(), mock.token(), mock.username());
        tokio::spawn(async move {
            let (status, body) = run(&client, &api::get_updates(&base, None, 30, ALLOWED_UPDATES), &token).await;
            parse_get_updates(status, &body, &bot)
        })
    };
    let err = held.await.unwrap().unwrap_err();
    let TelegramError::Api(api_err) = err else { panic!("{err:?}") };
    assert!(matches!(api_err, ApiError::PollerConflict { .. }));
    let Action::Stop { reason } = api_err.action() else { panic!("409 must stop the poller") };
    assert!(reason.contains("409") && reason.contains("another bot instance"), "{reason}");
    mock.wait_for_poller().await;
    mock.push(MockUpdate::text(1, 1, "release the other poller"));
    other.await.unwrap().expect("the newer poller gets the update");

    // Webhook mode: setWebhook with a secret; polling is then refused, and fatal.
    let request = api::set_webhook(&mock.api_base(), "https://bot.example/telegram", "s3cret-Token_1", ALLOWED_UPDATES).unwrap();
    call(&client, &mock, &request).await.expect("setWebhook");
    let hook = mock.webhook().expect("set");
    assert_eq!(hook.secret_token.as_deref(), Some("s3cret-Token_1"));
    let err = poll(&client, &mock, None, 0).await.unwrap_err();
    assert_eq!(err, TelegramError::Api(ApiError::WebhookActive));
    call(&client, &mock, &api::delete_webhook(&mock.api_base(), false)).await.expect("deleteWebhook");
    poll(&client, &mock, None, 0).await.expect("polling works again");

    // A wrong token: 401, fatal with a reason that names the token.
    let (status, body) = run(&client, &api::get_me(&mock.api_base()), "42:not-the-token").await;
    let err = api_result(status, &body).unwrap_err();
    assert_eq!(err, ApiError::Unauthorized);
    assert!(matches!(err.action(), Action::Stop { reason } if reason.contains("token")));
}

#[tokio::test]
async fn a_photo_in_is_fetched_by_file_id() {
    let mock = MockTelegram::start();
    let client = reqwest::Client::new();
    let file_id = mock.add_file("photos/file_1.jpg", b"\xff\xd8JPEG".to_vec());
    mock.push(MockUpdate::photo(42, 7, file_id.clone()).caption("what is this?"));
    let batch = poll(&client, &mock, None, 0).await.unwrap();
    let event = &batch.events[0];
    assert_eq!(event.text, "what is this?");
    assert_eq!((event.media[0].kind, event.media[0].file_id.as_str()), (MediaKind::Photo, file_id.as_str()));
    let result = call(&client, &mock, &api::get_file(&mock.api_base(), &event.media[0].file_id)).await.unwrap();
    let path = api::file_path(&result).unwrap();
    let (status, bytes) = run(&client, &api::download_file(&mock.api_base(), &path), &mock.token()).await;
    assert_eq!((status, bytes), (200, b"\xff\xd8JPEG".to_vec()));
}

/// A webhook receiver doing what the host will: check the secret header,
/// refuse with 401 when it is wrong, and hand only verified bodies to the
/// adapter's `parse_webhook`. Returns its URL and the events it accepted.
async fn webhook_receiver(secret: &'static str, bot: String) -> (String, tokio::sync::mpsc::UnboundedReceiver<InboundEvent>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/telegram", listener.local_addr().unwrap());
    let (events, received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (events, bot) = (events.clone(), bot.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                // Names are case-insensitive, values (the secret) are not.
                let header = |name: &str| {
                    head.lines().find(|l| l.to_ascii_lowercase().starts_with(name)).map(|l| l[name.len()..].trim().to_string())
                };
                let length: usize = header("content-length:").and_then(|v| v.parse().ok()).unwrap_or(0);
                while buf.len() < head_end + length {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let verified = header("x-telegram-bot-api-secret-token:").is_some_and(|v| v == secret);
                let status = if verified {
                    if let Ok(Some(event)) = parse_webhook(&buf[head_end..head_end + length], &bot) {
                        let _ = events.send(event);
                    }
                    "200 OK"
                } else {
                    "401 Unauthorized"
                };
                let response = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (url, received)
}

#[tokio::test]
async fn webhook_mode_delivers_only_with_the_right_secret() {
    let mock = MockTelegram::start();
    let client = reqwest::Client::new();
    let secret = "hook-secret_42";
    let (url, mut received) = webhook_receiver(secret, mock.username()).await;
    let request = api::set_webhook(&mock.api_base(), &url, secret, ALLOWED_UPDATES).unwrap();
    call(&client, &mock, &request).await.expect("setWebhook");

    let wrong = mock.update_json(&MockUpdate::text(42, 7, "forged"));
    assert_eq!(mock.deliver_webhook_with_secret(wrong.clone(), Some("guess")).await.unwrap(), 401);
    assert_eq!(mock.deliver_webhook_with_secret(wrong.clone(), None).await.unwrap(), 401);
    assert_eq!(mock.deliver_webhook_with_secret(wrong, Some("HOOK-SECRET_42")).await.unwrap(), 401, "the secret is case-sensitive");
    let update = mock.update_json(&MockUpdate::text(-100, 7, "hi @chitin_test_bot").topic(3));
    assert_eq!(mock.deliver_webhook(update).await.unwrap(), 200);

    let event = received.recv().await.expect("the verified update");
    assert_eq!((event.text.as_str(), event.session_key.as_str(), event.mentions_bot), ("hi @chitin_test_bot", "telegram:-100:topic:3", true));
    assert!(received.try_recv().is_err(), "the forged updates never reached the adapter");
}
