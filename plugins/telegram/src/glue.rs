//! The `channel-plugin` world (`chitin:plugin@0.2.0`): WIT types mapped onto
//! [`crate::channel`], and the one thing that cannot be a plain function —
//! the `wasi:http` calls of `deliver`, `stream-update` and `set-status`,
//! which the WIT has the component make itself (the host substitutes
//! `{{secret:bot_token}}` and enforces the network grant).
//!
//! Those three callbacks see no state and no config, so they use the public
//! Bot API ([`DEFAULT_API_BASE`]); a user's `api_base` reaches only the
//! transport callbacks (see the crate's report on the 0.2 WIT).

use crate::api::{self, DEFAULT_API_BASE, HttpRequest as TgRequest};
use crate::channel::{self, Effect, Failure, StepOut};
use crate::error::ApiError;
use crate::update::{ChatKind as TgChatKind, InboundEvent, MediaKind};

wit_bindgen::generate!({ path: "../../wit/v0.2", world: "channel-plugin" });

use exports::chitin::plugin::channel::{
    Action, ChannelError, ChatKind, ChatStatus, Guest, HttpMethod, HttpRequest, HttpResponse, Inbound, MediaRef, Outgoing,
    OutgoingFile, SocketEvent, Step, Trigger, Upload, WebhookRequest, WebhookResponse,
};

/// The manifest the host reads without running any code (wit/README.md).
#[used]
#[unsafe(link_section = "chitin:manifest")]
static MANIFEST: [u8; include_bytes!("../manifest.json").len()] = *include_bytes!("../manifest.json");

fn error(failure: Failure) -> ChannelError {
    match failure {
        Failure::Transient(m) => ChannelError::Transient(m),
        Failure::Fatal(m) => ChannelError::Fatal(m),
    }
}

fn request(request: TgRequest, timeout_ms: u32) -> HttpRequest {
    HttpRequest {
        method: match request.method {
            api::HttpMethod::Get => HttpMethod::Get,
            api::HttpMethod::Post => HttpMethod::Post,
        },
        url: request.url,
        headers: request.headers,
        body: request.body.map(String::into_bytes).unwrap_or_default(),
        timeout_ms,
    }
}

fn inbound(event: InboundEvent) -> Inbound {
    let mut trigger = Trigger::empty();
    trigger.set(Trigger::MENTION, event.mentions_bot);
    trigger.set(Trigger::REPLY_TO_BOT, event.reply_to_bot);
    trigger.set(Trigger::COMMAND, event.command.is_some());
    Inbound {
        event_id: format!("telegram:{}", event.update_id),
        sender_id: event.sender.id.to_string(),
        sender_name: Some(event.sender.name).filter(|n| !n.is_empty()),
        chat_id: event.conversation.chat_id.to_string(),
        chat_kind: match event.chat_kind {
            TgChatKind::Private => ChatKind::Direct,
            TgChatKind::Group | TgChatKind::Supergroup => ChatKind::Group,
            TgChatKind::Channel => ChatKind::Broadcast,
        },
        thread: event.conversation.topic.map(|t| t.to_string()),
        text: event.text,
        media: event
            .media
            .into_iter()
            .map(|m| MediaRef {
                kind: match m.kind {
                    MediaKind::Photo => "photo",
                    MediaKind::Document => "document",
                    MediaKind::Voice => "voice",
                    MediaKind::Audio => "audio",
                    MediaKind::Video => "video",
                }
                .into(),
                reference: m.file_id,
                mime: m.mime_type,
                size: m.file_size,
                file_name: m.file_name,
            })
            .collect(),
        trigger,
    }
}

fn step(out: StepOut) -> Step {
    for warning in &out.warnings {
        chitin::plugin::host::log(chitin::plugin::host::LogLevel::Warn, warning);
    }
    let actions = out
        .effects
        .into_iter()
        .map(|effect| match effect {
            Effect::Emit(event) => Action::Emit(inbound(event)),
            Effect::Http(r) => Action::Http(request(r, 0)),
            Effect::PollAfter(ms) => Action::PollAfter(ms),
            Effect::RespondOk => Action::Respond(WebhookResponse {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: b"{}".to_vec(),
            }),
        })
        .collect();
    Step { state: out.state, actions }
}

