//! Secrets a plugin may use but never see.
//!
//! A channel (or a search tool) needs a token, and a token inside the
//! sandbox is a token a hostile plugin can send anywhere. So the component
//! writes a placeholder, `{{secret:NAME}}`, where the value belongs, and the
//! host substitutes it on the way out:
//! - only for a secret the manifest declares ([`SecretSpec`]) and the
//!   user's config gives a value;
//! - only in the one place of a request the declaration names
//!   ([`Injection`]: inside a path segment, the value of a named header or
//!   query parameter, a named field of the body, a socket frame), never
//!   "anywhere in the URL" or free body text, where the platform might
//!   store it and show it to people;
//! - only when the request goes to the secret's audience host (and port,
//!   when the audience names one);
//! - only when the request really travels (after an `api_base` rewrite)
//!   over `https://`, or plain `http://` to a loopback address; otherwise
//!   the request is refused, naming the secret and why ([`Destination`]).
//!
//! Anywhere else the placeholder goes out as written, so a plugin that aims
//! the placeholder at its own server, or at a place of the platform it
//! should not, learns nothing. Everything coming back to a plugin that
//! holds secrets is redacted by [`Secrets::redactor`] (see
//! [`super::redact`]), whatever request it answers: a value stored at the
//! audience by one request and fetched back by another is written back as
//! its placeholder too.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::grants::HostPattern;
use super::manifest::channel::{Injection, SecretSpec};
use super::redact::Redactor;

/// Why a secret could not be set up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum SecretError {
    /// The declaration's audience is not a host or `host:port`.
    #[error("secret `{name}`: audience `{audience}` is not a host: {reason}")]
    BadAudience { name: String, audience: String, reason: String },
    /// The value is empty: nothing to inject.
    #[error("secret `{name}` has an empty value in the config")]
    Empty { name: String },
}

/// Why a request is not sent: it would carry a secret where it must not go,
/// or one that has no value. The text names the secret and the reason.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct SecretRefused(pub String);

/// One part of an outgoing request, as [`Injection`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place<'a> {
    /// The URL's path.
    Path,
    /// The value of the header with this name.
    Header(&'a str),
    /// The value of the query parameter with this (decoded) name.
    Query(&'a str),
    /// The value of the body field with this name.
    Field(&'a str),
    /// A socket frame.
    Frame,
}

impl Injection {
    /// True when the declaration lets a secret into `place`.
    pub fn admits(&self, place: Place<'_>) -> bool {
        match (self, place) {
            (Injection::Path, Place::Path) | (Injection::Frame, Place::Frame) => true,
            (Injection::Header(declared), Place::Header(name)) => declared.eq_ignore_ascii_case(name),
            (Injection::Query(declared), Place::Query(name)) | (Injection::Field(declared), Place::Field(name)) => declared == name,
            _ => false,
        }
    }
}

/// Where a request is going: the host and port the plugin addressed (whose
/// secrets it may carry), and whether the connection it really uses may
/// carry secrets at all.
#[derive(Debug, Clone)]
pub struct Destination<'a> {
    host: &'a str,
    port: u16,
    /// Why secrets may not travel on this connection; `None` when they may.
    insecure: Option<String>,
}

impl<'a> Destination<'a> {
    /// A request addressed to `host:port` that really goes to
    /// `actual_scheme://actual_host` (the same, or the `api_base` it was
    /// pointed at).
    pub fn new(host: &'a str, port: u16, actual_scheme: &str, actual_host: &str) -> Destination<'a> {
        Destination { host, port, insecure: insecure_transport(actual_scheme, actual_host) }
    }
}

/// Why a connection by `scheme` to `host` may not carry a secret: `None`
/// for `https` (and `wss`), and for plain `http` (`ws`) to a loopback
/// address (127.0.0.0/8, ::1, `localhost`), where tests and local servers
/// run and nothing crosses a network. A name that merely resolves to a
/// loopback address does not count: DNS is not trusted.
pub fn insecure_transport(scheme: &str, host: &str) -> Option<String> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match scheme.to_ascii_lowercase().as_str() {
        "https" | "wss" => None,
        "http" | "ws" if loopback => None,
        "http" | "ws" => Some(format!(
            "the request goes over plain {scheme}:// to `{host}`; secrets are sent only over https:// (plain http:// only to a loopback address: 127.0.0.0/8, ::1, localhost)"
        )),
        other => Some(format!("the request goes over `{other}`, not https://")),
    }
}

/// One secret: its declaration and the user's value.
#[derive(Clone)]
struct Secret {
    name: String,
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
    redactor: Option<Arc<Redactor>>,
}

/// Values are never printed, not even in a debug dump.
impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.secrets.iter().map(|s| &s.placeholder)).finish()
    }
}

