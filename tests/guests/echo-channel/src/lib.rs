//! `echo-channel`: a channel plugin for the host's tests, built straight
//! from `wit/v0.2` (world `channel-plugin`), with its manifest embedded by
//! hand like the hostile guest's.
//!
//! The protocol is a toy Telegram: `poll-request` asks for
//! `GET https://api.example.test/bot{{secret:token}}/getUpdates?offset=N`
//! where N is the state (decimal text; empty = 0); `poll-response` reads
//! `{"updates":[{"id":N,"text":"..."}]}`, emits one inbound message per
//! update and moves the offset past the highest id. `deliver` answers with
//! an id made of the chat and the text's length.
//!
//! An update's text picks a hostile behaviour instead, so the host's bounds
//! are tested through a real component: `trap` (unreachable), `loop` (spins
//! forever), `huge-state` (a 1 MiB state), `flood` (10 000 emits),
//! `long-text` (one 100 KiB message), `fail` / `fatal` (the channel's own
//! errors). `deliver` traps on the text `trap`; `upload-request` refuses
//! every file (`fatal`), as a channel that cannot send files does.
//!
//! Hostile modes that attack the host's budgets, each one update per step
//! (the rest of the batch waits for the next poll, so a flood lasts as long
//! as the platform sends it): `http-flood URL N` (N `http` actions, GET URL
//! with a 10-minute timeout: a server that never answers holds them),
//! `emit-flood N` (N emits, each from a made-up chat and sender) and
//! `media REF` (one message with a photo whose download the host runs:
//! `{API}/file/REF`).

use serde::Deserialize;

wit_bindgen::generate!({ path: "../../../wit/v0.2", world: "channel-plugin" });

use exports::chitin::plugin::channel::{
    Action, ChannelError, ChatKind, ChatStatus, Guest, HttpMethod, HttpRequest, HttpResponse, Inbound, MediaRef, Outgoing,
    OutgoingFile, SocketEvent, Step, Trigger, Upload, WebhookRequest, WebhookResponse,
};

/// The manifest the host reads without running any code (see wit/README.md).
#[used]
#[unsafe(link_section = "chitin:manifest")]
static MANIFEST: [u8; include_bytes!("../manifest.json").len()] = *include_bytes!("../manifest.json");

/// The API the toy protocol talks to; the token is a placeholder the host
/// substitutes (the component never sees it).
const API: &str = "https://api.example.test/bot{{secret:token}}";

#[derive(Deserialize)]
struct Updates {
    updates: Vec<Update>,
}

#[derive(Deserialize)]
struct Update {
    id: u64,
    text: String,
}

fn offset(state: &[u8]) -> Result<u64, ChannelError> {
    if state.is_empty() {
        return Ok(0);
    }
    std::str::from_utf8(state)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ChannelError::Fatal(format!("corrupt state: {:?}", String::from_utf8_lossy(state))))
}

fn inbound(event_id: String, text: String) -> Inbound {
    inbound_from(event_id, text, "user-1".into(), "chat-1".into())
}

fn inbound_from(event_id: String, text: String, sender_id: String, chat_id: String) -> Inbound {
    let trigger = if text.starts_with('/') { Trigger::COMMAND } else { Trigger::empty() };
    Inbound {
        event_id,
        sender_id,
        sender_name: Some("Test User".into()),
        chat_id,
        chat_kind: ChatKind::Direct,
        thread: None,
        text,
        media: vec![],
        trigger,
    }
}