/// Runs one Bot API call over `wasi:http` and classifies the answer.
fn call(request: &TgRequest) -> Result<serde_json::Value, ApiError> {
    let (status, body) = http::send(request).map_err(|description| ApiError::Other { status: 0, description })?;
    channel::call_result(status, &body)
}

/// Sends one part; a refused markup is resent as plain text.
fn send_part(request: &TgRequest) -> Result<String, ChannelError> {
    let result = match call(request) {
        Err(ApiError::BadMarkup { .. }) => match channel::plain_retry(request) {
            Some(plain) => call(&plain),
            None => return Err(ChannelError::Transient("refused markup and no text to resend".into())),
        },
        other => other,
    };
    let message = result.map_err(|e| error(channel::delivery_failure(&e)))?;
    api::message_id(&message).map(|id| id.to_string()).map_err(|e| ChannelError::Transient(e.to_string()))
}

struct Telegram;

impl Guest for Telegram {
    fn start(config: String, state: Vec<u8>) -> Result<Step, ChannelError> {
        channel::start(&config, &state).map(step).map_err(error)
    }

    fn poll_request(state: Vec<u8>) -> Result<HttpRequest, ChannelError> {
        let (r, timeout_ms) = channel::poll_request(&state).map_err(error)?;
        Ok(request(r, timeout_ms))
    }

    fn poll_response(response: HttpResponse, state: Vec<u8>) -> Result<Step, ChannelError> {
        channel::poll_response(response.status, &response.body, &state).map(step).map_err(error)
    }

    fn on_webhook(request: WebhookRequest, state: Vec<u8>) -> Result<Step, ChannelError> {
        channel::on_webhook(&request.body, &state).map(step).map_err(error)
    }

    fn on_socket(_name: String, _event: SocketEvent, state: Vec<u8>) -> Result<Step, ChannelError> {
        // Telegram has no socket transport; nothing to do.
        Ok(Step { state, actions: vec![] })
    }

    fn on_timer(_name: String, state: Vec<u8>) -> Result<Step, ChannelError> {
        Ok(Step { state, actions: vec![] })
    }

    fn deliver(message: Outgoing) -> Result<Vec<String>, ChannelError> {
        let to = channel::conversation(&message.chat_id, message.thread.as_deref()).map_err(error)?;
        let media: Vec<channel::OutMedia> =
            message.media.into_iter().map(|m| channel::OutMedia { kind: m.kind, reference: m.reference }).collect();
        let requests =
            channel::deliver_requests(DEFAULT_API_BASE, &to, &message.text, message.reply_to.as_deref(), &media).map_err(error)?;
        requests.iter().map(send_part).collect()
    }

    fn stream_update(chat_id: String, thread: Option<String>, handle: Option<String>, text_so_far: String, _done: bool) -> Result<String, ChannelError> {
        // Every call shows the whole reply so far (see `channel::stream_plan`),
        // so the last one (`done`) needs nothing of its own.
        let to = channel::conversation(&chat_id, thread.as_deref()).map_err(error)?;
        let mut shown = channel::parse_handle(handle.as_deref()).map_err(error)?;
        let plan = channel::stream_plan(&text_so_far, &shown);
        if plan.is_empty() {
            return handle.ok_or_else(|| ChannelError::Transient("nothing to show yet".into()));
        }
        for (i, (part, op)) in plan.into_iter().enumerate() {
            let digest = channel::digest(&part);
            match op {
                channel::StreamOp::Keep => {}
                channel::StreamOp::Send(part) => {
                    let id = send_part(&api::send_message(DEFAULT_API_BASE, &to, &part, None))?;
                    let id = id.parse().map_err(|_| ChannelError::Transient(format!("not a message id: {id:?}")))?;
                    shown.push(channel::Shown { id, digest });
                }
                channel::StreamOp::Edit(message_id, part) => {
                    match call(&api::edit_message_text(DEFAULT_API_BASE, to.chat_id, message_id, &part)) {
                        Ok(_) | Err(ApiError::NotModified) => shown[i].digest = digest,
                        Err(e) => return Err(error(channel::delivery_failure(&e))),
                    }
                }
            }
        }
        Ok(channel::format_handle(&shown))
    }

