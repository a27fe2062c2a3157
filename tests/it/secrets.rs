//! Secrets against a hostile tool and hostile servers (issue 18, "secrets
//! come back to the plugin" and "a request that carries a secret stalls").
//!
//! The hostile guest declares `token` for audience 127.0.0.1 in the path,
//! the `x-api-key` header and the `key` query parameter; these tests give it
//! a value and aim its `http_request` tool (any method, URL, headers, body;
//! everything that came back returned as hex) at a server of their own on
//! 127.0.0.1 that reflects, stores, compresses, splits or withholds. Each
//! test first shows the attack ran (the value reached the server, the
//! request was really made), then that the guest got nothing of it.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chitin::plugins::grants::SecretValues;
use chitin::plugins::{GrantConfig, Limits, PluginError};
use chitin_testing::{HOSTILE_WASM, OnePlugin};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "777:SeCrEt-hostile-token";
const PLACEHOLDER: &str = "{{secret:token}}";

/// One request as the server read it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    /// The whole request as bytes.
    raw: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// How the server answers.
enum Mode {
    /// Head and body in one write.
    Whole,
    /// Head, a pause, then the body.
    Split(Duration),
    /// Head, then nothing while the connection stays open.
    NeverTheBody,
}

/// What the server answers: (status, headers as raw bytes, body, how).
type Answer = (u16, Vec<(String, Vec<u8>)>, Vec<u8>, Mode);

/// A hostile HTTP/1.1 server on 127.0.0.1 that writes its answers by hand
/// (any header bytes, any framing) and logs every request it read.
struct Hostile {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Hostile {
    async fn start(answer: impl Fn(&Seen, &[Seen]) -> Answer + Send + Sync + 'static) -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (log, answer) = (log.clone(), answer.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else { return };
                    let (status, headers, body, send) = {
                        let mut log = log.lock().unwrap();
                        let earlier = log.clone();
                        log.push(request.clone());
                        answer(&request, &earlier)
                    };
                    // One request per connection: say so, or a client reuses it.
                    let mut head = format!("HTTP/1.1 {status} Whatever\r\ncontent-length: {}\r\nconnection: close\r\n", body.len()).into_bytes();
                    for (name, value) in headers {
                        head.extend_from_slice(name.as_bytes());
                        head.extend_from_slice(b": ");
                        head.extend_from_slice(&value);
                        head.extend_from_slice(b"\r\n");
                    }
                    head.extend_from_slice(b"\r\n");
                    match send {
                        Mode::Whole => {
                            head.extend_from_slice(&body);
                            let _ = socket.write_all(&head).await;
                        }
                        Mode::Split(pause) => {
                            let _ = socket.write_all(&head).await;
                            let _ = socket.flush().await;
                            tokio::time::sleep(pause).await;
                            let _ = socket.write_all(&body).await;
                        }
                        Mode::NeverTheBody => {
                            let _ = socket.write_all(&head).await;
                            let _ = socket.flush().await;
                            tokio::time::sleep(Duration::from_secs(60)).await;
                        }
                    }
                    let _ = socket.flush().await;
                    // Keep the connection open a little: the client, not the
                    // server's close, must end the body.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                });
            }
        });
        Hostile { addr, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, Vec<u8>)> =
        lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().as_bytes().to_vec())).collect();
    let length: usize = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0);
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case(b"chunked"));
    let mut body = raw[head_end..].to_vec();
    if chunked {
        // Read to the terminating chunk, then de-chunk.
        while !body.windows(5).any(|w| w == b"0\r\n\r\n") {
            let n = socket.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&buf[..n]);
        }
        body = dechunk(&body);
    } else {
        while body.len() < length {
            let n = socket.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&buf[..n]);
        }
    }
    let mut all = raw[..head_end].to_vec();
    all.extend_from_slice(&body);
    Some(Seen { method, target, headers, body, raw: all })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&data[..i]).unwrap_or("0").trim(), 16).unwrap_or(0);
        if size == 0 || data.len() < i + 2 + size {
            break;
        }
        out.extend_from_slice(&data[i + 2..i + 2 + size]);
        data = &data[(i + 4 + size).min(data.len())..];
    }
    out
}

