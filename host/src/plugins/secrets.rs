//! Secrets a plugin may use but never see.
//!
//! A channel (or a search tool) needs a token, and a token inside the
//! sandbox is a token a hostile plugin can send anywhere. So the component
//! writes a placeholder, `{{secret:NAME}}`, where the value belongs, and the
//! host substitutes it on the way out:
//! - only for a secret the manifest declares ([`SecretSpec`]) and the
//!   user's config gives a value;
//! - only in the parts of a request the declaration allows (URL, header,
//!   body, socket frame: [`Injection`]);
//! - only when the request goes to the secret's audience host (and port,
//!   when the audience names one).
//!
//! Anywhere else the placeholder goes out as written, so a plugin that aims
//! the placeholder at its own server learns nothing. Everything coming back
//! (response bodies and headers, frames, error texts, logs) is passed through
//! [`Secrets::redact`], which writes every value back as its placeholder, so
//! a server that echoes the token cannot hand it to the plugin either.

use std::borrow::Cow;
use std::fmt;

use super::grants::HostPattern;
use super::manifest::channel::{Injection, SecretSpec};

/// Why a secret could not be set up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The declaration's audience is not a host or `host:port`.
    #[error("secret `{name}`: audience `{audience}` is not a host: {reason}")]
    BadAudience { name: String, audience: String, reason: String },
    /// The value is empty: nothing to inject.
    #[error("secret `{name}` has an empty value in the config")]
    Empty { name: String },
}

/// One secret: its declaration and the user's value.
#[derive(Clone)]
struct Secret {
    placeholder: String,
    value: String,
    audience: Option<HostPattern>,
    inject: Vec<Injection>,
}

/// A declared secret the user gave no usable value: a request that would
/// carry it to its audience is refused with `reason` rather than sent with
/// the bare placeholder where a key belongs.
#[derive(Clone)]
struct Unavailable {
    placeholder: String,
    audience: Option<HostPattern>,
    inject: Vec<Injection>,
    reason: String,
}

/// The secrets of one plugin, ready to substitute and redact.
#[derive(Clone, Default)]
pub struct Secrets {
    secrets: Vec<Secret>,
    unavailable: Vec<Unavailable>,
}

/// Values are never printed, not even in a debug dump.
impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.secrets.iter().map(|s| &s.placeholder)).finish()
    }
}

impl Secrets {
    /// The declared secrets that `value_of` (the user's config) gives a
    /// value; declared ones without a value are left out (their placeholders
    /// then go out as written).
    pub fn new<'a>(declared: &[SecretSpec], value_of: impl Fn(&str) -> Option<&'a str>) -> Result<Secrets, SecretError> {
        let mut secrets = Vec::new();
        for spec in declared {
            let Some(value) = value_of(&spec.name) else { continue };
            if value.is_empty() {
                return Err(SecretError::Empty { name: spec.name.clone() });
            }
            let audience = spec
                .audience
                .as_deref()
                .map(|a| {
                    HostPattern::parse(a).map_err(|reason| SecretError::BadAudience { name: spec.name.clone(), audience: a.to_string(), reason })
                })
                .transpose()?;
            secrets.push(Secret { placeholder: placeholder(&spec.name), value: value.to_string(), audience, inject: spec.inject.clone() });
        }
        // Longest values first, so a value containing another is redacted whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.value.len()));
        Ok(Secrets { secrets, unavailable: Vec::new() })
    }

    /// Records that the declared `spec` has no value, and why (`reason`
    /// names the config key to set); see [`Secrets::unavailable_in`].
    pub fn mark_unavailable(&mut self, spec: &SecretSpec, reason: String) -> Result<(), SecretError> {
        let audience = spec
            .audience
            .as_deref()
            .map(|a| HostPattern::parse(a).map_err(|reason| SecretError::BadAudience { name: spec.name.clone(), audience: a.to_string(), reason }))
            .transpose()?;
        self.unavailable.push(Unavailable { placeholder: placeholder(&spec.name), audience, inject: spec.inject.clone(), reason });
        Ok(())
    }

    /// Why the secret `name` has no value, if it was marked unavailable.
    pub fn unavailable_reason(&self, name: &str) -> Option<&str> {
        let placeholder = placeholder(name);
        self.unavailable.iter().find(|u| u.placeholder == placeholder).map(|u| u.reason.as_str())
    }

    /// Why `text` (a part `place` of a request to `host:port`) cannot be
    /// sent: it carries the placeholder of a secret that has no value, where
    /// that secret would be filled in. `None` when nothing is missing.
    pub fn unavailable_in(&self, text: &str, place: Injection, host: &str, port: u16) -> Option<&str> {
        self.unavailable
            .iter()
            .find(|u| u.inject.contains(&place) && u.audience.as_ref().is_some_and(|a| a.matches(host, port)) && text.contains(&u.placeholder))
            .map(|u| u.reason.as_str())
    }

    /// True when there is nothing to substitute, redact or refuse.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.unavailable.is_empty()
    }

    /// `text` (a part `place` of a request to `host:port`) with the
    /// placeholders of every secret allowed there replaced by its value.
    pub fn substitute<'a>(&self, text: &'a str, place: Injection, host: &str, port: u16) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            let allowed = secret.inject.contains(&place) && secret.audience.as_ref().is_some_and(|a| a.matches(host, port));
            if allowed && out.contains(&secret.placeholder) {
                out = Cow::Owned(out.replace(&secret.placeholder, &secret.value));
            }
        }
        out
    }

    /// [`Secrets::substitute`] for bytes (a body or a frame that is not
    /// UTF-8 is substituted where it is).
    pub fn substitute_bytes<'a>(&self, bytes: &'a [u8], place: Injection, host: &str, port: u16) -> Cow<'a, [u8]> {
        let mut out = Cow::Borrowed(bytes);
        for secret in &self.secrets {
            let allowed = secret.inject.contains(&place) && secret.audience.as_ref().is_some_and(|a| a.matches(host, port));
            if allowed && contains(&out, secret.placeholder.as_bytes()) {
                out = Cow::Owned(replace(&out, secret.placeholder.as_bytes(), secret.value.as_bytes()));
            }
        }
        out
    }

    /// `text` with every secret value written back as its placeholder.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(&secret.value) {
                out = Cow::Owned(out.replace(&secret.value, &secret.placeholder));
            }
        }
        out
    }

    /// [`Secrets::redact`] for bytes.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out = Cow::Borrowed(bytes);
        for secret in &self.secrets {
            if contains(&out, secret.value.as_bytes()) {
                out = Cow::Owned(replace(&out, secret.value.as_bytes(), secret.placeholder.as_bytes()));
            }
        }
        out
    }
}

