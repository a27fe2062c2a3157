//! Webhook ingress for channels in `mode = "webhook"`: the routes on the
//! gateway's listener, and the verification the host does **before the
//! component sees a byte**.
//!
//! A channel `<name>` whose manifest declares `channel.webhook.route =
//! "/r"` is served at `/webhooks/<name>/r` (and below it: the rest of the
//! path is the `path` of the `webhook-request`). The gateway's handler
//! ([`Routes::handle`]):
//! 1. caps the body at [`MAX_WEBHOOK_BODY`] (413 past it, read no further);
//! 2. runs the manifest's [`Verify`] recipe with the secret from the config
//!    ([`Verifier`]); a wrong or missing signature, or a signed timestamp
//!    outside the recipe's window (300 s unless the manifest says
//!    otherwise), is 401 with an empty body, logged with the channel and
//!    the reason only (never the secret nor the presented value), and
//!    nothing reaches the component, the bus or the model;
//! 2b. for signed recipes, refuses a replay inside the window: a signature
//!    already answered 2xx is answered 200 again without reaching the
//!    component ([`Replays`]); one still being answered gets 503. Together
//!    with the window this makes every signed request count once. A
//!    `header-secret` request has no signature to remember (its replayer
//!    holds the secret itself); the channel's dedup of event ids (e.g.
//!    Telegram's `update_id`) is its replay defence;
//! 3. hands the verified request to the channel's task ([`WebhookCall`]),
//!    which runs `on-webhook` under the same rules as a poll step (one
//!    transport callback at a time, commit 1 → publish → commit 2, dedup,
//!    `allow_from`) and answers with the step's `respond` (200 empty when it
//!    has none), or 500 when the step failed (the platform retries; nothing
//!    was committed).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::{mpsc, oneshot};

use crate::plugins::channel::{HttpMethod, WebhookRequest, WebhookResponse};
use crate::plugins::manifest::channel::Verify;

/// Where webhook routes are mounted on the gateway's listener.
pub const WEBHOOK_PREFIX: &str = "/webhooks";

/// Largest webhook body the host reads (413 above); Telegram's updates and
/// Slack's events are far below it.
pub const MAX_WEBHOOK_BODY: usize = 1024 * 1024;

/// How many verified requests may wait for a busy channel before the next
/// one gets 503 (the platform retries).
pub const QUEUE: usize = 64;

/// How long a request waits for its channel's answer before 503.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Signatures remembered per route (a platform sending more than this many
/// signed requests per window has the oldest forgotten first; only the
/// platform can sign, so only it can fill the table).
pub const MAX_REMEMBERED_SIGNATURES: usize = 4096;

/// The mount path of channel `name`'s `route`.
pub fn mount_path(name: &str, route: &str) -> String {
    format!("{WEBHOOK_PREFIX}/{name}{route}")
}

/// Why a request was refused by its recipe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum VerifyError {
    /// A required header is absent.
    #[error("header `{0}` missing")]
    Missing(String),
    /// A header does not carry the expected value or signature.
    #[error("header `{0}` does not match")]
    Mismatch(String),
    /// A header cannot be parsed.
    #[error("header `{0}` is malformed")]
    Malformed(String),
    /// The signed timestamp is outside the accepted window (a replay).
    #[error("timestamp outside the {0} s window")]
    Stale(u32),
}

/// A recipe bound to its key.
#[derive(Clone)]
pub struct Verifier {
    recipe: Verify,
    /// The secret's value (header-secret, hmac); empty for ed25519.
    key: Vec<u8>,
}

/// Never prints the key.
impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").field("recipe", &self.recipe).finish_non_exhaustive()
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Result<&'a str, VerifyError> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).ok_or_else(|| VerifyError::Missing(name.to_string()))
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// `basestring` with `{timestamp}` and `{body}` filled in, as bytes (the
/// body need not be UTF-8).
fn basestring(template: &str, timestamp: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(template.len() + body.len());
    for (i, piece) in template.split("{body}").enumerate() {
        if i > 0 {
            out.extend_from_slice(body);
        }
        out.extend_from_slice(piece.replace("{timestamp}", timestamp).as_bytes());
    }
    out
}

