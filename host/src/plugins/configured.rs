//! What a tool plugin gets from its `[plugins.<name>]` table beyond the
//! grant: the values of the secrets its manifest declares, an `api_base`
//! for one of their audiences, and settings the component reads.
//!
//! ```toml
//! [plugins.web]
//! network = ["*"]
//! settings = { search_provider = "brave" }
//! secrets = { brave_api_key = "${BRAVE_API_KEY}" }
//! ```
//!
//! Secrets become an [`Outbound`] on the plugin, so its `wasi:http` requests
//! get a value only for the secret's audience host and every response is
//! redacted (the channels' mechanism, [`super::http`]). A declared secret the
//! config does not give, or whose `${VAR}` is unset, is not an error at load:
//! a plugin that offers several providers needs only the key of the one in
//! use. A request that would carry such a secret to its audience is refused
//! instead, with the config key to set. A configured secret the manifest
//! does not declare, settings that use `${VAR}` (settings are visible to the
//! component: an expanded variable there would be a secret handed to the
//! sandbox) and a malformed `api_base` are errors at load.

use super::PluginError;
use super::grants::{GrantConfig, HostPattern};
use super::http::Outbound;
use super::manifest::Manifest;
use super::secrets::Secrets;
use crate::env::{MissingVariable, expand_env};

/// The environment variable a component finds its settings in (JSON).
pub const SETTINGS_VAR: &str = "CHITIN_PLUGIN_SETTINGS";

/// The [`Outbound`] of a tool plugin with `manifest` under `config`:
/// `None` when it declares no secrets and no `api_base` is set.
pub fn outbound(manifest: &Manifest, config: &GrantConfig) -> Result<Option<Outbound>, PluginError> {
    let plugin = manifest.name.as_str();
    let bad = |message: String| PluginError::Config { plugin: plugin.to_string(), message };
    if manifest.channel.is_some() {
        if !config.secrets.is_empty() || !config.api_base.is_empty() {
            return Err(bad(format!(
                "`{plugin}` is a channel plugin: its secrets and api_base go under [channels.<name>], not [plugins.{plugin}]"
            )));
        }
        return Ok(None);
    }
    for name in config.secrets.0.keys() {
        if !manifest.secrets.iter().any(|s| &s.name == name) {
            let declared: Vec<&str> = manifest.secrets.iter().map(|s| s.name.as_str()).collect();
            let declared = if declared.is_empty() { "none".to_string() } else { declared.join(", ") };
            return Err(bad(format!("[plugins.{plugin}.secrets] sets `{name}`, which the plugin does not declare (it declares: {declared})")));
        }
    }
    let mut values = Vec::new();
    let mut missing = Vec::new();
    for spec in &manifest.secrets {
        let key = format!("plugins.{plugin}.secrets.{}", spec.name);
        match config.secrets.0.get(&spec.name).map(|raw| expand_env(raw, &key)) {
            Some(Ok(value)) if !value.is_empty() => values.push((spec.name.clone(), value)),
            Some(Ok(_)) => return Err(bad(format!("`{key}` is empty"))),
            Some(Err(MissingVariable { variable, .. })) => missing.push((
                spec,
                format!("secret `{}` is not available: config key `{key}` uses ${{{variable}}}, but the environment variable {variable} is not set", spec.name),
            )),
            None => missing.push((
                spec,
                format!(
                    "secret `{}` is not configured: set `{} = \"${{ENV_VAR}}\"` under [plugins.{plugin}.secrets] (config key `{key}`)",
                    spec.name, spec.name
                ),
            )),
        }
    }
    let mut secrets = Secrets::new(&manifest.secrets, |name| values.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()))
        .map_err(|e| bad(e.to_string()))?;
    for (spec, reason) in missing {
        secrets.mark_unavailable(spec, reason).map_err(|e| bad(e.to_string()))?;
    }
    let rewrite = api_base(manifest, config).map_err(bad)?;
    if secrets.is_empty() && rewrite.is_none() {
        return Ok(None);
    }
    Ok(Some(Outbound { secrets, rewrite }))
}

/// `api_base = { "<audience>" = "<base URL>" }`: (origin, base).
fn api_base(manifest: &Manifest, config: &GrantConfig) -> Result<Option<(String, String)>, String> {
    let plugin = manifest.name.as_str();
    let mut entries = config.api_base.iter();
    let Some((host, base)) = entries.next() else { return Ok(None) };
    if entries.next().is_some() {
        return Err(format!("`plugins.{plugin}.api_base` has more than one entry; one platform host can be pointed elsewhere"));
    }
    let key = format!("plugins.{plugin}.api_base");
    let audiences: Vec<String> =
        manifest.secrets.iter().filter_map(|s| s.audience.as_deref()).filter_map(|a| HostPattern::parse(a).ok()).map(|p| p.to_string()).collect();
    let named = HostPattern::parse(host).map(|p| p.to_string()).unwrap_or_default();
    if !audiences.contains(&named) {
        let known = if audiences.is_empty() { "none".to_string() } else { audiences.join(", ") };
        return Err(format!("`{key}` names `{host}`, which is not the audience of a secret the plugin declares (audiences: {known})"));
    }
    let valid = (base.starts_with("http://") || base.starts_with("https://"))
        && base.parse::<http::Uri>().is_ok_and(|u| u.host().is_some_and(|h| !h.is_empty()))
        && !base.contains("${");
    if !valid {
        return Err(format!("`{key}.\"{host}\"` is `{base}`; it must be an http(s) URL such as \"http://127.0.0.1:8080\""));
    }
    Ok(Some((format!("https://{named}"), base.trim_end_matches('/').to_string())))
}

