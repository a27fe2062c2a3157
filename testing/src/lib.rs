//! Test support shared by the unit tests, the integration tests (`tests/`)
//! and the benchmarks: [`MockLlm`], a scripted OpenAI-compatible and
//! Anthropic Messages server (with prompt-cache accounting), so
//! nothing that exercises a provider or the agent loop needs the network;
//! [`MockTelegram`], a scripted Telegram Bot API (long polling, webhooks,
//! the 4096 limit, scripted 429/409), so channel tests need no network
//! either; [`MockWeb`], pages and search APIs for the `web` plugin;
//! [`MockIndex`], a static plugin index with fault switches;
//! [`bomb`], a component that is expensive to compile.
//!
//! Compiled into the library (not `cfg(test)`) because integration tests and
//! benchmarks link the library as an ordinary dependency.

pub mod bomb;
pub(crate) mod server;
mod mock_index;
mod mock_anthropic;
mod mock_llm;
mod mock_telegram;
mod mock_web;

pub use mock_index::{Fault, MockIndex};
pub use mock_web::{MockWeb, WebRequest};
pub use mock_anthropic::CacheStats;
pub use mock_llm::{MockLlm, MockReply, SCRIPT_EXHAUSTED, Script};
pub use mock_telegram::{
    CONFLICT_POLLER, CONFLICT_WEBHOOK, ChatAction, Edit, MAX_CAPTION_UTF16, MAX_TEXT_UTF16, MOCK_BOT_ID, MOCK_BOT_TOKEN,
    MOCK_BOT_USERNAME, MockTelegram, MockTelegramError, MockUpdate, NOT_MODIFIED, SentMedia, SentMessage, TelegramRequest,
    Upload, Webhook,
};