    fn media_request(media: MediaRef) -> Result<HttpRequest, ChannelError> {
        // `getFile` is small JSON and runs here; the file itself is fetched
        // by the host, which streams it to disk under the size cap.
        let result = call(&api::get_file(DEFAULT_API_BASE, &media.reference)).map_err(|e| error(channel::delivery_failure(&e)))?;
        let download = channel::download_request(DEFAULT_API_BASE, &result).map_err(error)?;
        // Up to 20 MB: more time than the host's 30 s default.
        Ok(request(download, 120_000))
    }

    fn upload_request(chat_id: String, thread: Option<String>, file: OutgoingFile) -> Result<Upload, ChannelError> {
        // The host streams the bytes into this multipart request; the
        // component never holds them.
        let to = channel::conversation(&chat_id, thread.as_deref()).map_err(error)?;
        let plan = api::upload(DEFAULT_API_BASE, &to, &file.mime, file.size);
        Ok(Upload {
            request: HttpRequest { method: HttpMethod::Post, url: plan.url, headers: vec![], body: vec![], timeout_ms: plan.timeout_ms },
            fields: plan.fields,
            file_field: plan.file_field.into(),
        })
    }

    fn set_status(chat_id: String, status: ChatStatus) -> Result<(), ChannelError> {
        // Telegram's indicator expires by itself (~5 s); `idle` sends nothing.
        if matches!(status, ChatStatus::Idle) {
            return Ok(());
        }
        let to = channel::conversation(&chat_id, None).map_err(error)?;
        call(&api::send_chat_action(DEFAULT_API_BASE, &to, api::ChatAction::Typing)).map(|_| ()).map_err(|e| error(channel::delivery_failure(&e)))
    }
}

export!(Telegram);

/// A blocking `wasi:http` client: just enough for one Bot API call.
mod http {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};

    use crate::api::{HttpMethod, HttpRequest};

    /// Runs `request`; the status and the whole body, or why not.
    pub fn send(request: &HttpRequest) -> Result<(u16, Vec<u8>), String> {
        let (scheme, rest) = if let Some(rest) = request.url.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = request.url.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return Err(format!("not an http(s) URL: {}", request.url));
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let headers: Vec<(String, Vec<u8>)> = request.headers.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect();
        let fields = Fields::from_list(&headers).map_err(|e| format!("bad header: {e:?}"))?;
        let outgoing = OutgoingRequest::new(fields);
        let method = match request.method {
            HttpMethod::Get => Method::Get,
            HttpMethod::Post => Method::Post,
        };
        let set = outgoing.set_method(&method).is_ok()
            && outgoing.set_scheme(Some(&scheme)).is_ok()
            && outgoing.set_authority(Some(authority)).is_ok()
            && outgoing.set_path_with_query(Some(if path.is_empty() { "/" } else { path })).is_ok();
        if !set {
            return Err(format!("the host refused the request line of {}", request.url));
        }
        let body = outgoing.body().map_err(|_| "no request body".to_string())?;
        let future = outgoing_handler::handle(outgoing, None).map_err(|e| format!("request refused: {e:?}"))?;
        // A write error is reported after the response future's: when the
        // host refuses the request (not granted) the body stream just
        // closes, and the refusal is the error that says why.
        let written: Result<(), String> = (|| {
            let stream = body.write().map_err(|_| "no body stream".to_string())?;
            for chunk in request.body.as_deref().unwrap_or("").as_bytes().chunks(4096) {
                stream.blocking_write_and_flush(chunk).map_err(|e| format!("writing the body: {e:?}"))?;
            }
            Ok(())
        })();
        let finished = OutgoingBody::finish(body, None).map_err(|e| format!("finishing the body: {e:?}"));
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(e))) => return Err(format!("HTTP error: {e:?}")),
            _ => return Err("no response".into()),
        };
        written?;
        finished?;
        let status = response.status();
        let incoming = response.consume().map_err(|_| "no response body".to_string())?;
        let mut bytes = Vec::new();
        {
            let stream = incoming.stream().map_err(|_| "no response stream".to_string())?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => bytes.extend(chunk),
                    Err(wasip2::io::streams::StreamError::Closed) => break,
                    Err(e) => return Err(format!("reading the response: {e:?}")),
                }
                if bytes.len() > 1 << 20 {
                    return Err("response over 1 MiB".into());
                }
            }
        }
        Ok((status, bytes))
    }
}
