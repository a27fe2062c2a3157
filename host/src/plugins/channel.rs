//! Calling a channel component (`channel-plugin` of `chitin:plugin@0.2.0`),
//! and the bounds the host puts on what it returns.
//!
//! Every callback runs like a tool call: a fresh instance from the prepared
//! `InstancePre`, under the same memory, time and resource limits, one call
//! slot each. What comes back is checked before the caller sees it, because a
//! channel's state is kept across calls and its actions are performed by the
//! host: a step whose state is over [`MAX_STATE_BYTES`], with more than
//! [`MAX_ACTIONS`] actions, or with a text past its cap is an error naming
//! what was too big, and nothing of it is returned. Committing the state of
//! a valid step is the caller's job (the channel manager), so a failed call
//! never moves a channel forward.

use super::PluginError;
use super::bindings::v0_2;
use super::error::{Call, ChannelFailure};
use super::runtime::{LoadedPlugin, PluginRuntime, Prepared};

pub use super::bindings::v0_2::wit::{
    Action, ChannelError, ChatKind, ChatStatus, Frame, HttpMethod, HttpRequest, HttpResponse, Inbound, MediaRef, Outgoing,
    OutgoingFile, SocketClose, SocketClosed, SocketEvent, SocketOpen, SocketSend, Step, Timer, Trigger, Upload, WebhookRequest,
    WebhookResponse,
};

/// Largest state blob a step may return.
pub const MAX_STATE_BYTES: usize = 64 * 1024;
/// Most actions one step may carry.
pub const MAX_ACTIONS: usize = 64;
/// Largest message text of an emit, in bytes: a 4096-character message of
/// any script is at most 16 KiB, so this leaves room for longer platforms.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Largest id, name, URL or header value.
pub const MAX_SHORT_BYTES: usize = 4 * 1024;
/// Largest body of a request, a webhook answer or a socket frame.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Most headers on one request or answer.
pub const MAX_HEADERS: usize = 64;
/// Most media on one inbound message.
pub const MAX_MEDIA: usize = 16;
/// Most message ids one `deliver` returns (a reply split into parts).
pub const MAX_DELIVERED_IDS: usize = 64;
/// Most text fields of one upload.
pub const MAX_UPLOAD_FIELDS: usize = 32;
/// Shortest interval of a repeating timer: a 0 ms repeat would make the
/// host call the component in a busy loop.
pub const MIN_REPEAT_MS: u32 = 100;

/// A transport callback: what happened, for a step.
#[derive(Debug, Clone, Copy)]
pub enum Callback<'a> {
    /// `start(config, state)`: `config` is the channel's config as JSON.
    Start {
        /// The channel's config as JSON.
        config: &'a str,
    },
    /// `poll-response(response, state)`.
    PollResponse(&'a HttpResponse),
    /// `on-webhook(request, state)`, already verified.
    Webhook(&'a WebhookRequest),
    /// `on-socket(name, event, state)`.
    Socket {
        /// The socket's name.
        name: &'a str,
        /// What happened on it.
        event: &'a SocketEvent,
    },
    /// `on-timer(name, state)`.
    Timer {
        /// The timer's name.
        name: &'a str,
    },
}

impl Callback<'_> {
    /// The WIT name of the callback.
    pub fn name(&self) -> &'static str {
        match self {
            Callback::Start { .. } => "start",
            Callback::PollResponse(_) => "poll-response",
            Callback::Webhook(_) => "on-webhook",
            Callback::Socket { .. } => "on-socket",
            Callback::Timer { .. } => "on-timer",
        }
    }
}

impl PluginRuntime {
    /// Runs one transport callback of channel `plugin` with the committed
    /// `state` in a fresh instance, and returns its step once it is within
    /// bounds. The caller commits `step.state` and performs `step.actions`.
    pub async fn channel_step(&self, plugin: &LoadedPlugin, callback: Callback<'_>, state: &[u8]) -> Result<Step, PluginError> {
        let call = Call::Channel(callback.name());
        let step = self
            .channel_call(plugin, &call, async |store, pre| {
                let instance = pre.instantiate_async(&mut *store).await?;
                let channel = instance.chitin_plugin_channel();
                match callback {
                    Callback::Start { config } => channel.call_start(&mut *store, config, state).await,
                    Callback::PollResponse(response) => channel.call_poll_response(&mut *store, response, state).await,
                    Callback::Webhook(request) => channel.call_on_webhook(&mut *store, request, state).await,
                    Callback::Socket { name, event } => channel.call_on_socket(&mut *store, name, event, state).await,
                    Callback::Timer { name } => channel.call_on_timer(&mut *store, name, state).await,
                }
            })
            .await?;
        check_step(&step, matches!(callback, Callback::Webhook(_))).map_err(|bound| bound.into_error(plugin, call))?;
        Ok(step)
    }

