//! The HTTP endpoints of `weir run --metrics-addr`: `/metrics` (OpenMetrics text), `/health`
//! (the process runs) and `/ready` (every source has connected and read).
//!
//! A small HTTP/1.1 responder on `std::net::TcpListener`, on a thread of its own: three `GET`
//! routes, one request per connection (`Connection: close`), answered one at a time. An HTTP
//! crate (hyper, tiny_http) would bring more code than these routes need, and none is in the
//! build yet; a scrape every few seconds needs no concurrency. A client that sends nothing is
//! cut off after a few seconds, so it cannot hold the endpoint.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::MetricsHandle;

/// The content type of the OpenMetrics text format (Prometheus asks for it and parses it).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The largest request head read.
const MAX_HEAD: usize = 8192;

/// A running metrics endpoint; dropping it (or [`MetricsServer::stop`]) stops it.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0 picks a free one) and serves `handle`'s metrics.
    pub fn start(addr: &str, handle: MetricsHandle) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("weir-metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::SeqCst) {
                        return;
                    }
                    match conn {
                        Ok(stream) => {
                            if let Err(e) = answer(stream, &handle) {
                                tracing::debug!(error = %e, "metrics endpoint: a request failed");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "metrics endpoint: cannot accept a connection");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
            })?;
        Ok(Self {
            addr,
            stop,
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
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
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

/// How long one request may take to arrive: one deadline for the whole head, so a client that
/// trickles bytes cannot hold the endpoint (it answers one connection at a time).
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Reads one request and answers it.
fn answer(mut stream: TcpStream, handle: &MetricsHandle) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let deadline = std::time::Instant::now() + REQUEST_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the request did not arrive in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(&mut stream, 431, "text/plain", "request head too large\n");
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" {
        return respond(&mut stream, 405, "text/plain", "only GET\n");
    }
    match path {
        "/metrics" => respond(&mut stream, 200, OPENMETRICS, &handle.render()),
        "/health" => respond(&mut stream, 200, "text/plain", "ok\n"),
        "/ready" => {
            if handle.ready() {
                respond(&mut stream, 200, "text/plain", "ready\n")
            } else {
                let waiting = handle.not_ready();
                let body = if waiting.is_empty() {
                    "not ready: no source defined yet\n".to_string()
                } else {
                    format!("not ready: waiting for {}\n", waiting.join(", "))
                };
                respond(&mut stream, 503, "text/plain", &body)
            }
        }
        _ => respond(
            &mut stream,
            404,
            "text/plain",
            "not found: try /metrics, /health or /ready\n",
        ),
    }
}

fn respond(stream: &mut TcpStream, status: u16, kind: &str, body: &str) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}
