//! `chitin onboard`: a commented config and a workspace to start from.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use chitin::config::DataDir;
use chitin::workspace::Workspace;

/// The config `onboard` writes. Its values are the built-in defaults, so a
/// host without a config behaves the same. A file of its own so that the
/// book includes it whole (docs/src/configuration/configuration.md) and
/// tests/docs.rs parses the same bytes the binary writes.
pub(super) const CONFIG_TEMPLATE: &str = include_str!("config.toml");

const AGENTS_MD: &str = "# Agent instructions\n\nYou are a careful assistant. Prefer reading files before changing them, and say what you changed.\n";
const SOUL_MD: &str = "# Soul\n\nBe concise, friendly and honest. Say so when you are unsure.\n";
const USER_MD: &str = "# User\n\n(Write here what the agent should know about you: name, timezone, preferences.)\n";
const MEMORY_MD: &str = "# Memory\n\n(Long-term facts the agent should remember.)\n";

pub(super) fn run(data: &DataDir, force: bool) -> anyhow::Result<ExitCode> {
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
    for (file, text) in [("AGENTS.md", AGENTS_MD), ("SOUL.md", SOUL_MD), ("USER.md", USER_MD), ("memory/MEMORY.md", MEMORY_MD), ("HEARTBEAT.md", chitin::features::heartbeat::HEARTBEAT_TEMPLATE)] {
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
