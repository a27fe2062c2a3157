//! Providers as a new user meets them through the `chitin` binary (issue
//! 13): no provider, no key, no endpoint, a refused key, an unreachable
//! endpoint. Each is one clear line on stderr and a failing exit status;
//! nothing that is not set up sends a request.

use crate::common::*;

use chitin::session::{JsonlStore, Role, SessionStore as _};
use chitin_testing::{MockLlm, MockReply};

/// The lines of stderr that are not log lines.
fn error_lines(out: &std::process::Output) -> Vec<String> {
    stderr(out).lines().filter(|l| !l.contains("WARN") && !l.trim().is_empty()).map(str::to_string).collect()
}

#[test]
fn with_no_provider_at_all_agent_says_how_to_set_one_and_exits_2() {
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hello"]).env_remove("ANTHROPIC_API_KEY"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let lines = error_lines(&out);
    assert_eq!(lines.len(), 1, "one line: {lines:?}");
    for needed in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "chitin onboard"] {
        assert!(lines[0].contains(needed), "{needed} missing from {:?}", lines[0]);
    }
    assert!(stdout(&out).is_empty());
    // The gateway refuses to start the same way.
    let out = run_within(chitin(home.path(), &["gateway"]).env_remove("ANTHROPIC_API_KEY").env("CHITIN_GATEWAY_TOKEN", "t"), std::time::Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("OPENAI_API_KEY"), "{}", stderr(&out));
}

#[test]
fn a_provider_that_needs_a_key_and_has_none_makes_no_request() {
    let mock = MockLlm::start(vec![MockReply::text("should not be asked")]);
    let home = tempfile::tempdir().unwrap();
    // Anthropic always needs a key, whatever the endpoint.
    let config = format!("[agent]\nprovider = \"claude\"\n[providers.claude]\napi = \"anthropic\"\nbase_url = \"{}\"\n", mock.base_url());
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hello"]).env_remove("ANTHROPIC_API_KEY"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let lines = error_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("ANTHROPIC_API_KEY") && lines[0].contains("[providers.claude]") && lines[0].contains("chitin onboard"), "{}", lines[0]);
    assert_eq!(mock.request_count(), 0);

    // OpenAI's own endpoint without a key: the same, naming OPENAI_API_KEY.
    std::fs::write(home.path().join("config.toml"), "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n").unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hello"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("OPENAI_API_KEY") && stderr(&out).contains("needs an API key"), "{}", stderr(&out));

    // An onboarded config whose key variable is unset.
    std::fs::write(home.path().join("config.toml"), "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\napi_key = \"${OPENAI_API_KEY}\"\n").unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hello"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("OPENAI_API_KEY is not set"), "{}", stderr(&out));
}

#[test]
fn a_provider_without_an_endpoint_exits_2_naming_the_key() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[providers.openai]\nbase_url = \"\"\napi_key = \"sk-x\"\n").unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hello"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("base_url") && stderr(&out).contains("[providers.openai]"), "{}", stderr(&out));
    // `status` reports it without failing.
    let out = run(chitin(home.path(), &["status"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("MISSING"), "{}", stdout(&out));
}

#[test]
fn a_refused_key_is_said_once_without_retries_and_exits_1() {
    let mock = MockLlm::start(vec![MockReply::api_error(401, "Incorrect API key provided: sk-wrong")]);
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hello", "-s", "cli:key"]).env("OPENAI_BASE_URL", mock.base_url()).env("OPENAI_API_KEY", "sk-wrong"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(mock.request_count(), 1, "a refused key is not retried");
    let lines = error_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("refused the API key") && lines[0].contains("Incorrect API key provided"), "{}", lines[0]);
    assert!(!lines[0].contains("Sorry"), "{}", lines[0]);
    assert!(stdout(&out).is_empty(), "no reply on stdout: {}", stdout(&out));
}

#[test]
fn an_unreachable_endpoint_fails_the_turn_with_one_plain_reason_and_keeps_the_message() {
    let home = tempfile::tempdir().unwrap();
    let out = run_within(
        &mut chitin(home.path(), &["agent", "-m", "are you there?", "-s", "cli:down"]).env("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
        std::time::Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines = error_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(line.starts_with("error: ") && line.contains("after 4 attempts") && line.contains("Connection refused"), "{line}");
    assert_eq!(line.matches("127.0.0.1:1").count(), 1, "the URL once: {line}");
    assert!(!line.contains("client error (Connect)") && !line.contains("error sending request"), "{line}");
    // The user's message is kept for the next try; the model's turn is a
    // neutral placeholder, not the error text.
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:down").unwrap();
    let user: Vec<_> = session.messages.iter().filter(|m| m.role == Role::User).collect();
    assert_eq!(user.len(), 1);
    assert!(user[0].text().contains("are you there?"));
    assert!(session.messages.iter().all(|m| !m.text().contains("Connection refused")));
}

#[test]
fn fallback_models_from_the_config_take_over_when_the_main_one_is_down() {
    let backup = MockLlm::start(vec![MockReply::text("Backup here.")]);
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "[agent]\nprovider = \"main\"\nmodel = \"main-model\"\nfallback_models = [{{ provider = \"backup\", model = \"backup-model\" }}]\n\
         [providers.main]\nbase_url = \"http://127.0.0.1:1/v1\"\n[providers.backup]\nbase_url = \"{}\"\n",
        backup.base_url()
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let out = run_within(&mut chitin(home.path(), &["agent", "-m", "hello"]), std::time::Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Backup here.");
    assert!(stderr(&out).contains("falling back") && stderr(&out).contains("backup/backup-model"), "the switch is logged: {}", stderr(&out));
    assert_eq!(backup.requests()[0]["model"], "backup-model");

    // `status` lists the fallbacks in order, each with its own limits and provider.
    let config = format!(
        "[agent]\nprovider = \"main\"\nmodel = \"main-model\"\ncontext_window = 64000\nfallback_models = [\
         {{ provider = \"backup\", model = \"backup-model\", context_window = 8000, max_tokens = 512 }}, {{ model = \"main-mini\" }}]\n\
         [providers.main]\nbase_url = \"http://127.0.0.1:1/v1\"\n[providers.backup]\nbase_url = \"{}\"\n",
        backup.base_url()
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let out = run(chitin(home.path(), &["status"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let status = stdout(&out);
    let first = status.lines().position(|l| l.starts_with("fallback 1: backup/backup-model (context 8000 tokens, max 512 completion tokens) on backup → ")).expect(&status);
    let second = status.lines().position(|l| l.starts_with("fallback 2: main/main-mini (context 64000 tokens,") && l.contains("on main → http://127.0.0.1:1/v1")).expect(&status);
    assert!(first < second, "{status}");

    // A fallback naming no provider table is refused at start.
    std::fs::write(home.path().join("config.toml"), "[agent]\nfallback_models = [{ provider = \"nope\", model = \"m\" }]\n[providers.openai]\nbase_url = \"http://127.0.0.1:1/v1\"\n").unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hello"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("[providers.nope]") && stderr(&out).contains("agent.fallback_models"), "{}", stderr(&out));
}