/// The hostile guest granted 127.0.0.1 with `token` set, and `api_base`
/// when given.
fn hostile(timeout_ms: u64, api_base: Option<&str>) -> OnePlugin {
    let mut grant = GrantConfig { network: vec!["127.0.0.1".into()], secrets: SecretValues([("token".to_string(), TOKEN.to_string())].into()), ..GrantConfig::default() };
    if let Some(base) = api_base {
        grant.api_base.insert("127.0.0.1".into(), base.into());
    }
    OnePlugin::new(HOSTILE_WASM, grant, Limits { timeout_ms, memory_mb: 64, ..Limits::default() })
}

/// What the guest got back: (status, headers as bytes, body).
struct Got {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Got {
    fn parse(out: &str) -> Got {
        let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let unhex = |s: &str| (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
        let headers = v["headers"].as_array().unwrap().iter().map(|h| (h[0].as_str().unwrap().to_string(), unhex(h[1].as_str().unwrap()))).collect();
        Got { status: v["status"].as_u64().unwrap() as u16, headers, body: unhex(v["body_hex"].as_str().unwrap()) }
    }

    /// Everything the guest could read, as one byte string.
    fn everything(&self) -> Vec<u8> {
        let mut all = self.body.clone();
        for (name, value) in &self.headers {
            all.extend_from_slice(name.as_bytes());
            all.extend_from_slice(value);
        }
        all
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

async fn request(host: &OnePlugin, args: Value) -> Result<Got, String> {
    match host.call("http_request", args).await {
        Ok(out) => Ok(Got::parse(&out)),
        Err(PluginError::Tool { message, .. }) => Err(message),
        Err(other) => Err(other.to_string()),
    }
}

/// Reflects the whole request (line, headers, body) in the body and in two
/// headers.
fn reflect(seen: &Seen, _: &[Seen]) -> Answer {
    let echo = seen.raw.clone();
    let line = format!("{} {}", seen.method, seen.target).into_bytes();
    (200, vec![("x-echo-target".into(), line), ("x-echo-key".into(), seen.header("x-api-key").unwrap_or_default().into_bytes())], echo, Mode::Whole)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reflected_secret_comes_back_as_its_placeholder() {
    let server = Hostile::start(reflect).await;
    let host = hostile(5_000, None);
    let got = request(
        &host,
        json!({"url": server.url(&format!("/bot{PLACEHOLDER}/x?key={PLACEHOLDER}")), "headers": [["x-api-key", PLACEHOLDER]]}),
    )
    .await
    .unwrap();
    let seen = server.seen();
    // The attack ran: the value reached the server in all three places.
    assert_eq!(seen[0].target, format!("/bot{TOKEN}/x?key={}", TOKEN.replace(':', "%3A")));
    assert_eq!(seen[0].header("x-api-key").as_deref(), Some(TOKEN));
    // Contained: the reflection came back with placeholders only.
    assert_eq!(got.status, 200);
    assert!(!contains(&got.everything(), TOKEN) && !contains(&got.everything(), "SeCrEt"), "{}", String::from_utf8_lossy(&got.everything()));
    assert!(contains(&got.body, &format!("/bot{PLACEHOLDER}/x?key={PLACEHOLDER}")), "{}", String::from_utf8_lossy(&got.body));
    let echoed_key = got.headers.iter().find(|(n, _)| n == "x-echo-key").map(|(_, v)| v.clone()).unwrap();
    assert_eq!(echoed_key, PLACEHOLDER.as_bytes());
}

/// The guest asks for gzip and the server compresses the reflection:
/// the host had asked for identity instead, and an encoded answer is
/// refused (compressed bytes cannot be redacted; the guest would inflate
/// the value out of them).
#[tokio::test(flavor = "multi_thread")]
async fn a_compressed_reflection_is_refused() {
    let server = Hostile::start(|seen, _| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&seen.raw).unwrap();
        (200, vec![("content-encoding".into(), b"gzip".to_vec())], gz.finish().unwrap(), Mode::Whole)
    })
    .await;
    let host = hostile(5_000, None);
    let refused = request(&host, json!({"url": server.url(&format!("/bot{PLACEHOLDER}/x")), "headers": [["accept-encoding", "gzip"]]})).await;
    let seen = server.seen();
    assert!(seen[0].target.contains(TOKEN), "the attack ran: {:?}", seen[0].target);
    assert_eq!(seen[0].header("accept-encoding").as_deref(), Some("identity"), "the plugin's gzip was replaced");
    let message = refused.err().expect("a gzip answer is refused");
    assert!(message.contains("Content-Encoding") && message.contains("gzip"), "{message}");
    assert!(!message.contains(TOKEN));
}

/// Request 1 carries the value (substituted) to the audience, which stores
/// it; request 2 carries no placeholder and fetches it back: redaction is
/// per plugin, not per request, so it comes back as the placeholder.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_stored_then_fetched_without_a_placeholder_is_redacted() {
    let server = Hostile::start(|seen, earlier| {
        if seen.target.starts_with("/fetch") {
            let stored = earlier.iter().find(|s| s.target.starts_with("/store")).and_then(|s| s.header("x-api-key")).unwrap_or_default();
            return (200, vec![("x-stored".into(), stored.clone().into_bytes())], format!("stored: {stored}").into_bytes(), Mode::Whole);
        }
        (204, vec![], vec![], Mode::Whole)
    })
    .await;
    let host = hostile(5_000, None);
    request(&host, json!({"method": "PUT", "url": server.url("/store"), "headers": [["x-api-key", PLACEHOLDER]]})).await.unwrap();
    let got = request(&host, json!({"url": server.url("/fetch")})).await.unwrap();
    let seen = server.seen();
    assert_eq!(seen[0].header("x-api-key").as_deref(), Some(TOKEN), "the attack ran: the server stored the value");
    assert!(!seen[1].raw.windows(PLACEHOLDER.len()).any(|w| w == PLACEHOLDER.as_bytes()), "the fetch carried no placeholder");
    assert!(!contains(&got.everything(), TOKEN), "{}", String::from_utf8_lossy(&got.everything()));
    assert_eq!(got.body, format!("stored: {PLACEHOLDER}").into_bytes());
}

/// A header value with bytes outside visible ASCII around the value: still
/// redacted (as bytes), the other bytes kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_header_with_bytes_outside_visible_ascii_is_redacted() {
    let server = Hostile::start(|seen, _| {
        let mut value = b"\xff\x80".to_vec();
        value.extend_from_slice(seen.header("x-api-key").unwrap_or_default().as_bytes());
        value.extend_from_slice(b"\xfe tail");
        (200, vec![("x-leak".into(), value)], b"ok".to_vec(), Mode::Whole)
    })
    .await;
    let host = hostile(5_000, None);
    let got = request(&host, json!({"url": server.url("/h"), "headers": [["x-api-key", PLACEHOLDER]]})).await.unwrap();
    assert_eq!(server.seen()[0].header("x-api-key").as_deref(), Some(TOKEN), "the attack ran");
    let leak = got.headers.iter().find(|(n, _)| n == "x-leak").map(|(_, v)| v.clone()).expect("the header arrives");
    let mut expected = b"\xff\x80".to_vec();
    expected.extend_from_slice(PLACEHOLDER.as_bytes());
    expected.extend_from_slice(b"\xfe tail");
    assert_eq!(leak, expected);
}

/// Placeholders outside the declared places go out as written: a query
/// parameter other than `key`, a header other than `x-api-key`, free text
/// and a JSON field in the body, the fragment.
#[tokio::test(flavor = "multi_thread")]
async fn a_placeholder_outside_its_declared_places_goes_as_written() {
    let server = Hostile::start(|_, _| (200, vec![], b"ok".to_vec(), Mode::Whole)).await;
    let host = hostile(5_000, None);
    let body = json!({"text": PLACEHOLDER, "key": PLACEHOLDER, "note": format!("free {PLACEHOLDER} text")}).to_string();
    request(
        &host,
        json!({
            "method": "POST",
            "url": server.url(&format!("/send?text={PLACEHOLDER}&keys={PLACEHOLDER}")),
            "headers": [["x-other", PLACEHOLDER], ["authorization", format!("Bearer {PLACEHOLDER}")], ["content-type", "application/json"]],
            "body": body,
        }),
    )
    .await
    .unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "the request was made");
    let raw = &seen[0].raw;
    assert!(!contains(raw, TOKEN), "the value went somewhere undeclared: {}", String::from_utf8_lossy(raw));
    assert_eq!(seen[0].target, format!("/send?text={PLACEHOLDER}&keys={PLACEHOLDER}"));
    assert_eq!(seen[0].header("x-other").as_deref(), Some(PLACEHOLDER));
    assert_eq!(seen[0].body, body.as_bytes(), "the body streamed through untouched");
}

