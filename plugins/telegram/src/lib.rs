//! chitin-plugin-telegram: the Telegram channel's protocol logic.
//!
//! The channel component (see `../shared/spec/CHANNELS.md`) is a protocol
//! translator and state machine, never a transport owner: the host runs
//! every HTTP request, holds the long poll, verifies webhooks, keeps the
//! committed state and the token. What is left for the adapter is what this
//! crate does, as plain functions over JSON and strings, tested natively so
//! the component glue (the `channel-plugin` world) stays a thin mapping:
//! - [`update`]: a `getUpdates` answer or a webhook update into
//!   [`InboundEvent`]s (event id, sender, session key, text, media,
//!   mention/reply/command flags) and the next offset;
//! - [`api`]: the Bot API requests as values, the token as the
//!   `{{secret:bot_token}}` placeholder;
//! - [`render`]: the agent's Markdown as Telegram HTML, split by [`split`]
//!   into messages of at most 4096 UTF-16 units;
//! - [`channel`]: the callbacks' state machine (state, offset, steps);
//! - [`error`]: a failed call classified into the host's [`Action`] (stop on
//!   401/409, wait on 429, ignore "not modified", resend plain text when the
//!   markup is refused, otherwise retry).

pub mod api;
pub mod channel;
pub mod error;
pub mod render;
pub mod split;
pub mod update;

/// The `channel-plugin` component: bindings and the `Guest` impl, only in
/// the wasm build (natively the crate is the plain library above).
#[cfg(target_arch = "wasm32")]
mod glue;

pub use api::{HttpMethod, HttpRequest, TOKEN_PLACEHOLDER};
pub use error::{Action, ApiError, TelegramError, api_result};
pub use render::{OutgoingText, ParseMode, render_reply};
pub use split::MAX_MESSAGE_UTF16;
pub use update::{Batch, Conversation, InboundEvent, parse_get_updates, parse_update, parse_webhook};
