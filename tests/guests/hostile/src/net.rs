//! What the plugin can reach over the network: raw sockets (never granted)
//! and `wasi:http` (granted hosts only).

use std::net::{SocketAddr, TcpStream};

use serde::Deserialize;
use wasi::http::outgoing_handler;
use wasi::http::types::{
    ErrorCode as HttpError, Fields, IncomingResponse, Method, OutgoingRequest, Scheme,
};
use wasi::io::streams::StreamError;
use wasi::sockets::instance_network::instance_network;
use wasi::sockets::network::{
    ErrorCode as SocketError, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress,
    Ipv6SocketAddress,
};
use wasi::sockets::tcp_create_socket::create_tcp_socket;

use crate::ToolError;

#[derive(Deserialize)]
pub struct SocketArgs {
    addr: String,
}

/// `open_socket {addr}`. Attacks "no sockets": tries `std::net` first, then
/// raw `wasi:sockets/tcp` (in case std goes another way); either connecting
/// is a breach. The error text carries both refusals.
pub fn open_socket(args: SocketArgs) -> Result<String, ToolError> {
    let std_err = match TcpStream::connect(&args.addr) {
        Ok(_) => return Ok("connected (std::net)".to_string()),
        Err(e) => format!("std::net: {e} (kind: {:?})", e.kind()),
    };
    let wasi_err = match args.addr.parse::<SocketAddr>() {
        Ok(addr) => match wasi_connect(addr) {
            Ok(()) => return Ok("connected (wasi:sockets)".to_string()),
            Err(e) => format!("wasi:sockets: {e}"),
        },
        Err(e) => format!(
            "wasi:sockets: not tried, {:?} is not ip:port ({e})",
            args.addr
        ),
    };
    Err(ToolError::Failed(format!("{std_err}; {wasi_err}")))
}

/// Connects with `wasi:sockets/tcp` directly and drops the connection.
fn wasi_connect(addr: SocketAddr) -> Result<(), String> {
    let family = if addr.is_ipv4() {
        IpAddressFamily::Ipv4
    } else {
        IpAddressFamily::Ipv6
    };
    let network = instance_network();
    let socket = create_tcp_socket(family).map_err(|e| format!("create-tcp-socket: {e:?}"))?;
    socket
        .start_connect(&network, wasi_address(addr))
        .map_err(|e| format!("start-connect: {e:?}"))?;
    let pollable = socket.subscribe();
    loop {
        pollable.block();
        match socket.finish_connect() {
            Err(SocketError::WouldBlock) => continue,
            Err(e) => return Err(format!("finish-connect: {e:?}")),
            // The streams are children of the socket: dropped here, first.
            Ok((_input, _output)) => return Ok(()),
        }
    }
}

fn wasi_address(addr: SocketAddr) -> IpSocketAddress {
    match addr {
        SocketAddr::V4(v4) => {
            let [a, b, c, d] = v4.ip().octets();
            IpSocketAddress::Ipv4(Ipv4SocketAddress {
                port: v4.port(),
                address: (a, b, c, d),
            })
        }
        SocketAddr::V6(v6) => {
            let [a, b, c, d, e, f, g, h] = v6.ip().segments();
            IpSocketAddress::Ipv6(Ipv6SocketAddress {
                port: v6.port(),
                flow_info: v6.flowinfo(),
                address: (a, b, c, d, e, f, g, h),
                scope_id: v6.scope_id(),
            })
        }
    }
}

#[derive(Deserialize)]
pub struct HttpArgs {
    url: String,
}

/// `http_get {url}`. Attacks the network grant: only granted hosts may be
/// reached, and a redirect must not lead elsewhere, so redirects are not
/// followed: a 3xx returns `STATUS location=...`, anything else
/// `STATUS\nBODY` with the body read to its end.
pub fn http_get(args: HttpArgs) -> Result<String, ToolError> {
    let request = build_get(&args.url)?;
    let response = send(request).map_err(|e| http_error(&e))?;
    let status = response.status();
    if (300..400).contains(&status) {
        let location = header(&response, "location").unwrap_or_default();
        return Ok(format!("{status} location={location}"));
    }
    let body = read_body(&response)?;
    Ok(format!("{status}\n{}", String::from_utf8_lossy(&body)))
}