    /// The long-poll request the host should run next for `state`.
    pub async fn channel_poll_request(&self, plugin: &LoadedPlugin, state: &[u8]) -> Result<HttpRequest, PluginError> {
        let call = Call::Channel("poll-request");
        let request = self
            .channel_call(plugin, &call, async |store, pre| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.chitin_plugin_channel().call_poll_request(&mut *store, state).await
            })
            .await?;
        check_request(&request, "request").map_err(|bound| bound.into_error(plugin, call))?;
        Ok(request)
    }

    /// Sends `message`; returns the platform's message ids.
    pub async fn channel_deliver(&self, plugin: &LoadedPlugin, message: &Outgoing) -> Result<Vec<String>, PluginError> {
        let call = Call::Channel("deliver");
        let ids = self
            .channel_call(plugin, &call, async |store, pre| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.chitin_plugin_channel().call_deliver(&mut *store, message).await
            })
            .await?;
        let check = || {
            if ids.len() > MAX_DELIVERED_IDS {
                return Err(Bound::Count { field: "ids".into(), count: ids.len(), limit: MAX_DELIVERED_IDS });
            }
            ids.iter().enumerate().try_for_each(|(i, id)| short(&format!("ids[{i}]"), id))
        };
        check().map_err(|bound| bound.into_error(plugin, call))?;
        Ok(ids)
    }

    /// Shows the reply streamed so far; returns the handle for the next call.
    pub async fn channel_stream_update(
        &self,
        plugin: &LoadedPlugin,
        chat_id: &str,
        thread: Option<&str>,
        handle: Option<&str>,
        text_so_far: &str,
        done: bool,
    ) -> Result<String, PluginError> {
        let call = Call::Channel("stream-update");
        let handle = self
            .channel_call(plugin, &call, async |store, pre| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.chitin_plugin_channel().call_stream_update(&mut *store, chat_id, thread, handle, text_so_far, done).await
            })
            .await?;
        short("handle", &handle).map_err(|bound| bound.into_error(plugin, call))?;
        Ok(handle)
    }

    /// The request that downloads `media` (run by the host, not the
    /// component), checked like any request a component returns.
    pub async fn channel_media_request(&self, plugin: &LoadedPlugin, media: &MediaRef) -> Result<HttpRequest, PluginError> {
        let call = Call::Channel("media-request");
        let request = self
            .channel_call(plugin, &call, async |store, pre| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.chitin_plugin_channel().call_media_request(&mut *store, media).await
            })
            .await?;
        check_request(&request, "request").map_err(|bound| bound.into_error(plugin, call))?;
        Ok(request)
    }

    /// The upload of `file` to `chat_id` (run by the host, which streams the
    /// bytes in), checked like any request a component returns: an empty
    /// body, bounded fields, a field name for the file.
    pub async fn channel_upload_request(&self, plugin: &LoadedPlugin, chat_id: &str, thread: Option<&str>, file: &OutgoingFile) -> Result<Upload, PluginError> {
        let call = Call::Channel("upload-request");
        let upload = self
            .channel_call(plugin, &call, async |store, pre| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.chitin_plugin_channel().call_upload_request(&mut *store, chat_id, thread, file).await
            })
            .await?;
        check_upload(&upload).map_err(|bound| bound.into_error(plugin, call))?;
        Ok(upload)
    }

    /// Sets the typing indicator of `chat_id`.
    pub async fn channel_set_status(&self, plugin: &LoadedPlugin, chat_id: &str, status: ChatStatus) -> Result<(), PluginError> {
        let call = Call::Channel("set-status");
        self.channel_call(plugin, &call, async |store, pre| {
            let instance = pre.instantiate_async(&mut *store).await?;
            instance.chitin_plugin_channel().call_set_status(&mut *store, chat_id, status).await
        })
        .await
    }

    /// One callback in a fresh store under the call limits: `run` gets the
    /// store and the prepared component; its `channel-error` becomes
    /// [`PluginError::Channel`], a trap or timeout the named error.
    async fn channel_call<T>(
        &self,
        plugin: &LoadedPlugin,
        call: &Call,
        run: impl AsyncFnOnce(
            &mut wasmtime::Store<super::sandbox::StoreState>,
            &v0_2::channel::ChannelPluginPre<super::sandbox::StoreState>,
        ) -> wasmtime::Result<Result<T, ChannelError>>,
    ) -> Result<T, PluginError> {
        let Prepared::ChannelV0_2(pre) = self.prepared(plugin).await? else {
            return Err(PluginError::WrongWorld { plugin: plugin.name().to_string(), world: plugin.world, wanted: "channel callbacks" });
        };
        let _slot = self.slot().await;
        // A channel callback never writes the workspace, whatever the grant.
        let mut store = self.new_store(plugin, None, true)?;
        let outcome = tokio::time::timeout(self.limits().timeout() + super::engine::TICK, run(&mut store, pre)).await;
        match self.settle(plugin, call, outcome, &store)? {
            Ok(value) => Ok(value),
            Err(error) => {
                let (kind, message) = match error {
                    ChannelError::Transient(m) => (ChannelFailure::Transient, m),
                    ChannelError::Fatal(m) => (ChannelFailure::Fatal, m),
                };
                let message = crate::text::clip_for_terminal(&message, super::runtime::MAX_ERROR_BYTES, "error");
                Err(PluginError::Channel { plugin: plugin.name().to_string(), call: call.clone(), kind, message })
            }
        }
    }
}

