//! `web_search`: one query to the configured provider, the answer as a
//! compact list (title, URL, snippet).
//!
//! Providers and where their key goes; the component only ever writes the
//! placeholder, the host fills in the value for that provider's host alone:
//! - Brave: `GET https://api.search.brave.com/res/v1/web/search`, header
//!   `X-Subscription-Token: {{secret:brave_api_key}}`;
//! - Tavily: `POST https://api.tavily.com/search`, header
//!   `Authorization: Bearer {{secret:tavily_api_key}}`;
//! - SearXNG: `GET <searxng_url>/search?format=json`, no key (a self-hosted
//!   instance; the user grants its host).
//!
//! Settings (`[plugins.web.settings]`, JSON in `CHITIN_PLUGIN_SETTINGS`):
//! `search_provider` (`brave` by default, `tavily`, `searxng`) and
//! `searxng_url`.

use chitin_sdk::serde_json::{self, Value, json};

use crate::http::{Client, Method, Request};
use crate::url::{Url, encode};

/// Brave's search endpoint.
pub const BRAVE_URL: &str = "https://api.search.brave.com/res/v1/web/search";
/// Tavily's search endpoint.
pub const TAVILY_URL: &str = "https://api.tavily.com/search";

/// Results returned by default, and at most.
pub const DEFAULT_COUNT: usize = 5;
/// The most results one search returns.
pub const MAX_COUNT: usize = 10;

/// Characters of one snippet at most.
const MAX_SNIPPET: usize = 500;

/// Which provider answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// Brave Search API.
    Brave,
    /// Tavily.
    Tavily,
    /// A SearXNG instance at this base URL.
    Searxng(String),
}

/// Reads the provider from the plugin's settings (JSON text, or none).
pub fn provider(settings: Option<&str>) -> Result<Provider, String> {
    let settings: Value = match settings {
        Some(text) => serde_json::from_str(text).map_err(|e| format!("the plugin settings are not JSON: {e}"))?,
        None => Value::Null,
    };
    let name = match settings.get("search_provider") {
        None | Some(Value::Null) => "brave",
        Some(Value::String(name)) => name.as_str(),
        Some(other) => return Err(format!("[plugins.web.settings] search_provider must be a string, not {other}")),
    };
    match name.to_ascii_lowercase().as_str() {
        "brave" => Ok(Provider::Brave),
        "tavily" => Ok(Provider::Tavily),
        "searxng" => {
            let base = settings.get("searxng_url").and_then(Value::as_str).ok_or(
                "search_provider is \"searxng\" but [plugins.web.settings] has no searxng_url (e.g. \"https://searx.example.org\"); grant its host in `network` too",
            )?;
            let url = Url::parse(base).map_err(|e| format!("[plugins.web.settings] searxng_url: {e}"))?;
            Ok(Provider::Searxng(format!("{}{}", url.origin(), url.path.trim_end_matches('/'))))
        }
        other => Err(format!("[plugins.web.settings] search_provider {other:?} is not one of \"brave\", \"tavily\", \"searxng\"")),
    }
}

/// One result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Page title.
    pub title: String,
    /// Page URL.
    pub url: String,
    /// What the provider says of it.
    pub snippet: String,
}

/// The request for `query` to `provider`.
pub fn request(provider: &Provider, query: &str, count: usize) -> Request {
    match provider {
        Provider::Brave => Request::get(format!("{BRAVE_URL}?q={}&count={count}", encode(query)))
            .header("accept", "application/json")
            .header("x-subscription-token", "{{secret:brave_api_key}}"),
        Provider::Tavily => Request {
            method: Method::Post,
            url: TAVILY_URL.into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("authorization".into(), "Bearer {{secret:tavily_api_key}}".into()),
            ],
            body: Some(json!({"query": query, "max_results": count}).to_string()),
        },
        Provider::Searxng(base) => {
            Request::get(format!("{base}/search?q={}&format=json", encode(query))).header("accept", "application/json")
        }
    }
}

/// The results in a provider's answer.
pub fn parse(provider: &Provider, body: &[u8]) -> Result<Vec<Hit>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("the search provider's answer is not JSON: {e}"))?;
    let (list, snippet_key) = match provider {
        Provider::Brave => (value.pointer("/web/results"), "description"),
        Provider::Tavily | Provider::Searxng(_) => (value.get("results"), "content"),
    };
    let Some(list) = list else {
        // Brave answers a query with no web results without the `web` key.
        return if value.is_object() { Ok(Vec::new()) } else { Err("the search provider's answer has no results list".into()) };
    };
    let list = list.as_array().ok_or("the search provider's results are not a list")?;
    let text = |item: &Value, key: &str| item.get(key).and_then(Value::as_str).map(clean).unwrap_or_default();
    Ok(list
        .iter()
        .map(|item| Hit { title: text(item, "title"), url: text(item, "url"), snippet: clip(&text(item, snippet_key), MAX_SNIPPET) })
        .filter(|hit| !hit.url.is_empty())
        .collect())
}

