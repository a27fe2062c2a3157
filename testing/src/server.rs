//! What every scripted mock server shares: a listener on 127.0.0.1:0, its own
//! thread and current-thread runtime (so it keeps serving while the test's
//! runtime is busy or paused), an HTTP/1 accept loop, and a shutdown on drop
//! that cancels open connections and hung replies. Each mock brings only
//! its `respond` function.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

/// How long a split response waits between its head and its body.
pub(crate) const SPLIT_PAUSE: Duration = Duration::from_millis(50);

/// `response` sent the way HTTP/2 servers and streamed bodies send it: the
/// head (with its `content-length`) in one write, the body in another after
/// [`SPLIT_PAUSE`]. hyper flushes the head while the body is pending, so the
/// client really sees them apart. A client that reads the body before it
/// drives the connection hangs here.
pub(crate) async fn split_head_and_body<B>(response: Response<B>) -> Response<http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, Infallible>>
where
    B: Body<Data = bytes::Bytes, Error = Infallible>,
{
    use http_body_util::BodyExt;
    let (mut parts, body) = response.into_parts();
    let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_else(|never| match never {});
    parts.headers.insert(hyper::header::CONTENT_LENGTH, bytes.len().into());
    let later = futures::stream::once(async move {
        tokio::time::sleep(SPLIT_PAUSE).await;
        Ok::<_, Infallible>(hyper::body::Frame::data(bytes))
    });
    Response::from_parts(parts, http_body_util::StreamBody::new(later).boxed_unsync())
}

/// A running mock server; stopped and joined when dropped.
pub struct MockServer {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockServer {
    /// Serves `respond` for every request; `name` names the thread and
    /// the panics.
    pub fn start<R, F, B>(name: &str, respond: R) -> MockServer
    where
        R: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
        F: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{name}: bind 127.0.0.1:0: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{name}: local address: {e}"));
        listener.set_nonblocking(true).unwrap_or_else(|e| panic!("{name}: non-blocking listener: {e}"));
        let (shutdown, stop) = oneshot::channel();
        let label = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("{}-{}", name.to_lowercase(), addr.port()))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        tracing::error!("{label}: no runtime: {e}");
                        return;
                    }
                };
                runtime.block_on(serve(&label, listener, respond, stop));
                // Dropping the runtime here cancels open connections and
                // hung replies.
            })
            .unwrap_or_else(|e| panic!("{name}: spawn the server thread: {e}"));
        MockServer { addr, shutdown: Some(shutdown), thread: Some(thread) }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        drop(self.shutdown.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve<R, F, B>(name: &str, listener: std::net::TcpListener, respond: R, mut stop: oneshot::Receiver<()>)
where
    R: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("{name}: listener: {e}");
            return;
        }
    };
    // Dropping the set at the end aborts every connection task.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors and the like: back off, go on.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let respond = respond.clone();
                connections.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service_fn(respond))
                        .await;
                });
            }
        }
    }
}