fn http_error(code: &HttpError) -> ToolError {
    ToolError::Failed(format!("http error: {code:?}"))
}

/// A GET request for `url` (`scheme://authority/path?query`), empty body.
fn build_get(url: &str) -> Result<OutgoingRequest, ToolError> {
    build_with(url, Fields::new())
}

/// A GET request for `url` with `headers` (a request's headers cannot be
/// changed once it is made).
fn build_with(url: &str, headers: Fields) -> Result<OutgoingRequest, ToolError> {
    let invalid = |what: &str| ToolError::InvalidArgs(format!("{what} in url {url:?}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };

    let request = OutgoingRequest::new(headers);
    request
        .set_method(&Method::Get)
        .map_err(|()| invalid("bad method"))?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| invalid("bad scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|()| invalid("bad authority"))?;
    request
        .set_path_with_query(Some(&path))
        .map_err(|()| invalid("bad path"))?;
    Ok(request)
}

/// Sends the request through `wasi:http/outgoing-handler` and waits for the
/// response head.
fn send(request: OutgoingRequest) -> Result<IncomingResponse, HttpError> {
    let future = outgoing_handler::handle(request, None)?;
    future.subscribe().block();
    match future.get() {
        Some(Ok(result)) => result,
        Some(Err(())) => Err(HttpError::InternalError(Some(
            "response already taken".to_string(),
        ))),
        None => Err(HttpError::InternalError(Some(
            "response not ready after block".to_string(),
        ))),
    }
}

/// The first value of header `name`, as text.
fn header(response: &IncomingResponse, name: &str) -> Option<String> {
    let values = response.headers().get(name);
    values
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Reads the whole response body. The stream is a child of the body, which
/// is a child of the response: they are dropped in that order.
fn read_body(response: &IncomingResponse) -> Result<Vec<u8>, ToolError> {
    let body = response
        .consume()
        .map_err(|()| ToolError::Failed("http error: body already taken".to_string()))?;
    let stream = body
        .stream()
        .map_err(|()| ToolError::Failed("http error: body stream already taken".to_string()))?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                let detail = wasi::http::types::http_error_code(&e)
                    .map_or_else(|| e.to_debug_string(), |code| format!("{code:?}"));
                return Err(ToolError::Failed(format!("http error: body: {detail}")));
            }
        }
    }
    Ok(bytes)
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FloodMode {
    Fields,
    Requests,
}

#[derive(Deserialize)]
pub struct HttpFloodArgs {
    mode: FloodMode,
    count: u64,
    #[serde(default)]
    size: u64,
    #[serde(default = "one")]
    values: u64,
    #[serde(default)]
    url: String,
    #[serde(default)]
    hold_ms: u64,
}

fn one() -> u64 {
    1
}

/// `http_flood {mode, count, size, values, url, hold_ms}`. Attacks host memory and
/// descriptors that `wasi:http` resources hold outside the guest's
/// `memory_mb`:
/// - `fields`: `count` header maps (many), each given `values` values of
///   `x-h`, `size` bytes each (wide), all kept alive; a map stops at the
///   first refused value. The guest holds one `size`-byte buffer only.
///   wasmtime-wasi-http caps one map at 128 KiB and *traps* past it, so the
///   attack is many maps just under the cap (`values` 1, `size` 120000).
/// - `requests`: up to `count` GETs to `url` sent without waiting for any
///   response, every pending response kept alive (one connection each);
///   then the guest sleeps `hold_ms` in the host, so the host's tasks
///   connect, and reports how many responses failed meanwhile.
///
/// If the host traps the call instead of answering, that is its defence.
pub fn http_flood(args: HttpFloodArgs) -> Result<String, ToolError> {
    match args.mode {
        FloodMode::Fields => Ok(flood_fields(args.count, args.values, args.size)),
        FloodMode::Requests => flood_requests(args.count, &args.url, args.hold_ms),
    }
}

fn flood_fields(count: u64, per_map: u64, size: u64) -> String {
    let value = vec![b'a'; usize::try_from(size).unwrap_or(usize::MAX >> 1)];
    let mut kept = Vec::new();
    let mut bytes = 0u64;
    let mut values = 0u64;
    let mut first_error: Option<String> = None;
    for _ in 0..count {
        let fields = Fields::new();
        for _ in 0..per_map {
            match fields.append("x-h", &value) {
                Ok(()) => {
                    bytes += size;
                    values += 1;
                }
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("{e:?} after {values} values"));
                    break;
                }
            }
        }
        kept.push(fields);
    }
    let stopped = first_error.unwrap_or_else(|| "done".to_string());
    format!("created {} fields, {bytes} bytes in {values} values; stopped: {stopped}", kept.len())
}