/// A bound a callback's result broke, before it is worded.
#[derive(Debug, PartialEq)]
enum Bound {
    State(usize),
    Actions(usize),
    Size { field: String, size: usize, limit: usize },
    Count { field: String, count: usize, limit: usize },
    Invalid { field: String, message: String },
}

impl Bound {
    fn into_error(self, plugin: &LoadedPlugin, call: Call) -> PluginError {
        let plugin = plugin.name().to_string();
        match self {
            Bound::State(size) => PluginError::StateTooLarge { plugin, call, size, limit: MAX_STATE_BYTES },
            Bound::Actions(count) => PluginError::TooManyActions { plugin, call, count, limit: MAX_ACTIONS },
            Bound::Size { field, size, limit } => PluginError::FieldTooLarge { plugin, call, field, size, limit },
            Bound::Count { field, count, limit } => PluginError::InvalidStep {
                plugin,
                call,
                field,
                message: format!("{count} entries, over the limit of {limit}"),
            },
            Bound::Invalid { field, message } => PluginError::InvalidStep { plugin, call, field, message },
        }
    }
}

fn size(field: &str, len: usize, limit: usize) -> Result<(), Bound> {
    if len > limit { Err(Bound::Size { field: field.to_string(), size: len, limit }) } else { Ok(()) }
}

fn short(field: &str, text: &str) -> Result<(), Bound> {
    size(field, text.len(), MAX_SHORT_BYTES)
}

fn invalid(field: &str, message: impl Into<String>) -> Bound {
    Bound::Invalid { field: field.to_string(), message: message.into() }
}

fn check_headers(field: &str, headers: &[(String, String)]) -> Result<(), Bound> {
    if headers.len() > MAX_HEADERS {
        return Err(Bound::Count { field: field.to_string(), count: headers.len(), limit: MAX_HEADERS });
    }
    for (i, (name, value)) in headers.iter().enumerate() {
        short(&format!("{field}[{i}].name"), name)?;
        short(&format!("{field}[{i}].value"), value)?;
    }
    Ok(())
}

fn check_url(field: &str, url: &str, schemes: &[&str]) -> Result<(), Bound> {
    short(field, url)?;
    if !schemes.iter().any(|s| url.strip_prefix(s).is_some_and(|rest| rest.starts_with("://"))) {
        return Err(invalid(field, format!("must be an absolute {} URL", schemes.join(" or "))));
    }
    Ok(())
}

fn check_request(request: &HttpRequest, field: &str) -> Result<(), Bound> {
    check_url(&format!("{field}.url"), &request.url, &["http", "https"])?;
    check_headers(&format!("{field}.headers"), &request.headers)?;
    size(&format!("{field}.body"), request.body.len(), MAX_BODY_BYTES)
}

fn check_upload(upload: &Upload) -> Result<(), Bound> {
    check_request(&upload.request, "request")?;
    if !upload.request.body.is_empty() {
        return Err(invalid("request.body", "must be empty: the host builds the multipart body"));
    }
    if upload.fields.len() > MAX_UPLOAD_FIELDS {
        return Err(Bound::Count { field: "fields".into(), count: upload.fields.len(), limit: MAX_UPLOAD_FIELDS });
    }
    for (i, (name, value)) in upload.fields.iter().enumerate() {
        form_name(&format!("fields[{i}].name"), name)?;
        // A caption or a JSON parameter can be longer than a header value.
        size(&format!("fields[{i}].value"), value.len(), MAX_TEXT_BYTES)?;
    }
    form_name("file-field", &upload.file_field)
}