/// Runs `web_search`.
pub fn search(client: &dyn Client, provider: &Provider, query: &str, count: Option<usize>) -> Result<String, SearchError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(SearchError::Invalid("query must not be empty".into()));
    }
    let count = count.unwrap_or(DEFAULT_COUNT);
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(SearchError::Invalid(format!("count must be 1 to {MAX_COUNT} (got {count})")));
    }
    let name = match provider {
        Provider::Brave => "Brave",
        Provider::Tavily => "Tavily",
        Provider::Searxng(_) => "SearXNG",
    };
    let response = client.send(&request(provider, query, count)).map_err(|e| match e {
        crate::http::HttpError::Denied | crate::http::HttpError::Host(_) => SearchError::Denied(format!("searching with {name}: {e}")),
        e => SearchError::Failed(format!("searching with {name}: {e}")),
    })?;
    if response.status >= 400 {
        let hint = match response.status {
            401 | 403 => " (the API key was refused: check the key in [plugins.web.secrets])",
            429 => " (rate limited: try again later)",
            _ => "",
        };
        return Err(SearchError::Failed(format!("{name} answered HTTP {}{hint}", response.status)));
    }
    let hits = parse(provider, &response.body).map_err(SearchError::Failed)?;
    Ok(render(query, &hits[..hits.len().min(count)]))
}

/// Why a search produced no list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchError {
    /// Bad arguments or settings.
    Invalid(String),
    /// Refused by the host (not granted, key not configured).
    Denied(String),
    /// The provider failed.
    Failed(String),
}

/// The compact list, marked as external content.
pub fn render(query: &str, hits: &[Hit]) -> String {
    let mut out = format!("{}\n\n", crate::UNTRUSTED_BANNER);
    if hits.is_empty() {
        out.push_str(&format!("No results for: {}", clean(query)));
        return out;
    }
    out.push_str(&format!("Results for: {}\n", clean(query)));
    for (i, hit) in hits.iter().enumerate() {
        out.push_str(&format!("\n{}. {}\n   {}\n", i + 1, hit.title, hit.url));
        if !hit.snippet.is_empty() {
            out.push_str(&format!("   {}\n", hit.snippet));
        }
    }
    out.trim_end().to_string()
}

/// One line: whitespace and control characters folded to single spaces,
/// simple tags (`<strong>` in Brave's snippets) dropped.
fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            c if c.is_whitespace() || c.is_control() => {
                if !out.ends_with(' ') {
                    out.push(' ');
                }
            }
            c => out.push(c),
        }
    }
    out.trim().to_string()
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_from_settings() {
        assert_eq!(provider(None).unwrap(), Provider::Brave);
        assert_eq!(provider(Some(r#"{"search_provider":"Tavily"}"#)).unwrap(), Provider::Tavily);
        assert_eq!(provider(Some(r#"{"search_provider":"searxng","searxng_url":"http://127.0.0.1:8888/"}"#)).unwrap(), Provider::Searxng("http://127.0.0.1:8888".into()));
        assert!(provider(Some(r#"{"search_provider":"searxng"}"#)).unwrap_err().contains("searxng_url"));
        assert!(provider(Some(r#"{"search_provider":"bing"}"#)).unwrap_err().contains("not one of"));
    }

    #[test]
    fn requests_carry_placeholders_never_keys() {
        let brave = request(&Provider::Brave, "rust & wasm", 3);
        assert_eq!(brave.url, "https://api.search.brave.com/res/v1/web/search?q=rust%20%26%20wasm&count=3");
        assert!(brave.headers.contains(&("x-subscription-token".into(), "{{secret:brave_api_key}}".into())));
        let tavily = request(&Provider::Tavily, "q", 2);
        assert_eq!(tavily.method, Method::Post);
        assert!(tavily.headers.iter().any(|(k, v)| k == "authorization" && v == "Bearer {{secret:tavily_api_key}}"));
        assert_eq!(serde_json::from_str::<Value>(tavily.body.as_deref().unwrap()).unwrap(), json!({"query": "q", "max_results": 2}));
        let searx = request(&Provider::Searxng("http://s.test".into()), "q", 2);
        assert_eq!(searx.url, "http://s.test/search?q=q&format=json");
    }

    #[test]
    fn answers_are_parsed_and_rendered() {
        let brave = br#"{"web":{"results":[{"title":"Rust <strong>lang</strong>","url":"https://rust-lang.org","description":"A\nlanguage"},{"title":"no url"}]}}"#;
        let hits = parse(&Provider::Brave, brave).unwrap();
        assert_eq!(hits, [Hit { title: "Rust lang".into(), url: "https://rust-lang.org".into(), snippet: "A language".into() }]);
        let tavily = br#"{"results":[{"title":"T","url":"https://t.test","content":"c"}]}"#;
        assert_eq!(parse(&Provider::Tavily, tavily).unwrap()[0].snippet, "c");
        assert_eq!(parse(&Provider::Brave, b"{}").unwrap(), []);
        assert!(parse(&Provider::Tavily, b"<html>").is_err());
        let text = render("q", &hits);
        assert!(text.starts_with(crate::UNTRUSTED_BANNER));
        assert!(text.ends_with("Results for: q\n\n1. Rust lang\n   https://rust-lang.org\n   A language"), "{text}");
        assert!(render("q", &[]).ends_with("No results for: q"));
    }
}
