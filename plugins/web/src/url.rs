//! Just enough URL handling for the tools: check an `http(s)` URL the model
//! gives, resolve a redirect's `Location` against it, and percent-encode a
//! query. Which hosts may be reached is not decided here: the host's grant
//! decides, on every request.

/// An absolute `http(s)` URL, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub scheme: String,
    /// `host` or `host:port`, as written (lower-cased).
    pub authority: String,
    /// From the first `/` (at least `/`), query included, fragment dropped.
    pub path: String,
}

impl Url {
    /// Parses `text`; the error says what is wrong, for the model.
    pub fn parse(text: &str) -> Result<Url, String> {
        let text = text.trim();
        if text.chars().any(|c| c.is_control() || c == ' ') {
            return Err(format!("`{}` contains spaces or control characters; encode them (%20)", text.escape_debug()));
        }
        let (scheme, rest) = text.split_once("://").ok_or_else(|| format!("`{text}` is not an absolute URL (it must start with http:// or https://)"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!("only http and https URLs can be fetched, not `{scheme}:`"));
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.contains('@') {
            return Err("URLs with credentials (user:password@) are refused".into());
        }
        if authority.is_empty() || authority.starts_with(':') {
            return Err(format!("`{text}` has no host"));
        }
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        Ok(Url { scheme, authority: authority.to_ascii_lowercase(), path })
    }

    /// The host, without port or IPv6 brackets.
    pub fn host(&self) -> &str {
        let a = &self.authority;
        if let Some(rest) = a.strip_prefix('[') {
            return rest.split(']').next().unwrap_or_default();
        }
        a.rsplit_once(':').filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit())).map_or(a, |(h, _)| h)
    }

    /// `scheme://authority`.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }

    /// `location` (a redirect's target) resolved against this URL.
    pub fn join(&self, location: &str) -> Result<Url, String> {
        let location = location.trim();
        if location.contains("://") {
            return Url::parse(location);
        }
        if let Some(rest) = location.strip_prefix("//") {
            return Url::parse(&format!("{}://{rest}", self.scheme));
        }
        if location.starts_with('/') {
            return Url::parse(&format!("{}{location}", self.origin()));
        }
        let base = self.path.split('?').next().unwrap_or("/");
        if location.starts_with('?') {
            return Url::parse(&format!("{}{base}{location}", self.origin()));
        }
        let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
        Url::parse(&format!("{}{dir}{location}", self.origin()))
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.path)
    }
}

/// `text` percent-encoded for a query value (RFC 3986 unreserved kept).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let u = Url::parse("HTTPS://Example.com:8443?q=1#frag").unwrap();
        assert_eq!((u.scheme.as_str(), u.authority.as_str(), u.path.as_str()), ("https", "example.com:8443", "/?q=1"));
        assert_eq!(u.host(), "example.com");
        assert_eq!(Url::parse("http://[::1]:80/x").unwrap().host(), "::1");
        assert!(Url::parse("file:///etc/passwd").unwrap_err().contains("only http and https"));
        assert!(Url::parse("example.com").unwrap_err().contains("absolute"));
        assert!(Url::parse("http://user:pw@example.com/").unwrap_err().contains("credentials"));
        assert!(Url::parse("http:///x").unwrap_err().contains("no host"));
        assert!(Url::parse("http://a.com/a b").is_err());
    }

    #[test]
    fn joins_redirect_targets() {
        let base = Url::parse("http://a.com/dir/page?x=1").unwrap();
        let join = |l: &str| base.join(l).unwrap().to_string();
        assert_eq!(join("https://b.org/y"), "https://b.org/y");
        assert_eq!(join("//c.net/z"), "http://c.net/z");
        assert_eq!(join("/root"), "http://a.com/root");
        assert_eq!(join("other"), "http://a.com/dir/other");
        assert_eq!(join("?y=2"), "http://a.com/dir/page?y=2");
    }

    #[test]
    fn encodes_queries() {
        assert_eq!(encode("rust wasm & co/é"), "rust%20wasm%20%26%20co%2F%C3%A9");
    }
}