/// The start of every placeholder: text without it needs no look.
const PLACEHOLDER_START: &str = "{{secret:";

/// What a value is percent-encoded with inside a path segment: everything
/// but the unreserved characters and the sub-delimiters a segment may hold
/// (`/`, `?` and `#` would move it out of its segment).
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

/// What a value is percent-encoded with as a query parameter's value:
/// everything but the unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

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
            secrets.push(Secret {
                name: spec.name.clone(),
                placeholder: placeholder(&spec.name),
                value: value.to_string(),
                audience: audience(spec)?,
                inject: spec.inject.clone(),
            });
        }
        let needles = secrets.iter().flat_map(|s| forms(&s.value).into_iter().map(|form| (form.into_bytes(), s.placeholder.clone()))).collect();
        let redactor = Redactor::new(needles).map(Arc::new);
        Ok(Secrets { secrets, unavailable: Vec::new(), redactor })
    }

    /// Records that the declared `spec` has no value, and why (`reason`
    /// names the config key to set); see [`Secrets::fill`].
    pub fn mark_unavailable(&mut self, spec: &SecretSpec, reason: String) -> Result<(), SecretError> {
        self.unavailable.push(Unavailable { placeholder: placeholder(&spec.name), audience: audience(spec)?, inject: spec.inject.clone(), reason });
        Ok(())
    }

    /// Why the secret `name` has no value, if it was marked unavailable.
    pub fn unavailable_reason(&self, name: &str) -> Option<&str> {
        let placeholder = placeholder(name);
        self.unavailable.iter().find(|u| u.placeholder == placeholder).map(|u| u.reason.as_str())
    }

    /// True when there is nothing to substitute, redact or refuse.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.unavailable.is_empty()
    }

    /// What redacts this plugin's responses: `Some` as soon as it holds a
    /// value, and then every response it gets must go through it.
    pub fn redactor(&self) -> Option<&Arc<Redactor>> {
        self.redactor.as_ref()
    }

    /// `text`, part `place` of a request to `dest`, with the placeholder of
    /// every secret declared for that place and audience replaced by its
    /// value (percent-encoded in a path or a query). Refused when such a
    /// placeholder belongs to a secret without a value, or the connection
    /// may not carry secrets. Placeholders of other secrets, or aimed at
    /// another host or place, stay as written.
    pub fn fill<'a>(&self, text: &'a str, place: Place<'_>, dest: &Destination<'_>) -> Result<Cow<'a, str>, SecretRefused> {
        if !text.contains(PLACEHOLDER_START) {
            return Ok(Cow::Borrowed(text));
        }
        let goes_here = |inject: &[Injection], audience: &Option<HostPattern>| {
            inject.iter().any(|i| i.admits(place)) && audience.as_ref().is_some_and(|a| a.matches(dest.host, dest.port))
        };
        if let Some(missing) = self.unavailable.iter().find(|u| goes_here(&u.inject[..], &u.audience) && text.contains(&u.placeholder)) {
            return Err(SecretRefused(missing.reason.clone()));
        }
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if !(goes_here(&secret.inject[..], &secret.audience) && out.contains(&secret.placeholder)) {
                continue;
            }
            if let Some(reason) = &dest.insecure {
                return Err(SecretRefused(format!("secret `{}` is not sent to {}: {reason}", secret.name, dest.host)));
            }
            let value = match place {
                Place::Path => utf8_percent_encode(&secret.value, PATH_SEGMENT).to_string(),
                Place::Query(_) => utf8_percent_encode(&secret.value, QUERY_VALUE).to_string(),
                Place::Header(_) | Place::Field(_) | Place::Frame => secret.value.clone(),
            };
            out = Cow::Owned(out.replace(&secret.placeholder, &value));
        }
        Ok(out)
    }

    /// `url` with secrets filled in its path (each segment) and in the
    /// values of its query parameters, as declared; the scheme, authority
    /// and fragment are never touched.
    pub fn fill_url<'a>(&self, url: &'a str, dest: &Destination<'_>) -> Result<Cow<'a, str>, SecretRefused> {
        if !url.contains(PLACEHOLDER_START) {
            return Ok(Cow::Borrowed(url));
        }
        let after_scheme = url.find("://").map_or(0, |i| i + 3);
        let path_start = url[after_scheme..].find(['/', '?', '#']).map_or(url.len(), |i| after_scheme + i);
        let (head, rest) = url.split_at(path_start);
        let (rest, fragment) = rest.split_at(rest.find('#').unwrap_or(rest.len()));
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let path = self.fill(path, Place::Path, dest)?;
        let query = query.map(|q| self.fill_query(q, dest)).transpose()?;
        if matches!(path, Cow::Borrowed(_)) && !matches!(query, Some(Cow::Owned(_))) {
            return Ok(Cow::Borrowed(url));
        }
        let query = query.map(|q| format!("?{q}")).unwrap_or_default();
        Ok(Cow::Owned(format!("{head}{path}{query}{fragment}")))
    }

    /// A raw query string with secrets filled in the values of the
    /// parameters they are declared for; every other byte as it was.
    fn fill_query<'a>(&self, query: &'a str, dest: &Destination<'_>) -> Result<Cow<'a, str>, SecretRefused> {
        if !query.contains(PLACEHOLDER_START) {
            return Ok(Cow::Borrowed(query));
        }
        let mut changed = false;
        let mut pairs = Vec::new();
        for pair in query.split('&') {
            let Some((name, value)) = pair.split_once('=') else {
                pairs.push(Cow::Borrowed(pair));
                continue;
            };
            let decoded: String = form_urlencoded::parse(format!("{name}=").as_bytes()).next().map(|(n, _)| n.into_owned()).unwrap_or_default();
            match self.fill(value, Place::Query(&decoded), dest)? {
                Cow::Borrowed(_) => pairs.push(Cow::Borrowed(pair)),
                Cow::Owned(filled) => {
                    changed = true;
                    pairs.push(Cow::Owned(format!("{name}={filled}")));
                }
            }
        }
        Ok(if changed { Cow::Owned(pairs.join("&")) } else { Cow::Borrowed(query) })
    }

    /// A request body with secrets filled in the fields they are declared
    /// for: the top-level string members of a JSON object
    /// (`application/json`, `…+json`) or the pairs of an
    /// `application/x-www-form-urlencoded` body. Any other body, and free
    /// text anywhere, goes as written.
    pub fn fill_body<'a>(&self, body: &'a [u8], content_type: Option<&str>, dest: &Destination<'_>) -> Result<Cow<'a, [u8]>, SecretRefused> {
        let mime = content_type.unwrap_or_default().split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        // A form body holds the placeholder percent-encoded: it is parsed
        // whatever its bytes; anything else needs the placeholder as is.
        if mime != "application/x-www-form-urlencoded" && !contains(body, PLACEHOLDER_START.as_bytes()) {
            return Ok(Cow::Borrowed(body));
        }
        if mime == "application/json" || mime.ends_with("+json") {
            let Ok(serde_json::Value::Object(mut object)) = serde_json::from_slice::<serde_json::Value>(body) else {
                return Ok(Cow::Borrowed(body));
            };
            let mut changed = false;
            for (name, value) in object.iter_mut() {
                let serde_json::Value::String(text) = value else { continue };
                let filled = match self.fill(text, Place::Field(name), dest)? {
                    Cow::Owned(filled) => filled,
                    Cow::Borrowed(_) => continue,
                };
                *text = filled;
                changed = true;
            }
            return Ok(if changed { Cow::Owned(serde_json::to_vec(&object).unwrap_or_else(|_| body.to_vec())) } else { Cow::Borrowed(body) });
        }
        if mime == "application/x-www-form-urlencoded" {
            let mut changed = false;
            let mut form = form_urlencoded::Serializer::new(String::new());
            for (name, value) in form_urlencoded::parse(body) {
                let filled = self.fill(&value, Place::Field(&name), dest)?;
                changed |= matches!(filled, Cow::Owned(_));
                form.append_pair(&name, &filled);
            }
            return Ok(if changed { Cow::Owned(form.finish().into_bytes()) } else { Cow::Borrowed(body) });
        }
        Ok(Cow::Borrowed(body))
    }

    /// `text` with every secret value written back as its placeholder.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.redactor {
            Some(redactor) => redactor.redact(text),
            None => Cow::Borrowed(text),
        }
    }

    /// [`Secrets::redact`] for bytes.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        match &self.redactor {
            Some(redactor) => redactor.redact_bytes(bytes),
            None => Cow::Borrowed(bytes),
        }
    }
}