impl Verifier {
    /// The recipe with `secret` (the configured value of the recipe's
    /// secret; ignored by ed25519, whose key is public and in the manifest).
    pub fn new(recipe: Verify, secret: Option<&str>) -> Verifier {
        Verifier { recipe, key: secret.unwrap_or_default().as_bytes().to_vec() }
    }

    /// The verified headers as the component may see them: a shared secret
    /// sent in a header is the channel's secret itself, so its value is
    /// replaced by the placeholder (the sandbox never holds a secret).
    pub fn scrub(&self, headers: &mut [(String, String)]) {
        if let Verify::HeaderSecret { header: name, secret } = &self.recipe {
            for (n, v) in headers.iter_mut() {
                if n.eq_ignore_ascii_case(name) {
                    *v = crate::plugins::secrets::placeholder(secret);
                }
            }
        }
    }

    /// Checks a request at `now` (Unix seconds).
    pub fn verify(&self, headers: &[(String, String)], body: &[u8], now: i64) -> Result<(), VerifyError> {
        match &self.recipe {
            Verify::HeaderSecret { header: name, .. } => {
                let given = header(headers, name)?;
                // BLAKE3 digests compare in constant time, so neither the
                // content nor the length of the secret leaks through timing.
                if blake3::hash(given.as_bytes()) == blake3::hash(&self.key) { Ok(()) } else { Err(VerifyError::Mismatch(name.clone())) }
            }
            Verify::HmacSha256 { header: name, timestamp_header, basestring: template, window_secs, signature_prefix, .. } => {
                let timestamp = header(headers, timestamp_header)?;
                let at: i64 = timestamp.trim().parse().map_err(|_| VerifyError::Malformed(timestamp_header.clone()))?;
                if (now - at).unsigned_abs() > u64::from(*window_secs) {
                    return Err(VerifyError::Stale(*window_secs));
                }
                let given = header(headers, name)?;
                let hex = given.strip_prefix(signature_prefix.as_str()).ok_or_else(|| VerifyError::Malformed(name.clone()))?;
                let signature = hex_decode(hex).ok_or_else(|| VerifyError::Malformed(name.clone()))?;
                let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
                mac.update(&basestring(template, timestamp, body));
                // `verify_slice` compares in constant time.
                mac.verify_slice(&signature).map_err(|_| VerifyError::Mismatch(name.clone()))
            }
            Verify::Ed25519 { header: name, timestamp_header, basestring: template, window_secs, public_key } => {
                let timestamp = header(headers, timestamp_header)?;
                let at: i64 = timestamp.trim().parse().map_err(|_| VerifyError::Malformed(timestamp_header.clone()))?;
                if (now - at).unsigned_abs() > u64::from(*window_secs) {
                    return Err(VerifyError::Stale(*window_secs));
                }
                let given = header(headers, name)?;
                let signature: [u8; 64] = hex_decode(given).and_then(|b| b.try_into().ok()).ok_or_else(|| VerifyError::Malformed(name.clone()))?;
                // Validated as 64 hex digits when the manifest was loaded.
                let key: [u8; 32] = hex_decode(public_key).and_then(|b| b.try_into().ok()).ok_or_else(|| VerifyError::Malformed("public_key".into()))?;
                let key = ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|_| VerifyError::Malformed("public_key".into()))?;
                let signature = ed25519_dalek::Signature::from_bytes(&signature);
                key.verify_strict(&basestring(template, timestamp, body), &signature).map_err(|_| VerifyError::Mismatch(name.clone()))
            }
        }
    }
}

impl Verifier {
    /// For a signed recipe, what identifies a verified request for replay
    /// checks: the digest of its signature's bytes (the signature covers
    /// the timestamp and the body; hex case does not matter), and when that
    /// signature's window closes (Unix seconds). `None` for `header-secret`.
    /// Call only after [`Verifier::verify`] accepted `headers`.
    pub fn replay_key(&self, headers: &[(String, String)]) -> Option<([u8; 32], i64)> {
        let (name, timestamp_header, window_secs, prefix) = match &self.recipe {
            Verify::HeaderSecret { .. } => return None,
            Verify::HmacSha256 { header, timestamp_header, window_secs, signature_prefix, .. } => (header, timestamp_header, window_secs, signature_prefix.as_str()),
            Verify::Ed25519 { header, timestamp_header, window_secs, .. } => (header, timestamp_header, window_secs, ""),
        };
        let at: i64 = header(headers, timestamp_header).ok()?.trim().parse().ok()?;
        let signature = hex_decode(header(headers, name).ok()?.strip_prefix(prefix)?)?;
        Some((*blake3::hash(&signature).as_bytes(), at.saturating_add(i64::from(*window_secs))))
    }
}

