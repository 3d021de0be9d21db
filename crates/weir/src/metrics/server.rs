//! The HTTP endpoints of `weir run --metrics-addr`: `/metrics` (OpenMetrics text), `/health`
//! (the process runs) and `/ready` (every source has connected and read).
//!
//! Served by hyper (HTTP/1.1) on a single-threaded tokio runtime of its own, so scrapes never
//! wait for the engine's workers and the engine never waits for a scrape. Connections are
//! served concurrently (at most [`MAX_CONNECTIONS`]; more are closed at once), each gets
//! [`REQUEST_DEADLINE`] for its request head and [`CONNECTION_DEADLINE`] in all, so idle or
//! trickling clients cannot starve Prometheus. Bind it to loopback (`127.0.0.1:9464`) unless the
//! endpoint is meant to be reached from elsewhere: it has no authentication.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::MetricsHandle;

/// The content type of the OpenMetrics text format (Prometheus asks for it and parses it).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The largest request head read (hyper's smallest buffer).
const MAX_HEAD: usize = 8192;

/// Connections served at once; one more is closed as soon as it is accepted.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a request head may take to arrive, however it trickles.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// How long one connection may last in all (a client that reads the answer slowly included).
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);

/// A running metrics endpoint; dropping it (or [`MetricsServer::stop`]) stops it.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0 picks a free one) and serves `handle`'s metrics.
    pub fn start(addr: &str, handle: MetricsHandle) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("weir-metrics".into())
            .spawn(move || runtime.block_on(serve(listener, handle, stopped)))?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving.
    pub fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Accepts connections until told to stop, serving each on a task of its own.
async fn serve(
    listener: std::net::TcpListener,
    handle: MetricsHandle,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "metrics endpoint: cannot listen");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!("metrics endpoint: {MAX_CONNECTIONS} connections open; one closed");
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let answer = route(&handle, &req);
                async move { Ok::<_, Infallible>(answer) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(REQUEST_DEADLINE)
                .keep_alive(false)
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_DEADLINE, connection).await {
                Ok(Err(e)) => tracing::debug!(error = %e, "metrics endpoint: a request failed"),
                Err(_) => tracing::debug!("metrics endpoint: a connection ran out of time"),
                Ok(Ok(())) => {}
            }
        });
    }
}

/// The answer to one request.
fn route(handle: &MetricsHandle, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => respond(StatusCode::OK, OPENMETRICS, handle.render()),
        "/health" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/ready" => {
            if handle.ready() {
                respond(StatusCode::OK, "text/plain", "ready\n".into())
            } else {
                let waiting = handle.not_ready();
                let body = if waiting.is_empty() {
                    "not ready: no source defined yet\n".to_string()
                } else {
                    format!("not ready: waiting for {}\n", waiting.join(", "))
                };
                respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", body)
            }
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /health or /ready\n".into(),
        ),
    }
}

fn respond(status: StatusCode, kind: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(kind),
    );
    r
}