/// `{{secret:NAME}}`.
pub fn placeholder(name: &str) -> String {
    format!("{{{{secret:{name}}}}}")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "123456:ABC-real-token";

    fn telegram() -> Secrets {
        let spec = SecretSpec { name: "bot_token".into(), audience: Some("api.telegram.org".into()), inject: vec![Injection::Url] };
        Secrets::new(&[spec], |name| (name == "bot_token").then_some(TOKEN)).unwrap()
    }

    #[test]
    fn substituted_only_for_the_audience_and_the_declared_place() {
        let secrets = telegram();
        let url = "https://api.telegram.org/bot{{secret:bot_token}}/getUpdates";
        assert_eq!(secrets.substitute(url, Injection::Url, "api.telegram.org", 443), format!("https://api.telegram.org/bot{TOKEN}/getUpdates"));
        // Aimed at the plugin's own server: sent as written.
        let exfil = "https://evil.example/?t={{secret:bot_token}}";
        assert_eq!(secrets.substitute(exfil, Injection::Url, "evil.example", 443), exfil);
        // In a header, where the declaration does not allow it: as written.
        assert_eq!(secrets.substitute("Bearer {{secret:bot_token}}", Injection::Header, "api.telegram.org", 443), "Bearer {{secret:bot_token}}");
        // An undeclared name stays too.
        assert_eq!(secrets.substitute("{{secret:other}}", Injection::Url, "api.telegram.org", 443), "{{secret:other}}");
        let body = b"token={{secret:bot_token}}";
        assert_eq!(&*secrets.substitute_bytes(body, Injection::Body, "api.telegram.org", 443), body);
    }

    #[test]
    fn an_audience_with_a_port_matches_that_port_only() {
        let spec = SecretSpec { name: "k".into(), audience: Some("127.0.0.1:8081".into()), inject: vec![Injection::Header] };
        let secrets = Secrets::new(&[spec], |_| Some("v4lue")).unwrap();
        assert_eq!(secrets.substitute("{{secret:k}}", Injection::Header, "127.0.0.1", 8081), "v4lue");
        assert_eq!(secrets.substitute("{{secret:k}}", Injection::Header, "127.0.0.1", 8082), "{{secret:k}}");
    }

    #[test]
    fn values_coming_back_are_redacted_everywhere() {
        let secrets = telegram();
        let echoed = format!("{{\"description\":\"bad url https://api.telegram.org/bot{TOKEN}/x\",\"t\":\"{TOKEN}\"}}");
        let redacted = secrets.redact(&echoed);
        assert!(!redacted.contains(TOKEN), "{redacted}");
        assert_eq!(redacted.matches("{{secret:bot_token}}").count(), 2);
        assert!(!contains(&secrets.redact_bytes(echoed.as_bytes()), TOKEN.as_bytes()));
        assert!(!format!("{secrets:?}").contains(TOKEN));
        assert!(matches!(secrets.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn an_unavailable_secret_is_named_where_it_would_go() {
        let spec = SecretSpec { name: "brave_api_key".into(), audience: Some("api.search.brave.com".into()), inject: vec![Injection::Header] };
        let mut secrets = Secrets::new(std::slice::from_ref(&spec), |_| None).unwrap();
        secrets.mark_unavailable(&spec, "set it".into()).unwrap();
        assert_eq!(secrets.unavailable_in("{{secret:brave_api_key}}", Injection::Header, "api.search.brave.com", 443), Some("set it"));
        // Elsewhere, or in a place it is not injected, it goes as written.
        assert_eq!(secrets.unavailable_in("{{secret:brave_api_key}}", Injection::Header, "evil.example", 443), None);
        assert_eq!(secrets.unavailable_in("{{secret:brave_api_key}}", Injection::Url, "api.search.brave.com", 443), None);
        assert_eq!(secrets.unavailable_in("no placeholder", Injection::Header, "api.search.brave.com", 443), None);
    }

    #[test]
    fn bad_declarations_and_values_are_refused() {
        let spec = SecretSpec { name: "k".into(), audience: Some("https://x/".into()), inject: vec![Injection::Url] };
        assert!(matches!(Secrets::new(std::slice::from_ref(&spec), |_| Some("v")), Err(SecretError::BadAudience { .. })));
        let spec = SecretSpec { name: "k".into(), audience: Some("x".into()), inject: vec![Injection::Url] };
        assert_eq!(Secrets::new(std::slice::from_ref(&spec), |_| Some("")).unwrap_err(), SecretError::Empty { name: "k".into() });
        assert!(Secrets::new(&[spec], |_| None).unwrap().is_empty());
    }
}