/// Where a signed request already seen stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Handed to the channel, not answered yet.
    Pending,
    /// Answered 2xx: a replay is answered 200 and goes no further.
    Answered,
}

/// The signatures a route accepted whose window is still open, at most
/// [`MAX_REMEMBERED_SIGNATURES`].
#[derive(Default)]
struct Replays {
    seen: Mutex<HashMap<[u8; 32], (i64, Seen)>>,
}

impl Replays {
    /// Records `key` as pending unless it is known; returns what was known.
    fn claim(&self, key: [u8; 32], closes: i64, now: i64) -> Option<Seen> {
        let mut seen = self.seen.lock().expect("webhook replays");
        if let Some((_, state)) = seen.get(&key) {
            return Some(*state);
        }
        if seen.len() >= MAX_REMEMBERED_SIGNATURES {
            seen.retain(|_, (closes, _)| *closes >= now);
            if seen.len() >= MAX_REMEMBERED_SIGNATURES
                && let Some(oldest) = seen.iter().min_by_key(|(_, (closes, _))| *closes).map(|(k, _)| *k)
            {
                seen.remove(&oldest);
            }
        }
        seen.insert(key, (closes, Seen::Pending));
        None
    }

    /// The channel answered: remembered when it took the request (2xx),
    /// forgotten otherwise, so the platform's retry of a failure passes.
    fn settle(&self, key: [u8; 32], accepted: bool) {
        let mut seen = self.seen.lock().expect("webhook replays");
        if accepted {
            if let Some(entry) = seen.get_mut(&key) {
                entry.1 = Seen::Answered;
            }
        } else {
            seen.remove(&key);
        }
    }
}

/// A verified request for a channel's task, and where its answer goes.
pub struct WebhookCall {
    /// The verified request.
    pub request: WebhookRequest,
    /// Where the channel's answer to the sender goes.
    pub reply: oneshot::Sender<WebhookResponse>,
}

struct Route {
    channel: String,
    verifier: Verifier,
    calls: mpsc::Sender<WebhookCall>,
    replays: Replays,
}

/// The webhook routes of the running channels; shared by the gateway's
/// listener and the channels.
#[derive(Default)]
pub struct Routes {
    routes: Mutex<HashMap<String, Arc<Route>>>,
}

/// What the listener answers.
#[derive(Debug)]
pub enum Answer {
    /// No channel serves the path.
    NotFound,
    /// An answer to send as is.
    Response(WebhookResponse),
}

fn status(code: u16) -> WebhookResponse {
    WebhookResponse { status: code, headers: Vec::new(), body: Vec::new() }
}

impl Routes {
    /// An empty set of routes.
    pub fn new() -> Arc<Routes> {
        Arc::new(Routes::default())
    }

    /// Serves `path` for `channel`; the returned receiver gets its verified
    /// requests. A second registration of a path replaces the first.
    pub fn register(&self, path: &str, channel: &str, verifier: Verifier) -> mpsc::Receiver<WebhookCall> {
        let (calls, rx) = mpsc::channel(QUEUE);
        let route = Arc::new(Route { channel: channel.to_string(), verifier, calls, replays: Replays::default() });
        self.routes.lock().expect("webhook routes").insert(path.to_string(), route);
        rx
    }

    /// Stops serving `path`.
    pub fn unregister(&self, path: &str) {
        self.routes.lock().expect("webhook routes").remove(path);
    }

    /// The route serving `path` and the rest of the path under it.
    fn find(&self, path: &str) -> Option<(Arc<Route>, String)> {
        let routes = self.routes.lock().expect("webhook routes");
        routes.iter().find_map(|(mount, route)| {
            let rest = path.strip_prefix(mount.as_str())?;
            if rest.is_empty() {
                Some((route.clone(), "/".to_string()))
            } else if rest.starts_with('/') {
                Some((route.clone(), rest.to_string()))
            } else {
                None
            }
        })
    }

