//! `[providers.<name>]`: an endpoint and the API it speaks, next to the
//! providers that use it. `config` names it in `Config` and checks it
//! (`ProviderConfig::check`, which answers with `config::ConfigError`).

use serde::{Deserialize, Serialize};

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderApi {
    /// OpenAI chat completions, and every compatible server.
    #[default]
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl ProviderApi {
    /// The name used in config and status output.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderApi::OpenAi => "openai",
            ProviderApi::Anthropic => "anthropic",
        }
    }

    /// The environment variable conventionally holding this API's key.
    pub fn key_variable(self) -> &'static str {
        match self {
            ProviderApi::OpenAi => "OPENAI_API_KEY",
            ProviderApi::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
}

/// `[providers.<name>]`: an endpoint and the API it speaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// API base URL, e.g. `https://api.openai.com/v1`. Optional for
    /// `api = "anthropic"` (default `https://api.anthropic.com/v1`).
    #[serde(default)]
    pub base_url: String,
    /// API key; `${VAR}` is expanded from the environment.
    #[serde(default)]
    pub api_key: Option<String>,
    /// `openai` (chat completions, the default) or `anthropic` (Messages).
    #[serde(default)]
    pub api: ProviderApi,
    /// `api = "anthropic"` only: ask for extended thinking with this many
    /// tokens of budget (at least 1024, below `[agent] max_tokens`).
    #[serde(default)]
    pub thinking_budget: Option<u32>,
    /// The models of this provider read images (default true); false sends
    /// a text note in place of each image.
    #[serde(default = "yes")]
    pub vision: bool,
}

fn yes() -> bool {
    true
}

/// The model used with only `ANTHROPIC_API_KEY` set and no model chosen.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";

/// Anthropic's API root.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

impl ProviderConfig {
    /// The base URL, with the API's default when none is set.
    pub fn endpoint(&self) -> &str {
        match (self.base_url.trim(), self.api) {
            ("", ProviderApi::Anthropic) => ANTHROPIC_BASE_URL,
            (url, _) => url,
        }
    }
}
