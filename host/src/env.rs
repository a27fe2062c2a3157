//! `${VAR}` references in config values, expanded from the environment.
//!
//! A leaf: the config, the plugin settings and the channel settings all
//! expand the same way, and none of them has to import another for it.

/// A `${VAR}` in a config value names an unset (or empty) variable, or is
/// not closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config key `{field}` uses ${{{variable}}}, but the environment variable {variable} is not set")]
pub struct MissingVariable {
    /// The config key the value sits under.
    pub field: String,
    /// The variable named.
    pub variable: String,
}

/// Expands `${VAR}` references; `field` names the config key in errors.
pub fn expand_env(raw: &str, field: &str) -> Result<String, MissingVariable> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| MissingVariable { field: field.to_string(), variable: after.to_string() })?;
        let name = &after[..end];
        let value = std::env::var(name).ok().filter(|v| !v.is_empty()).ok_or_else(|| MissingVariable { field: field.to_string(), variable: name.to_string() })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