    /// Whether any route serves `path` (a body is read only then).
    pub fn serves(&self, path: &str) -> bool {
        self.find(path).is_some()
    }

    /// Verifies and dispatches one request whose body was read within
    /// [`MAX_WEBHOOK_BODY`].
    pub async fn handle(&self, method: HttpMethod, path: &str, query: &str, headers: Vec<(String, String)>, body: Vec<u8>) -> Answer {
        let Some((route, rest)) = self.find(path) else { return Answer::NotFound };
        let now = chrono::Utc::now().timestamp();
        if let Err(reason) = route.verifier.verify(&headers, &body, now) {
            tracing::warn!(channel = %route.channel, "webhook request refused (401): {reason}");
            return Answer::Response(status(401));
        }
        let replay_key = route.verifier.replay_key(&headers);
        if let Some((key, closes)) = replay_key {
            match route.replays.claim(key, closes, now) {
                None => {}
                Some(Seen::Answered) => {
                    tracing::warn!(channel = %route.channel, "webhook request is a replay of one already answered: answered 200, not passed on");
                    return Answer::Response(status(200));
                }
                Some(Seen::Pending) => {
                    tracing::warn!(channel = %route.channel, "webhook request refused (503): a replay of one still being answered");
                    return Answer::Response(status(503));
                }
            }
        }
        let answer = self.dispatch(&route, method, rest, query, headers, body).await;
        if let Some((key, _)) = replay_key {
            route.replays.settle(key, (200..300).contains(&answer.status));
        }
        Answer::Response(answer)
    }

    /// Hands a verified request to its channel and waits for the answer.
    async fn dispatch(&self, route: &Route, method: HttpMethod, path: String, query: &str, mut headers: Vec<(String, String)>, body: Vec<u8>) -> WebhookResponse {
        route.verifier.scrub(&mut headers);
        let (reply, answer) = oneshot::channel();
        let request = WebhookRequest { method, path, query: query.to_string(), headers, body };
        if route.calls.try_send(WebhookCall { request, reply }).is_err() {
            tracing::warn!(channel = %route.channel, "webhook request refused (503): the channel is not taking requests or its queue is full");
            return status(503);
        }
        match tokio::time::timeout(ANSWER_WITHIN, answer).await {
            Ok(Ok(response)) => response,
            // The channel stopped with the request queued.
            Ok(Err(_)) => status(503),
            Err(_) => {
                tracing::warn!(channel = %route.channel, "webhook request not answered within {ANSWER_WITHIN:?} (503)");
                status(503)
            }
        }
    }
}