/// The value is substituted only when the request really travels over
/// https or to loopback: pointed (`api_base`) at a non-loopback address
/// over plain http, the request is refused before any connection, naming
/// the secret and the reason; pointed at the loopback server, it goes.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_is_never_sent_over_plain_http_to_a_non_loopback_host() {
    let server = Hostile::start(reflect).await;
    let host = hostile(5_000, Some(&server.url("")));
    let url = format!("https://127.0.0.1/bot{PLACEHOLDER}/getMe");
    request(&host, json!({"url": url})).await.unwrap();
    assert!(server.seen()[0].target.contains(TOKEN), "through api_base on loopback, the value goes");
    // TEST-NET-1: never reached; the refusal comes before any connection.
    let host = hostile(5_000, Some("http://192.0.2.1:9"));
    let started = Instant::now();
    let message = request(&host, json!({"url": url})).await.err().expect("refused");
    assert!(message.contains("`token`") && message.contains("https://") && message.contains("192.0.2.1"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(2), "refused at once, not after a connect timeout");
}

/// The stall of issue 18: a server that sends the head, then the body in a
/// later write. The call returns promptly with the (redacted) body.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_sent_after_the_head_arrives_promptly_and_redacted() {
    let server = Hostile::start(|seen, _| {
        let body = format!("late body with {} inside", seen.header("x-api-key").unwrap_or_default()).into_bytes();
        (200, vec![("content-type".into(), b"text/plain".to_vec())], body, Mode::Split(Duration::from_millis(300)))
    })
    .await;
    let host = hostile(20_000, None);
    let started = Instant::now();
    let got = request(&host, json!({"url": server.url("/split"), "headers": [["x-api-key", PLACEHOLDER]]})).await.unwrap();
    let took = started.elapsed();
    assert_eq!(server.seen()[0].header("x-api-key").as_deref(), Some(TOKEN), "the attack ran");
    assert_eq!(got.body, format!("late body with {PLACEHOLDER} inside").into_bytes());
    assert!(took < Duration::from_secs(3), "took {took:?}: the body waited for the call's limit");
}