/// The step for a batch of updates at `offset`: one emit each (or the
/// hostile behaviour an update's text names), the offset past the highest id.
fn updates_step(body: &[u8], offset: u64) -> Result<Step, ChannelError> {
    let updates: Updates = serde_json::from_slice(body).map_err(|e| ChannelError::Transient(format!("bad updates JSON: {e}")))?;
    let mut next = offset;
    let mut actions = Vec::new();
    for update in updates.updates {
        next = next.max(update.id + 1);
        match update.text.as_str() {
            "trap" => core::arch::wasm32::unreachable(),
            "loop" => loop {
                std::hint::black_box(&mut next);
            },
            "huge-state" => return Ok(Step { state: vec![b'9'; 1 << 20], actions }),
            "flood" => {
                actions.extend((0..10_000).map(|i| Action::Emit(inbound(format!("flood-{i}"), "flood".into()))));
            }
            "long-text" => actions.push(Action::Emit(inbound(format!("upd-{}", update.id), "x".repeat(100 * 1024)))),
            text if text.starts_with("http-flood ") => {
                let mut words = text.split_whitespace().skip(1);
                let url = words.next().unwrap_or_default().to_string();
                let count: usize = words.next().and_then(|n| n.parse().ok()).unwrap_or(60);
                actions.extend((0..count.min(62)).map(|_| {
                    Action::Http(HttpRequest { method: HttpMethod::Get, url: url.clone(), headers: vec![], body: vec![], timeout_ms: 600_000 })
                }));
                next = update.id + 1;
                break;
            }
            text if text.starts_with("emit-flood ") => {
                let count: usize = text["emit-flood ".len()..].trim().parse().unwrap_or(60);
                actions.extend((0..count.min(62)).map(|i| {
                    let id = format!("flood-{}-{i}", update.id);
                    Action::Emit(inbound_from(id.clone(), format!("flood message {id}"), format!("sender-{id}"), format!("chat-{id}")))
                }));
                next = update.id + 1;
                break;
            }
            text if text.starts_with("media ") => {
                let mut message = inbound(format!("upd-{}", update.id), "a photo".into());
                message.media = vec![MediaRef { kind: "photo".into(), reference: text["media ".len()..].trim().into(), mime: None, size: None, file_name: None }];
                actions.push(Action::Emit(message));
            }
            "fail" => return Err(ChannelError::Transient("the platform said 502".into())),
            "fatal" => return Err(ChannelError::Fatal("the platform said 401: token revoked".into())),
            _ => actions.push(Action::Emit(inbound(format!("upd-{}", update.id), update.text))),
        }
    }
    actions.push(Action::PollAfter(0));
    Ok(Step { state: next.to_string().into_bytes(), actions })
}

struct Echo;

impl Guest for Echo {
    fn start(_config: String, state: Vec<u8>) -> Result<Step, ChannelError> {
        offset(&state)?;
        Ok(Step { state, actions: vec![Action::PollAfter(0)] })
    }

    fn poll_request(state: Vec<u8>) -> Result<HttpRequest, ChannelError> {
        let offset = offset(&state)?;
        Ok(HttpRequest {
            method: HttpMethod::Get,
            url: format!("{API}/getUpdates?offset={offset}&timeout=30"),
            headers: vec![("accept".into(), "application/json".into())],
            body: vec![],
            timeout_ms: 40_000,
        })
    }

    fn poll_response(response: HttpResponse, state: Vec<u8>) -> Result<Step, ChannelError> {
        let offset = offset(&state)?;
        match response.status {
            200 => updates_step(&response.body, offset),
            401 | 409 => Err(ChannelError::Fatal(format!("getUpdates answered {}", response.status))),
            status => Err(ChannelError::Transient(format!("getUpdates answered {status}"))),
        }
    }

    fn on_webhook(request: WebhookRequest, state: Vec<u8>) -> Result<Step, ChannelError> {
        let offset = offset(&state)?;
        let mut step = updates_step(&request.body, offset)?;
        step.actions.retain(|a| !matches!(a, Action::PollAfter(_)));
        step.actions.push(Action::Respond(WebhookResponse { status: 200, headers: vec![], body: b"ok".to_vec() }));
        Ok(step)
    }

    fn on_socket(name: String, event: SocketEvent, state: Vec<u8>) -> Result<Step, ChannelError> {
        let actions = match event {
            SocketEvent::Text(text) => vec![Action::Emit(inbound(format!("{name}-{}", text.len()), text))],
            _ => vec![],
        };
        Ok(Step { state, actions })
    }

    fn on_timer(_name: String, state: Vec<u8>) -> Result<Step, ChannelError> {
        Ok(Step { state, actions: vec![Action::PollAfter(0)] })
    }

    fn deliver(message: Outgoing) -> Result<Vec<String>, ChannelError> {
        if message.text == "trap" {
            core::arch::wasm32::unreachable();
        }
        Ok(vec![format!("{}:{}", message.chat_id, message.text.len())])
    }

    fn stream_update(_chat_id: String, _thread: Option<String>, handle: Option<String>, _text_so_far: String, _done: bool) -> Result<String, ChannelError> {
        Ok(handle.unwrap_or_else(|| "stream-1".into()))
    }

    fn media_request(media: MediaRef) -> Result<HttpRequest, ChannelError> {
        Ok(HttpRequest { method: HttpMethod::Get, url: format!("{API}/file/{}", media.reference), headers: vec![], body: vec![], timeout_ms: 0 })
    }

    fn upload_request(_chat_id: String, _thread: Option<String>, _file: OutgoingFile) -> Result<Upload, ChannelError> {
        Err(ChannelError::Fatal("the echo channel cannot send files".into()))
    }

    fn set_status(_chat_id: String, _status: ChatStatus) -> Result<(), ChannelError> {
        Ok(())
    }
}

export!(Echo);