/// A plain answer of `code` with no body (a failed step's 500).
pub fn empty(code: u16) -> WebhookResponse {
    status(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn header_secret_must_match_exactly() {
        let v = Verifier::new(Verify::HeaderSecret { header: "X-Telegram-Bot-Api-Secret-Token".into(), secret: "s".into() }, Some("sekret-1"));
        assert_eq!(v.verify(&h(&[("x-telegram-bot-api-secret-token", "sekret-1")]), b"{}", 0), Ok(()));
        assert!(matches!(v.verify(&h(&[("X-Telegram-Bot-Api-Secret-Token", "sekret-2")]), b"{}", 0), Err(VerifyError::Mismatch(_))));
        assert!(matches!(v.verify(&h(&[("X-Telegram-Bot-Api-Secret-Token", "sekret-1x")]), b"{}", 0), Err(VerifyError::Mismatch(_))));
        assert!(matches!(v.verify(&[], b"{}", 0), Err(VerifyError::Missing(_))));
        assert!(!format!("{v:?}").contains("sekret"), "Debug never shows the key");
    }

    fn slack() -> Verifier {
        let recipe = Verify::HmacSha256 {
            header: "X-Slack-Signature".into(),
            timestamp_header: "X-Slack-Request-Timestamp".into(),
            basestring: "v0:{timestamp}:{body}".into(),
            window_secs: 300,
            secret: "signing_secret".into(),
            signature_prefix: "v0=".into(),
        };
        Verifier::new(recipe, Some("8f742231b10e8888abcd99yyyzzz85a5"))
    }

    #[test]
    fn hmac_sha256_checks_signature_and_window() {
        // Slack's documented example request.
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let ts = "1531420618";
        let good = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        let v = slack();
        let at = |sig: &str, now: i64| v.verify(&h(&[("X-Slack-Signature", sig), ("X-Slack-Request-Timestamp", ts)]), body, now);
        assert_eq!(at(good, 1_531_420_618 + 10), Ok(()));
        assert_eq!(at(good, 1_531_420_618 + 301), Err(VerifyError::Stale(300)), "a replay after the window");
        assert_eq!(at(good, 1_531_420_618 - 301), Err(VerifyError::Stale(300)));
        let flipped = format!("{}4", &good[..good.len() - 1]);
        assert!(matches!(at(&flipped, 1_531_420_618), Err(VerifyError::Mismatch(_))));
        assert!(matches!(at(&good[3..], 1_531_420_618), Err(VerifyError::Malformed(_))), "no prefix");
        assert!(matches!(at("v0=zz", 1_531_420_618), Err(VerifyError::Malformed(_))));
        assert!(matches!(v.verify(&h(&[("X-Slack-Signature", good)]), body, 0), Err(VerifyError::Missing(_))));
        let mut tampered = body.to_vec();
        tampered[0] = b'T';
        assert!(matches!(v.verify(&h(&[("X-Slack-Signature", good), ("X-Slack-Request-Timestamp", ts)]), &tampered, 1_531_420_618), Err(VerifyError::Mismatch(_))));
    }

    #[test]
    fn ed25519_checks_the_signature_of_timestamp_and_body() {
        use ed25519_dalek::{Signer, SigningKey};
        let signing = SigningKey::from_bytes(&[7u8; 32]);
        let public_key = hex(signing.verifying_key().as_bytes());
        let recipe = Verify::Ed25519 {
            header: "X-Signature-Ed25519".into(),
            timestamp_header: "X-Signature-Timestamp".into(),
            basestring: "{timestamp}{body}".into(),
            window_secs: 300,
            public_key,
        };
        let v = Verifier::new(recipe, None);
        let body = br#"{"type":1}"#;
        let signature = hex(&signing.sign(&[b"1700000000".as_slice(), body].concat()).to_bytes());
        let at = |sig: &str, ts: &str, body: &[u8], now: i64| v.verify(&h(&[("X-Signature-Ed25519", sig), ("X-Signature-Timestamp", ts)]), body, now);
        let check = |sig: &str, ts: &str, body: &[u8]| at(sig, ts, body, 1_700_000_000);
        assert_eq!(check(&signature, "1700000000", body), Ok(()));
        assert!(matches!(check(&signature, "1700000001", body), Err(VerifyError::Mismatch(_))), "another timestamp");
        assert!(matches!(check(&signature, "1700000000", br#"{"type":2}"#), Err(VerifyError::Mismatch(_))), "another body");
        assert!(matches!(check("abcd", "1700000000", body), Err(VerifyError::Malformed(_))));
        // The window: a correctly signed request two days later is a replay.
        assert_eq!(at(&signature, "1700000000", body, 1_700_000_000 + 300), Ok(()));
        assert_eq!(at(&signature, "1700000000", body, 1_700_000_000 + 2 * 86_400), Err(VerifyError::Stale(300)));
        assert_eq!(at(&signature, "1700000000", body, 1_700_000_000 - 301), Err(VerifyError::Stale(300)));
        assert!(matches!(check(&signature, "soon", body), Err(VerifyError::Malformed(_))));
        // The replay key ignores hex case and closes with the window.
        let upper = signature.to_uppercase();
        let key = |sig: &str| v.replay_key(&h(&[("X-Signature-Ed25519", sig), ("X-Signature-Timestamp", "1700000000")]));
        assert_eq!(key(&signature), key(&upper));
        assert_eq!(key(&signature).unwrap().1, 1_700_000_300);
    }

    /// The manifest side: an `ed25519` recipe gets a 300 s window when it
    /// names none, must sign the timestamp, and keeps its window in range.
    #[test]
    fn ed25519_manifests_default_the_window_and_must_sign_the_timestamp() {
        use crate::plugins::manifest::Manifest;
        let manifest = |verify: serde_json::Value| {
            let json = serde_json::json!({"manifest_version": 1, "name": "chat", "version": "1.0.0",
                "channel": {"receive": ["webhook"], "webhook": {"route": "/events", "verify": verify}}});
            Manifest::from_json(json.to_string().as_bytes())
        };
        let recipe = |extra: serde_json::Value| {
            let mut verify = serde_json::json!({"kind": "ed25519", "header": "X-Sig", "timestamp_header": "X-Ts", "basestring": "{timestamp}{body}", "public_key": "ab".repeat(32)});
            verify.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            verify
        };
        let parsed = manifest(recipe(serde_json::json!({}))).unwrap();
        let verify = parsed.channel.unwrap().webhook.unwrap().verify;
        assert!(matches!(verify, Verify::Ed25519 { window_secs: 300, .. }), "{verify:?}");
        let unsigned = manifest(recipe(serde_json::json!({"basestring": "{body}"}))).unwrap_err().to_string();
        assert!(unsigned.contains("basestring") && unsigned.contains("{timestamp}"), "{unsigned}");
        for window in [0, 3601] {
            let err = manifest(recipe(serde_json::json!({"window_secs": window}))).unwrap_err().to_string();
            assert!(err.contains("window_secs"), "{err}");
        }
    }

    #[test]
    fn replays_are_remembered_until_answered_and_forgotten_on_failure() {
        let replays = Replays::default();
        assert_eq!(replays.claim([1; 32], 100, 0), None);
        assert_eq!(replays.claim([1; 32], 100, 0), Some(Seen::Pending));
        replays.settle([1; 32], true);
        assert_eq!(replays.claim([1; 32], 100, 0), Some(Seen::Answered));
        assert_eq!(replays.claim([2; 32], 100, 0), None);
        replays.settle([2; 32], false);
        assert_eq!(replays.claim([2; 32], 100, 0), None, "a failed request's retry passes");
        // Full: expired entries go first, then the oldest.
        for i in 0..MAX_REMEMBERED_SIGNATURES + 10 {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            key[31] = 9;
            replays.claim(key, 1000 + i as i64, 500);
        }
        assert!(replays.seen.lock().unwrap().len() <= MAX_REMEMBERED_SIGNATURES);
    }

    #[tokio::test]
    async fn routes_refuse_before_dispatch_and_answer_from_the_channel() {
        let routes = Routes::new();
        let v = Verifier::new(Verify::HeaderSecret { header: "X-Secret".into(), secret: "s".into() }, Some("right"));
        let mut calls = routes.register("/webhooks/tg/telegram", "tg", v);
        let parts = |a: Answer| match a {
            Answer::NotFound => None,
            Answer::Response(r) => Some((r.status, r.body)),
        };
        assert_eq!(parts(routes.handle(HttpMethod::Post, "/webhooks/other", "", vec![], vec![]).await), None);
        assert_eq!(parts(routes.handle(HttpMethod::Post, "/webhooks/tg/telegramx", "", vec![], vec![]).await), None);
        let refused = routes.handle(HttpMethod::Post, "/webhooks/tg/telegram", "", h(&[("X-Secret", "wrong")]), b"{}".to_vec()).await;
        assert_eq!(parts(refused), Some((401, vec![])));
        assert!(calls.try_recv().is_err(), "nothing reached the channel");
        let channel = tokio::spawn(async move {
            let call = calls.recv().await.unwrap();
            assert_eq!(call.request.path, "/sub");
            assert_eq!(call.request.headers, h(&[("x-secret", "{{secret:s}}")]), "the secret header never reaches the component");
            assert_eq!(call.request.query, "a=1");
            call.reply.send(WebhookResponse { status: 200, headers: vec![], body: b"ok".to_vec() }).unwrap();
        });
        let answered = routes.handle(HttpMethod::Post, "/webhooks/tg/telegram/sub", "a=1", h(&[("x-secret", "right")]), b"{}".to_vec()).await;
        assert_eq!(parts(answered), Some((200, b"ok".to_vec())));
        channel.await.unwrap();
        // The channel is gone: 503, not a hang.
        let gone = routes.handle(HttpMethod::Post, "/webhooks/tg/telegram", "", h(&[("x-secret", "right")]), vec![]).await;
        assert_eq!(parts(gone), Some((503, vec![])));
    }
}