/// A server that sends the head and never the body: the call ends at its
/// time limit, and the host is not held (the next call answers at once).
#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_never_comes_ends_at_the_time_limit() {
    let server = Hostile::start(|_, _| (200, vec![], vec![b'x'; 100], Mode::NeverTheBody)).await;
    let host = hostile(2_000, None);
    let started = Instant::now();
    let result = request(&host, json!({"url": server.url("/never"), "headers": [["x-api-key", PLACEHOLDER]]})).await;
    let took = started.elapsed();
    assert_eq!(server.seen().len(), 1, "the request was made");
    assert!(result.is_err(), "no body, no answer");
    assert!(took >= Duration::from_millis(1_900) && took < Duration::from_secs(6), "ended at the limit: {took:?}");
    let started = Instant::now();
    assert_eq!(host.call("echo", json!({"text": "still here"})).await.unwrap(), "still here");
    assert!(started.elapsed() < Duration::from_secs(1));
}

mod channel_transport {
    //! The same line for the requests the host runs for a channel (polls,
    //! `http` actions, downloads): placeholders filled only in the declared
    //! places, every response redacted, identity asked for and encodings
    //! refused, plain http only to loopback.

    use super::*;
    use chitin::channels::transport::{Transport, TransportError};
    use chitin::plugins::channel::{HttpMethod, HttpRequest};
    use chitin::plugins::grants::HostPattern;
    use chitin::plugins::manifest::channel::{Injection, SecretSpec};
    use chitin::plugins::secrets::Secrets;

    const HOOK: &str = "hook-S3CRET-value";

    fn transport(api_base: Option<&str>) -> Transport {
        let specs = [
            SecretSpec { name: "token".into(), audience: Some("127.0.0.1".into()), inject: vec![Injection::Path] },
            SecretSpec { name: "hook".into(), audience: Some("127.0.0.1".into()), inject: vec![Injection::Field("secret_token".into())] },
        ];
        let secrets = Secrets::new(&specs, |name| Some(if name == "token" { TOKEN } else { HOOK })).unwrap();
        Transport::new("hostile-channel", vec![HostPattern::parse("127.0.0.1").unwrap()], secrets, Some("127.0.0.1"), api_base, 8)
    }