fn audience(spec: &SecretSpec) -> Result<Option<HostPattern>, SecretError> {
    spec.audience
        .as_deref()
        .map(|a| HostPattern::parse(a).map_err(|reason| SecretError::BadAudience { name: spec.name.clone(), audience: a.to_string(), reason }))
        .transpose()
}

/// Every form a value can come back in: as is, percent-encoded as
/// [`Secrets::fill`] writes it into a path or a query, form-encoded, and
/// escaped inside a JSON string.
fn forms(value: &str) -> Vec<String> {
    let json = serde_json::to_string(value).unwrap_or_default();
    vec![
        value.to_string(),
        utf8_percent_encode(value, PATH_SEGMENT).to_string(),
        utf8_percent_encode(value, QUERY_VALUE).to_string(),
        form_urlencoded::byte_serialize(value.as_bytes()).collect(),
        json.get(1..json.len().saturating_sub(1)).unwrap_or_default().to_string(),
    ]
}

/// `{{secret:NAME}}`.
pub fn placeholder(name: &str) -> String {
    format!("{{{{secret:{name}}}}}")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "123456:ABC-real-token";

    fn telegram() -> Secrets {
        let specs = [
            SecretSpec { name: "bot_token".into(), audience: Some("api.telegram.org".into()), inject: vec![Injection::Path] },
            SecretSpec { name: "hook".into(), audience: Some("api.telegram.org".into()), inject: vec![Injection::Field("secret_token".into())] },
        ];
        Secrets::new(&specs, |name| match name {
            "bot_token" => Some(TOKEN),
            _ => Some("h00k"),
        })
        .unwrap()
    }

    fn to(host: &str) -> Destination<'_> {
        Destination::new(host, 443, "https", host)
    }

    #[test]
    fn substituted_only_for_the_audience_and_the_declared_place() {
        let secrets = telegram();
        let url = "https://api.telegram.org/bot{{secret:bot_token}}/getUpdates?offset=1";
        assert_eq!(secrets.fill_url(url, &to("api.telegram.org")).unwrap(), format!("https://api.telegram.org/bot{TOKEN}/getUpdates?offset=1"));
        // Aimed at the plugin's own server: sent as written.
        let exfil = "https://evil.example/bot{{secret:bot_token}}";
        assert_eq!(secrets.fill_url(exfil, &to("evil.example")).unwrap(), exfil);
        // In a query parameter, where the platform would store and show it:
        // as written. Also in the authority and the fragment.
        for url in [
            "https://api.telegram.org/bot1/sendMessage?text={{secret:bot_token}}",
            "https://{{secret:bot_token}}@api.telegram.org/x",
            "https://api.telegram.org/x#{{secret:bot_token}}",
        ] {
            assert_eq!(secrets.fill_url(url, &to("api.telegram.org")).unwrap(), url);
        }
        // In a header, where the declaration does not allow it: as written.
        let header = secrets.fill("Bearer {{secret:bot_token}}", Place::Header("authorization"), &to("api.telegram.org")).unwrap();
        assert_eq!(header, "Bearer {{secret:bot_token}}");
        // An undeclared name stays too.
        assert_eq!(secrets.fill_url("https://api.telegram.org/{{secret:other}}", &to("api.telegram.org")).unwrap(), "https://api.telegram.org/{{secret:other}}");
    }

    #[test]
    fn a_field_is_filled_only_in_its_named_field_of_json_or_form_bodies() {
        let secrets = telegram();
        let dest = to("api.telegram.org");
        let json = br#"{"url":"https://me/x","secret_token":"{{secret:hook}}","text":"{{secret:hook}}","nested":{"secret_token":"{{secret:hook}}"}}"#;
        let filled: serde_json::Value = serde_json::from_slice(&secrets.fill_body(json, Some("application/json; charset=utf-8"), &dest).unwrap()).unwrap();
        assert_eq!(filled["secret_token"], "h00k");
        assert_eq!(filled["text"], "{{secret:hook}}", "free text is not a declared field");
        assert_eq!(filled["nested"]["secret_token"], "{{secret:hook}}", "top level only");
        let form = b"secret_token=%7B%7Bsecret%3Ahook%7D%7D&text=%7B%7Bsecret%3Ahook%7D%7D";
        let filled = secrets.fill_body(form, Some("application/x-www-form-urlencoded"), &dest).unwrap();
        assert_eq!(std::str::from_utf8(&filled).unwrap(), "secret_token=h00k&text=%7B%7Bsecret%3Ahook%7D%7D");
        // Plain text: as written.
        let text = b"secret_token={{secret:hook}}";
        assert_eq!(&*secrets.fill_body(text, Some("text/plain"), &dest).unwrap(), text);
    }

    #[test]
    fn query_and_header_places_name_one_parameter_and_one_header() {
        let spec = SecretSpec {
            name: "k".into(),
            audience: Some("api.example".into()),
            inject: vec![Injection::Query("key".into()), Injection::Header("X-Api-Key".into())],
        };
        let secrets = Secrets::new(&[spec], |_| Some("v a/l")).unwrap();
        let dest = to("api.example");
        let url = "https://api.example/p?q={{secret:k}}&key={{secret:k}}&key2={{secret:k}}";
        assert_eq!(secrets.fill_url(url, &dest).unwrap(), "https://api.example/p?q={{secret:k}}&key=v%20a%2Fl&key2={{secret:k}}");
        assert_eq!(secrets.fill("{{secret:k}}", Place::Header("x-api-key"), &dest).unwrap(), "v a/l");
        assert_eq!(secrets.fill("{{secret:k}}", Place::Header("x-other"), &dest).unwrap(), "{{secret:k}}");
        // The encoded form coming back is redacted too.
        assert_eq!(secrets.redact("got v%20a%2Fl and v a/l"), "got {{secret:k}} and {{secret:k}}");
    }

    #[test]
    fn an_audience_with_a_port_matches_that_port_only() {
        let spec = SecretSpec { name: "k".into(), audience: Some("127.0.0.1:8081".into()), inject: vec![Injection::Header("x-k".into())] };
        let secrets = Secrets::new(&[spec], |_| Some("v4lue")).unwrap();
        let at = |port| Destination::new("127.0.0.1", port, "http", "127.0.0.1");
        assert_eq!(secrets.fill("{{secret:k}}", Place::Header("x-k"), &at(8081)).unwrap(), "v4lue");
        assert_eq!(secrets.fill("{{secret:k}}", Place::Header("x-k"), &at(8082)).unwrap(), "{{secret:k}}");
    }

    #[test]
    fn secrets_travel_over_https_or_to_loopback_only() {
        assert_eq!(insecure_transport("https", "api.telegram.org"), None);
        for host in ["127.0.0.1", "127.9.9.9", "[::1]", "::1", "localhost", "LOCALHOST"] {
            assert_eq!(insecure_transport("http", host), None, "{host}");
        }
        for host in ["api.telegram.org", "10.0.0.5", "192.168.1.1", "localhost.evil.example", "0.0.0.0"] {
            let why = insecure_transport("http", host).expect(host);
            assert!(why.contains("https://") && why.contains(host.trim_start_matches('[')), "{why}");
        }
        assert!(insecure_transport("ftp", "x").is_some());
        // Refused, naming the secret, when the request would carry it.
        let secrets = telegram();
        let plain = Destination::new("api.telegram.org", 443, "http", "10.0.0.5");
        let refused = secrets.fill_url("http://10.0.0.5/bot{{secret:bot_token}}/getMe", &plain).unwrap_err();
        assert!(refused.0.contains("`bot_token`") && refused.0.contains("10.0.0.5") && refused.0.contains("https://"), "{refused}");
        // A request that carries no secret goes.
        assert!(secrets.fill_url("http://10.0.0.5/bot1/getMe", &plain).is_ok());
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
        let spec = SecretSpec { name: "brave_api_key".into(), audience: Some("api.search.brave.com".into()), inject: vec![Injection::Header("x-subscription-token".into())] };
        let mut secrets = Secrets::new(std::slice::from_ref(&spec), |_| None).unwrap();
        secrets.mark_unavailable(&spec, "set it".into()).unwrap();
        let brave = to("api.search.brave.com");
        let place = Place::Header("X-Subscription-Token");
        assert_eq!(secrets.fill("{{secret:brave_api_key}}", place, &brave).unwrap_err(), SecretRefused("set it".into()));
        // Elsewhere, or in a place it is not injected, it goes as written.
        assert!(secrets.fill("{{secret:brave_api_key}}", place, &to("evil.example")).is_ok());
        assert!(secrets.fill("{{secret:brave_api_key}}", Place::Header("authorization"), &brave).is_ok());
        assert!(secrets.fill("no placeholder", place, &brave).is_ok());
        assert!(secrets.redactor().is_none(), "no value, nothing to redact");
    }

    #[test]
    fn bad_declarations_and_values_are_refused() {
        let spec = SecretSpec { name: "k".into(), audience: Some("https://x/".into()), inject: vec![Injection::Path] };
        assert!(matches!(Secrets::new(std::slice::from_ref(&spec), |_| Some("v")), Err(SecretError::BadAudience { .. })));
        let spec = SecretSpec { name: "k".into(), audience: Some("x".into()), inject: vec![Injection::Path] };
        assert_eq!(Secrets::new(std::slice::from_ref(&spec), |_| Some("")).unwrap_err(), SecretError::Empty { name: "k".into() });
        assert!(Secrets::new(&[spec], |_| None).unwrap().is_empty());
    }
}
