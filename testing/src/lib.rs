//! chitin's test support, kept out of the shipped crate: the integration
//! tests (`tests/it`, `host/tests/e2e`), the benchmarks and the host's unit
//! tests dev-depend on it. It holds [`MockLlm`], a scripted OpenAI-compatible and
//! Anthropic Messages server (with prompt-cache accounting), so
//! nothing that exercises a provider or the agent loop needs the network;
//! [`MockTelegram`], a scripted Telegram Bot API (long polling, webhooks,
//! the 4096 limit, scripted 429/409), so channel tests need no network
//! either; [`MockWeb`], pages and search APIs for the `web` plugin;
//! [`MockIndex`], a static plugin index with fault switches;
//! [`bomb`], a component that is expensive to compile; the guest
//! components the tests load (built by `build.rs`) and a one-plugin host
//! ([`OnePlugin`]); a whole agent over a mock model ([`agent`]); the driver
//! of the `chitin` binary ([`binary`]).
//!
//! The host's unit tests use only the servers here, over HTTP: they link
//! `chitin` a second time through this crate, so no type of this crate's
//! `chitin` may meet one of theirs.

pub mod agent;
pub mod binary;
pub mod bomb;
mod harness;
pub mod server;
mod mock_index;
mod mock_anthropic;
mod mock_llm;
pub mod mock_oauth;
mod mock_telegram;
mod mock_web;

pub use harness::*;
pub use mock_index::{Fault, MockIndex};
pub use mock_web::{MockWeb, WebRequest};
pub use mock_anthropic::CacheStats;
pub use mock_llm::{MockLlm, MockReply, SCRIPT_EXHAUSTED, Script};
pub use mock_telegram::{
    CONFLICT_POLLER, CONFLICT_WEBHOOK, ChatAction, Edit, MAX_CAPTION_UTF16, MAX_TEXT_UTF16, MOCK_BOT_ID, MOCK_BOT_TOKEN,
    MOCK_BOT_USERNAME, MockTelegram, MockTelegramError, MockUpdate, NOT_MODIFIED, SentMedia, SentMessage, TelegramRequest,
    Upload, Webhook,
};
