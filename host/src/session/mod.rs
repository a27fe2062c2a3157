//! Sessions: the persisted conversation of one chat (spec §6).
//!
//! - `message`: the message shape shared with providers;
//! - `session`: `Session` and the history rules;
//! - `store`: the `SessionStore` trait and the embedded JSONL store.

mod message;
#[allow(clippy::module_inception)]
mod session;
mod store;

pub use message::{CHANNEL_DELIVERY, COMMAND_MARKER, FunctionCall, ImagePart, Message, Role, THINKING_BLOCKS, TokenMemo, ToolCall};
pub use session::{holds_subagent_result, ANSWERED_INBOX, LAST_PROMPT_TOKENS, PENDING_ARCHIVES, PENDING_INBOX, LAST_PROMPT_TOKENS_BOUND, MIN_RECENT_MESSAGES, PENDING_USER_TURN, RUNTIME_CHECKPOINT, Session};
pub use store::{JsonlStore, METADATA_RECORDS_BEFORE_REWRITE, SessionError, SessionStore, decode_key, encode_key};
