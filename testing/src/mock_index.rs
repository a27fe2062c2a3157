//! A static plugin index served from a directory on 127.0.0.1:0, with fault
//! switches per path: serve other bytes (an older index), flip a byte (a
//! tampered artifact), 404, or answer slowly. The marketplace tests build
//! the directory with the real `chitin plugin keygen/sign/index` commands.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

/// What the server does wrong for one path.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Serve these bytes instead of the file (an older, validly signed index).
    Replace(Vec<u8>),
    /// Serve the file with one byte flipped in the middle.
    FlipByte,
    /// Answer 404.
    NotFound,
    /// Wait this long before answering.
    Slow(Duration),
}

/// The running server.
pub struct MockIndex {
    server: super::server::MockServer,
    faults: Arc<Mutex<HashMap<String, Fault>>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl MockIndex {
    /// Serves the files of `dir` (`/index.json` is `dir/index.json`).
    pub fn start(dir: impl Into<PathBuf>) -> MockIndex {
        let dir = Arc::new(dir.into());
        let faults: Arc<Mutex<HashMap<String, Fault>>> = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let (f, r) = (faults.clone(), requests.clone());
        let server = super::server::MockServer::start("MockIndex", move |request| respond(dir.clone(), f.clone(), r.clone(), request));
        MockIndex { server, faults, requests }
    }

    /// `http://127.0.0.1:PORT/path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.server.addr(), path.trim_start_matches('/'))
    }

    /// Sets the fault for `path` (`index.json`, `artifacts/x.wasm`).
    pub fn fault(&self, path: &str, fault: Fault) {
        self.faults.lock().expect("faults").insert(path.trim_start_matches('/').to_string(), fault);
    }

    /// Serves every path faithfully again.
    pub fn clear(&self) {
        self.faults.lock().expect("faults").clear();
    }

    /// The paths requested so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("requests").clone()
    }
}

async fn respond(dir: Arc<PathBuf>, faults: Arc<Mutex<HashMap<String, Fault>>>, requests: Arc<Mutex<Vec<String>>>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().trim_start_matches('/').to_string();
    requests.lock().expect("requests").push(path.clone());
    let fault = faults.lock().expect("faults").get(&path).cloned();
    let status = |code: StatusCode| {
        let mut response = Response::new(Full::new(Bytes::from_static(b"")));
        *response.status_mut() = code;
        Ok(response)
    };
    if path.split('/').any(|part| part == ".." || part.is_empty()) {
        return status(StatusCode::NOT_FOUND);
    }
    let body = match fault {
        Some(Fault::Replace(bytes)) => bytes,
        Some(Fault::NotFound) => return status(StatusCode::NOT_FOUND),
        other => {
            if let Some(Fault::Slow(delay)) = other {
                tokio::time::sleep(delay).await;
            }
            let Ok(mut bytes) = std::fs::read(dir.join(&path)) else { return status(StatusCode::NOT_FOUND) };
            if matches!(other, Some(Fault::FlipByte)) && !bytes.is_empty() {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x01;
            }
            bytes
        }
    };
    Ok(Response::new(Full::new(Bytes::from(body))))
}