/// The settings as the component receives them (JSON), `None` when there
/// are none; a setting that uses `${VAR}` is refused.
pub fn settings_json(plugin: &str, config: &GrantConfig) -> Result<Option<String>, PluginError> {
    if config.settings.is_empty() {
        return Ok(None);
    }
    let json = serde_json::to_string(&config.settings).map_err(|e| PluginError::Config { plugin: plugin.to_string(), message: e.to_string() })?;
    if let Some((key, _)) = config.settings.iter().find(|(_, v)| v.to_string().contains("${")) {
        return Err(PluginError::Config {
            plugin: plugin.to_string(),
            message: format!(
                "`plugins.{plugin}.settings.{key}` uses ${{VAR}}; settings are visible to the component, so only secrets ([plugins.{plugin}.secrets]) are expanded"
            ),
        });
    }
    Ok(Some(json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::grants::SecretValues;
    use crate::plugins::secrets::{Destination, Place};

    fn manifest() -> Manifest {
        Manifest::from_json(
            br#"{"manifest_version":1,"name":"web","version":"1","tools":[{"name":"t","parameters":{"type":"object"}}],
                "capabilities":{"network":["*","api.search.brave.com","api.tavily.com"]},
                "secrets":[{"name":"brave_api_key","audience":"api.search.brave.com","inject":[{"header":"x-subscription-token"}]},
                           {"name":"tavily_api_key","audience":"api.tavily.com","inject":[{"header":"authorization"}]}]}"#,
        )
        .unwrap()
    }

    fn config(secrets: &[(&str, &str)]) -> GrantConfig {
        GrantConfig {
            secrets: SecretValues(secrets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..GrantConfig::default()
        }
    }

    #[test]
    fn configured_secrets_are_injected_and_missing_ones_named() {
        // SAFETY: a variable only this test reads.
        unsafe { std::env::set_var("CHITIN_TEST_WEB_BRAVE_K4", "brave-s3cret") };
        let out = outbound(&manifest(), &config(&[("brave_api_key", "${CHITIN_TEST_WEB_BRAVE_K4}")])).unwrap().unwrap();
        let s = &out.secrets;
        let brave = Destination::new("api.search.brave.com", 443, "https", "api.search.brave.com");
        let tavily = Destination::new("api.tavily.com", 443, "https", "api.tavily.com");
        assert_eq!(s.fill("{{secret:brave_api_key}}", Place::Header("x-subscription-token"), &brave).unwrap(), "brave-s3cret");
        let why = s.fill("Bearer {{secret:tavily_api_key}}", Place::Header("authorization"), &tavily).unwrap_err().0;
        assert!(why.contains("plugins.web.secrets.tavily_api_key"), "{why}");
        assert!(!format!("{:?}", config(&[("brave_api_key", "literal-v4lue")])).contains("literal-v4lue"));

        let out = outbound(&manifest(), &config(&[("tavily_api_key", "${CHITIN_TEST_WEB_UNSET_Q1}")])).unwrap().unwrap();
        let why = out.secrets.fill("{{secret:tavily_api_key}}", Place::Header("Authorization"), &tavily).unwrap_err().0;
        assert!(why.contains("CHITIN_TEST_WEB_UNSET_Q1") && why.contains("not set"), "{why}");
    }

    #[test]
    fn bad_config_is_refused_at_load() {
        let e = outbound(&manifest(), &config(&[("brave_key", "x")])).unwrap_err().to_string();
        assert!(e.contains("does not declare") && e.contains("brave_api_key, tavily_api_key"), "{e}");
        let mut c = config(&[]);
        c.api_base.insert("example.com".into(), "http://127.0.0.1:1".into());
        assert!(outbound(&manifest(), &c).unwrap_err().to_string().contains("not the audience"));
        c.api_base.clear();
        c.api_base.insert("api.search.brave.com".into(), "ftp://x".into());
        assert!(outbound(&manifest(), &c).unwrap_err().to_string().contains("http(s) URL"));
        c.api_base.clear();
        c.api_base.insert("api.search.brave.com".into(), "http://127.0.0.1:9/".into());
        assert_eq!(outbound(&manifest(), &c).unwrap().unwrap().rewrite, Some(("https://api.search.brave.com".into(), "http://127.0.0.1:9".into())));

        let mut c = config(&[]);
        c.settings.insert("key".into(), "${HOME}".into());
        assert!(settings_json("web", &c).unwrap_err().to_string().contains("plugins.web.settings.key"));
        c.settings.insert("key".into(), "brave".into());
        assert_eq!(settings_json("web", &c).unwrap().as_deref(), Some(r#"{"key":"brave"}"#));
    }
}