fn flood_requests(count: u64, url: &str, hold_ms: u64) -> Result<String, ToolError> {
    let mut pending = Vec::new();
    let mut first_error: Option<String> = None;
    for _ in 0..count {
        let request = build_get(url)?;
        match outgoing_handler::handle(request, None) {
            Ok(future) => pending.push(future),
            Err(e) => {
                first_error = Some(format!("{e:?}"));
                break;
            }
        }
    }
    let first = first_error.unwrap_or_else(|| "none".to_string());
    if hold_ms == 0 {
        return Ok(format!("sent {}; first error: {first}", pending.len()));
    }
    std::thread::sleep(std::time::Duration::from_millis(hold_ms));
    let mut failed = 0usize;
    let mut first_failure = None;
    for future in &pending {
        // `get` reports only a future the host has seen complete: poll first.
        if !future.subscribe().ready() {
            continue;
        }
        let outcome = match future.get() {
            Some(Ok(Ok(_))) | None => continue,
            Some(Ok(Err(code))) => format!("{code:?}"),
            Some(Err(())) => "taken".to_string(),
        };
        failed += 1;
        first_failure.get_or_insert(outcome);
    }
    let first_failure = first_failure.unwrap_or_else(|| "none".to_string());
    Ok(format!(
        "sent {}; first error: {first}; after {hold_ms} ms: {failed} failed, first: {first_failure}",
        pending.len()
    ))
}

#[derive(Deserialize)]
pub struct HttpRequestArgs {
    #[serde(default = "get")]
    method: String,
    url: String,
    /// (name, value) pairs, sent as given (`Accept-Encoding: gzip`, a
    /// placeholder in a header the secret is not declared for, ...).
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: String,
}

fn get() -> String {
    "GET".to_string()
}

/// `http_request {method, url, headers, body}`. Attacks secret redaction:
/// sends any request (placeholders anywhere, any `Accept-Encoding`) and
/// returns everything that came back, bytes as hex so nothing is lost to
/// a text conversion: `{"status", "headers": [[name, hex]], "body_hex"}`.
/// A test then looks for the secret in every form the guest could decode.
pub fn http_request(args: HttpRequestArgs) -> Result<String, ToolError> {
    let headers = Fields::new();
    for (name, value) in &args.headers {
        headers
            .append(name, value.as_bytes())
            .map_err(|e| ToolError::InvalidArgs(format!("header {name}: {e:?}")))?;
    }
    let request = build_with(&args.url, headers)?;
    let method = match args.method.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        other => Method::Other(other.to_string()),
    };
    request
        .set_method(&method)
        .map_err(|()| ToolError::InvalidArgs("bad method".into()))?;
    let body = request
        .body()
        .map_err(|()| ToolError::Failed("request body already taken".into()))?;
    {
        let stream = body
            .write()
            .map_err(|()| ToolError::Failed("request body stream already taken".into()))?;
        for chunk in args.body.as_bytes().chunks(4096) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| ToolError::Failed(format!("writing the body: {e:?}")))?;
        }
    }
    let future = outgoing_handler::handle(request, None).map_err(|e| http_error(&e))?;
    wasi::http::types::OutgoingBody::finish(body, None).map_err(|e| http_error(&e))?;
    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(http_error(&code)),
        _ => return Err(ToolError::Failed("http error: no response".into())),
    };
    let status = response.status();
    let headers: Vec<(String, String)> = response
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| (name, hex(&value)))
        .collect();
    let body = read_body(&response)?;
    Ok(serde_json::json!({"status": status, "headers": headers, "body_hex": hex(&body)}).to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
