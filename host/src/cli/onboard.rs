//! `chitin onboard`: a commented config and a workspace to start from.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use chitin::config::DataDir;
use chitin::workspace::Workspace;

/// The config `onboard` writes. Its values are the built-in defaults, so a
/// host without a config behaves the same.
pub const CONFIG_TEMPLATE: &str = r#"# chitin configuration. Every key is optional; shown values are the defaults.

# The directory the agent (and plugins granted workspace access) works in.
# Relative paths are taken from the data dir (~/.chitin or $CHITIN_HOME).
# workspace = "workspace"

[agent]
model = "gpt-4o-mini"
provider = "openai"            # a key of [providers]
max_tokens = 8192              # completion tokens per request
context_window = 65536         # the model's context window
max_iterations = 200           # tool rounds per turn
max_tool_result_chars = 16000  # longer results are saved to the workspace
llm_timeout_secs = 300         # one model request
max_concurrent_turns = 3       # across sessions; 0 = unlimited
pending_queue_size = 20        # messages queued for a busy session
history_max_messages = 500
idle_compact_after_minutes = 0 # summarise idle sessions; 0 = off
stream = true
goal_budget_secs = 1800        # one turn's work on an active /goal
# temperature = 0.7

# fallback_models = [{ provider = "claude", model = "claude-haiku-4-5" }]  # tried when the model is down

# Dream: folds the conversation history into memory/MEMORY.md, USER.md,
# SOUL.md and skills/ (also by hand with /dream).
[agent.dream]
enabled = true                 # periodically in `chitin gateway`
interval_secs = 7200
max_iterations = 30

# Heartbeat: `chitin gateway` reads HEARTBEAT.md every interval and does the
# tasks it lists, answering in `chat` (default: the chat that wrote last).
[agent.heartbeat]
enabled = false
interval_secs = 1800
# chat = "telegram:12345"

# Any OpenAI-compatible endpoint: OpenAI, OpenRouter, vLLM, Ollama, ...
[providers.openai]
base_url = "https://api.openai.com/v1"
api_key = "${OPENAI_API_KEY}"  # ${VAR} is read from the environment

# Anthropic's Messages API (set [agent] provider = "claude" to use it):
# [providers.claude]
# api = "anthropic"
# api_key = "${ANTHROPIC_API_KEY}"

# Per-call limits for every plugin.
[limits]
timeout_ms = 30000
memory_mb = 256
max_output_kb = 1024
max_concurrent_calls = 32

# Grants. A plugin gets the lesser of what it asks for and what is granted here.
# workspace = "none" | "read" | "read-write"; network = ["host", "host:port", "*.domain"]
[plugins.fs]
workspace = "read-write"

# Web tools (web_fetch, web_search) are off until this table exists. "*" is
# any public host; loopback and private addresses need the address itself.
# [plugins.web]
# network = ["*"]
# settings = { search_provider = "brave" }   # or "tavily", or "searxng" + searxng_url
# secrets = { brave_api_key = "${BRAVE_API_KEY}" }

# `chitin gateway`: the OpenAI-compatible API. It refuses to start without a
# token; auth_token = "" (no authentication) is accepted on loopback only.
[gateway]
listen = "127.0.0.1:8790"
auth_token = "${CHITIN_GATEWAY_TOKEN}"
"#;

const AGENTS_MD: &str = "# Agent instructions\n\nYou are a careful assistant. Prefer reading files before changing them, and say what you changed.\n";
const SOUL_MD: &str = "# Soul\n\nBe concise, friendly and honest. Say so when you are unsure.\n";
const USER_MD: &str = "# User\n\n(Write here what the agent should know about you: name, timezone, preferences.)\n";
const MEMORY_MD: &str = "# Memory\n\n(Long-term facts the agent should remember.)\n";

pub fn run(data: &DataDir, force: bool) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(data.root()).with_context(|| format!("cannot create {}", data.root().display()))?;
    let config = data.config_file();
    if config.exists() && !force {
        outln!("config exists: {} (use --force to overwrite)", config.display())?;
    } else {
        std::fs::write(&config, CONFIG_TEMPLATE).with_context(|| format!("cannot write {}", config.display()))?;
        outln!("wrote {}", config.display())?;
    }
    let workspace = data.default_workspace();
    std::fs::create_dir_all(&workspace).with_context(|| format!("cannot create {}", workspace.display()))?;
    // Through the workspace handle: a plugin may have planted a dangling
    // symlink at one of these names to make onboarding write outside.
    let files = Workspace::open(&workspace)?;
    for (file, text) in [("AGENTS.md", AGENTS_MD), ("SOUL.md", SOUL_MD), ("USER.md", USER_MD), ("memory/MEMORY.md", MEMORY_MD), ("HEARTBEAT.md", chitin::agent::heartbeat::HEARTBEAT_TEMPLATE)] {
        write_if_missing(&files, Path::new(file), text)?;
    }
    files.create_dir_all(Path::new("skills"))?;
    outln!("workspace: {}", workspace.display())?;
    outln!("next: set OPENAI_API_KEY (or ANTHROPIC_API_KEY, or edit [providers]) and run `chitin agent`")?;
    Ok(ExitCode::SUCCESS)
}

fn write_if_missing(files: &Workspace, rel: &Path, text: &str) -> anyhow::Result<()> {
    match files.file_metadata(rel) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Ok(files.write(rel, text.as_bytes())?),
        Err(e) => {
            errln!("warning: {}", chitin::text::for_terminal(&e.to_string()));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_template_parses_to_the_defaults() {
        let config = chitin::config::Config::parse(super::CONFIG_TEMPLATE, std::path::Path::new("t")).unwrap();
        assert_eq!(config.agent, chitin::config::AgentConfig::default());
        assert_eq!(config.limits.timeout_ms, chitin::plugins::Limits::default().timeout_ms);
        assert_eq!(Some(config.plugins["fs"].clone()), chitin::plugins::catalog::builtin_default_grant("fs"));
    }
}