/// A multipart part name: it goes into a `Content-Disposition` header line,
/// so it is short, not empty, and has no quote, backslash or control char.
fn form_name(field: &str, name: &str) -> Result<(), Bound> {
    short(field, name)?;
    if name.is_empty() || name.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        return Err(invalid(field, "must be a non-empty name without quotes, backslashes or control characters"));
    }
    Ok(())
}

/// Checks a step against every bound; the first one broken is returned.
/// `webhook` says whether the step answers a webhook (only then may it
/// `respond`, once).
fn check_step(step: &Step, webhook: bool) -> Result<(), Bound> {
    if step.state.len() > MAX_STATE_BYTES {
        return Err(Bound::State(step.state.len()));
    }
    if step.actions.len() > MAX_ACTIONS {
        return Err(Bound::Actions(step.actions.len()));
    }
    let mut responded = false;
    for (i, action) in step.actions.iter().enumerate() {
        let at = |what: &str| format!("actions[{i}].{what}");
        match action {
            Action::Emit(inbound) => {
                for (name, value) in [("emit.event-id", &inbound.event_id), ("emit.sender-id", &inbound.sender_id), ("emit.chat-id", &inbound.chat_id)] {
                    short(&at(name), value)?;
                    if value.is_empty() {
                        return Err(invalid(&at(name), "must not be empty"));
                    }
                }
                for (name, value) in [("emit.sender-name", &inbound.sender_name), ("emit.thread", &inbound.thread)] {
                    if let Some(value) = value {
                        short(&at(name), value)?;
                    }
                }
                size(&at("emit.text"), inbound.text.len(), MAX_TEXT_BYTES)?;
                if inbound.media.len() > MAX_MEDIA {
                    return Err(Bound::Count { field: at("emit.media"), count: inbound.media.len(), limit: MAX_MEDIA });
                }
                for (j, media) in inbound.media.iter().enumerate() {
                    short(&at(&format!("emit.media[{j}].kind")), &media.kind)?;
                    short(&at(&format!("emit.media[{j}].reference")), &media.reference)?;
                    for value in [&media.mime, &media.file_name].into_iter().flatten() {
                        short(&at(&format!("emit.media[{j}]")), value)?;
                    }
                }
            }
            Action::Respond(response) => {
                if !webhook {
                    return Err(invalid(&at("respond"), "only a step of on-webhook may respond"));
                }
                if std::mem::replace(&mut responded, true) {
                    return Err(invalid(&at("respond"), "a webhook request is answered once"));
                }
                if !(100..=599).contains(&response.status) {
                    return Err(invalid(&at("respond.status"), format!("{} is not an HTTP status", response.status)));
                }
                check_headers(&at("respond.headers"), &response.headers)?;
                size(&at("respond.body"), response.body.len(), MAX_BODY_BYTES)?;
            }
            Action::Http(request) => check_request(request, &at("http"))?,
            Action::SocketOpen(open) | Action::SocketReplace(open) => {
                short(&at("socket.name"), &open.name)?;
                check_url(&at("socket.url"), &open.url, &["ws", "wss"])?;
                check_headers(&at("socket.headers"), &open.headers)?;
            }
            Action::SocketSend(send) => {
                short(&at("socket-send.name"), &send.name)?;
                let len = match &send.frame {
                    Frame::Text(text) => text.len(),
                    Frame::Binary(bytes) => bytes.len(),
                };
                size(&at("socket-send.frame"), len, MAX_BODY_BYTES)?;
            }
            Action::SocketClose(close) => {
                short(&at("socket-close.name"), &close.name)?;
                short(&at("socket-close.reason"), &close.reason)?;
            }
            Action::SetTimer(timer) => {
                short(&at("set-timer.name"), &timer.name)?;
                if timer.repeat && timer.after_ms < MIN_REPEAT_MS {
                    return Err(invalid(&at("set-timer.after-ms"), format!("a repeating timer needs at least {MIN_REPEAT_MS} ms")));
                }
            }
            Action::CancelTimer(name) => short(&at("cancel-timer"), name)?,
            Action::PollAfter(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(text: &str) -> Inbound {
        Inbound {
            event_id: "1".into(),
            sender_id: "u".into(),
            sender_name: None,
            chat_id: "c".into(),
            chat_kind: ChatKind::Direct,
            thread: None,
            text: text.into(),
            media: vec![],
            trigger: Trigger::empty(),
        }
    }

    fn step(actions: Vec<Action>) -> Step {
        Step { state: vec![], actions }
    }

    #[test]
    fn a_step_within_bounds_passes() {
        let ok = step(vec![Action::Emit(inbound("hi")), Action::PollAfter(0), Action::CancelTimer("t".into())]);
        assert_eq!(check_step(&ok, false), Ok(()));
    }

    #[test]
    fn each_bound_is_named() {
        let big_state = Step { state: vec![0; MAX_STATE_BYTES + 1], actions: vec![] };
        assert_eq!(check_step(&big_state, false), Err(Bound::State(MAX_STATE_BYTES + 1)));
        let flood = step((0..MAX_ACTIONS + 1).map(|_| Action::PollAfter(0)).collect());
        assert_eq!(check_step(&flood, false), Err(Bound::Actions(MAX_ACTIONS + 1)));
        let long = step(vec![Action::Emit(inbound(&"x".repeat(MAX_TEXT_BYTES + 1)))]);
        assert!(matches!(check_step(&long, false), Err(Bound::Size { field, .. }) if field == "actions[0].emit.text"));
        let mut anonymous = inbound("hi");
        anonymous.event_id.clear();
        assert!(matches!(check_step(&step(vec![Action::Emit(anonymous)]), false), Err(Bound::Invalid { field, .. }) if field == "actions[0].emit.event-id"));
        let respond = Action::Respond(WebhookResponse { status: 200, headers: vec![], body: vec![] });
        assert!(matches!(check_step(&step(vec![respond.clone()]), false), Err(Bound::Invalid { field, .. }) if field == "actions[0].respond"));
        assert_eq!(check_step(&step(vec![respond.clone()]), true), Ok(()));
        assert!(matches!(check_step(&step(vec![respond.clone(), respond]), true), Err(Bound::Invalid { field, .. }) if field == "actions[1].respond"));
        let busy = step(vec![Action::SetTimer(Timer { name: "t".into(), after_ms: 0, repeat: true })]);
        assert!(matches!(check_step(&busy, false), Err(Bound::Invalid { field, .. }) if field == "actions[0].set-timer.after-ms"));
        let file = step(vec![Action::Http(HttpRequest { method: HttpMethod::Get, url: "file:///etc/passwd".into(), headers: vec![], body: vec![], timeout_ms: 0 })]);
        assert!(matches!(check_step(&file, false), Err(Bound::Invalid { field, .. }) if field == "actions[0].http.url"));
        let socket = step(vec![Action::SocketOpen(SocketOpen { name: "s".into(), url: "https://x".into(), headers: vec![] })]);
        assert!(matches!(check_step(&socket, false), Err(Bound::Invalid { field, .. }) if field == "actions[0].socket.url"));
        let headers = (0..MAX_HEADERS + 1).map(|i| (format!("h{i}"), String::new())).collect();
        let many = step(vec![Action::Http(HttpRequest { method: HttpMethod::Post, url: "https://x/".into(), headers, body: vec![], timeout_ms: 0 })]);
        assert!(matches!(check_step(&many, false), Err(Bound::Count { field, .. }) if field == "actions[0].http.headers"));
    }

    #[test]
    fn an_upload_leaves_the_body_to_the_host_and_names_its_parts_plainly() {
        let request = HttpRequest { method: HttpMethod::Post, url: "https://x/send".into(), headers: vec![], body: vec![], timeout_ms: 0 };
        let upload = |fields: Vec<(&str, &str)>, file_field: &str| Upload {
            request: request.clone(),
            fields: fields.into_iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            file_field: file_field.into(),
        };
        assert_eq!(check_upload(&upload(vec![("chat_id", "1")], "document")), Ok(()));
        let with_body = Upload { request: HttpRequest { body: b"bytes".to_vec(), ..request.clone() }, ..upload(vec![], "document") };
        assert!(matches!(check_upload(&with_body), Err(Bound::Invalid { field, .. }) if field == "request.body"));
        assert!(matches!(check_upload(&upload(vec![], "")), Err(Bound::Invalid { field, .. }) if field == "file-field"));
        assert!(matches!(check_upload(&upload(vec![("a\"; x=\"y", "1")], "document")), Err(Bound::Invalid { field, .. }) if field == "fields[0].name"));
        assert!(matches!(check_upload(&upload(vec![], "doc\r\nX: y")), Err(Bound::Invalid { field, .. }) if field == "file-field"));
        let many = upload((0..MAX_UPLOAD_FIELDS + 1).map(|_| ("f", "v")).collect(), "document");
        assert!(matches!(check_upload(&many), Err(Bound::Count { field, .. }) if field == "fields"));
    }
}