    fn request(method: HttpMethod, url: String, headers: &[(&str, &str)], body: &[u8]) -> HttpRequest {
        HttpRequest {
            method,
            url,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: body.to_vec(),
            timeout_ms: 5_000,
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_channels_requests_fill_declared_places_only_and_come_back_redacted() {
        let server = Hostile::start(|seen, earlier| {
            if seen.target == "/fetch" {
                // Stored by the first request: its body, value and all.
                let stored = earlier.first().map(|s| s.body.clone()).unwrap_or_default();
                let mut leak = b"\xff".to_vec();
                leak.extend_from_slice(TOKEN.as_bytes());
                return (200, vec![("x-leak".into(), leak)], stored, Mode::Split(Duration::from_millis(100)));
            }
            (200, vec![], seen.raw.clone(), Mode::Whole)
        })
        .await;
        let t = transport(None);
        let body = json!({"secret_token": "{{secret:hook}}", "text": "{{secret:hook}} and {{secret:token}}"}).to_string();
        let url = server.url(&format!("/bot{PLACEHOLDER}/setWebhook?text={PLACEHOLDER}"));
        let got = t
            .run(&request(HttpMethod::Post, url, &[("content-type", "application/json"), ("x-note", PLACEHOLDER), ("accept-encoding", "gzip, br")], body.as_bytes()))
            .await
            .unwrap();
        let seen = server.seen();
        // The attack ran, and only the declared places were filled.
        assert_eq!(seen[0].target, format!("/bot{TOKEN}/setWebhook?text={PLACEHOLDER}"));
        let sent: Value = serde_json::from_slice(&seen[0].body).unwrap();
        assert_eq!(sent["secret_token"], HOOK);
        assert_eq!(sent["text"], "{{secret:hook}} and {{secret:token}}", "free text goes as written");
        assert_eq!(seen[0].header("x-note").as_deref(), Some(PLACEHOLDER));
        assert_eq!(seen[0].header("accept-encoding").as_deref(), Some("identity"));
        // The reflection comes back redacted.
        assert!(!contains(&got.body, TOKEN) && !contains(&got.body, HOOK), "{}", String::from_utf8_lossy(&got.body));
        // Stored, then fetched with no placeholder, split head and body,
        // a header with a byte outside visible ASCII: all redacted.
        let fetched = t.run(&request(HttpMethod::Get, server.url("/fetch"), &[], b"")).await.unwrap();
        assert!(contains(&server.seen()[0].body, HOOK), "the value was stored");
        assert!(!contains(&fetched.body, HOOK) && contains(&fetched.body, "{{secret:hook}}"), "{}", String::from_utf8_lossy(&fetched.body));
        let leak = fetched.headers.iter().find(|(n, _)| n == "x-leak").map(|(_, v)| v.clone()).unwrap();
        assert!(!leak.contains(TOKEN) && leak.contains(PLACEHOLDER), "{leak}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_channels_compressed_answer_is_refused_and_plain_http_elsewhere_never_sent() {
        let server = Hostile::start(|seen, _| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(&seen.raw).unwrap();
            (200, vec![("content-encoding".into(), b"gzip".to_vec())], gz.finish().unwrap(), Mode::Whole)
        })
        .await;
        let t = transport(None);
        let refused = t.run(&request(HttpMethod::Get, server.url(&format!("/bot{PLACEHOLDER}/getMe")), &[("accept-encoding", "gzip")], b"")).await.unwrap_err();
        assert!(server.seen()[0].target.contains(TOKEN), "the attack ran");
        assert_eq!(server.seen()[0].header("accept-encoding").as_deref(), Some("identity"));
        assert!(matches!(&refused, TransportError::Failed { message, .. } if message.contains("Content-Encoding `gzip`")), "{refused}");
        assert!(!refused.to_string().contains(TOKEN));
        // The platform pointed at a non-loopback base over plain http.
        let t = transport(Some("http://192.0.2.1:9"));
        let started = Instant::now();
        let refused = t.run(&request(HttpMethod::Get, format!("https://127.0.0.1/bot{PLACEHOLDER}/getMe"), &[], b"")).await.unwrap_err();
        assert!(matches!(&refused, TransportError::Refused { message, .. } if message.contains("`token`") && message.contains("https://")), "{refused}");
        assert!(started.elapsed() < Duration::from_secs(2), "refused before any connection");
    }
}
