//! One connection to one broker: TCP or TLS, SASL authentication and re-authentication,
//! size-prefixed frames, correlation ids, and the API versions the broker offers (asked once,
//! at connect).
//!
//! A [`Connector`] is built once per client (consumer, producer, topic creation) from its
//! [`SecurityConfig`]: the TLS material is loaded and checked there, and every connection the
//! client opens shares it, with the SASL mechanism (and so one OAUTHBEARER token cache).

use std::io::{IoSlice, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};

use crate::error::{error_name, AuthFailure, Error, Result};
use crate::responses;
use crate::security::sasl::{self, SaslMechanism};
use crate::security::{tls, SecurityConfig, SecurityProtocol};
use crate::wire::WireError;

/// The largest response frame accepted: a guard against a corrupt size prefix.
const MAX_FRAME: usize = 1 << 30;

/// The client id sent in every request header.
pub(crate) const CLIENT_ID: &str = "weir";

/// How a client opens its connections: the protocol, the TLS configuration and the SASL
/// mechanism, loaded once.
#[derive(Clone)]
pub(crate) struct Connector {
    protocol: SecurityProtocol,
    /// TLS 1.2 and 1.3, through rustls's buffered stream.
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<Arc<dyn SaslMechanism>>,
    /// Connect, handshake and request timeout.
    pub timeout: Duration,
    /// Re-authentications done by this client's connections (KIP-368).
    reauthentications: Arc<AtomicU64>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("protocol", &self.protocol)
            .field("sasl", &self.sasl.as_ref().map(|m| m.name().to_string()))
            .finish()
    }
}

impl Connector {
    /// Checks `security` and loads its TLS material (a missing or unreadable file, a wrong key
    /// password fail here, naming the option).
    pub fn new(security: &SecurityConfig, timeout: Duration) -> Result<Self> {
        security.validate()?;
        let tls = if security.protocol.tls() {
            Some(tls::client_config(&security.tls)?)
        } else {
            None
        };
        Ok(Self {
            protocol: security.protocol,
            tls,
            sasl: security.sasl.as_ref().map(sasl::mechanism),
            timeout,
            reauthentications: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Re-authentications done so far by the connections of this connector.
    pub fn reauthentications(&self) -> u64 {
        self.reauthentications.load(Ordering::Relaxed)
    }

    /// Opens a connection to `addr`: TCP, the TLS handshake, ApiVersions, SASL.
    pub fn open(&self, addr: &str) -> Result<Connection> {
        Connection::open(self, addr)
    }
}

/// A TCP stream, or TLS over one.
enum Stream {
    Plain(TcpStream),
    /// TLS 1.2 or 1.3, through rustls's buffered stream.
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TlsSocket>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => &s.get_ref().tcp,
        }
    }
}

/// Bytes of the TLS socket's receive buffer: many records per system call.
const RECEIVE_BUFFER: usize = 256 << 10;
/// A read shorter than this means the broker is sending slower than the consumer reads (it
/// encrypts in Java; plaintext goes out with sendfile)...
const SHORT_READ: usize = 32 << 10;
/// ...so the next read waits this long first and takes many records at once, instead of
/// waking for each record the broker writes: fewer system calls and context switches, at
/// most this much latency.
const LINGER: Duration = Duration::from_micros(100);

/// A TLS handshake that did not complete: the rustls error if there was one.
enum HandshakeError {
    Tls(rustls::Error),
    Io(std::io::Error),
}

/// The socket under TLS, read through a buffer of its own: rustls asks for at most a few KiB
/// per read (its receive buffer grows 4 KiB at a time), which would cost a system call each;
/// here one call takes up to 256 KiB and rustls's reads are served from memory. A read after
/// a short one lingers first (see [`SHORT_READ`]).
struct TlsSocket {
    tcp: TcpStream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The last socket read returned less than [`SHORT_READ`].
    last_short: bool,
}

impl TlsSocket {
    fn new(tcp: TcpStream) -> Self {
        Self {
            tcp,
            buf: vec![0; RECEIVE_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            last_short: false,
        }
    }
}

impl Read for TlsSocket {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.start == self.end {
            if self.last_short {
                std::thread::sleep(LINGER);
            }
            if out.len() >= self.buf.len() {
                let n = self.tcp.read(out)?;
                self.last_short = n < SHORT_READ;
                return Ok(n);
            }
            self.start = 0;
            self.end = 0;
            self.end = self.tcp.read(&mut self.buf)?;
            self.last_short = self.end < SHORT_READ;
        }
        let n = out.len().min(self.end - self.start);
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        Ok(n)
    }
}

impl Write for TlsSocket {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.tcp.write(data)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.write_vectored(bufs),
            // StreamOwned writes only the first slice of a vectored write; rustls's borrowed
            // Stream writes them all into its records.
            Self::Tls(s) => {
                let s = &mut **s;
                rustls::Stream::new(&mut s.conn, &mut s.sock).write_vectored(bufs)
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}

/// An open connection to a broker.
pub(crate) struct Connection {
    stream: Stream,
    /// `host:port`, for errors.
    pub addr: String,
    correlation: i32,
    /// `(min, max)` per API key, from ApiVersions; (-1, -1) when not offered.
    versions: Vec<(i16, i16)>,
    /// The cluster's finalized `transaction.version` (0 when not named).
    transaction_version: i16,
    /// Receive buffer; a response is split off it as `Bytes` and its memory is reclaimed by the
    /// next `reserve` once the previous response is dropped, so receiving does not allocate in
    /// steady state.
    rbuf: BytesMut,
    /// The read timeout last set, so the per-fetch call is a no-op when it did not change.
    read_timeout: Duration,
    /// Requests sent whose responses were not read yet.
    in_flight: usize,
    /// Responses read so far (the first one tells a TLS listener from a plaintext one).
    received: u64,
    protocol: SecurityProtocol,
    sasl: Option<Arc<dyn SaslMechanism>>,
    /// Re-authenticate before sending once this instant has passed (KIP-368).
    reauth_at: Option<Instant>,
    reauthentications: Arc<AtomicU64>,
    timeout: Duration,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .finish()
    }
}

/// The rustls error inside an I/O error of a TLS stream, if there is one.
fn rustls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

impl Connection {
    /// Connects, runs the TLS handshake when the protocol has TLS, asks for the broker's API
    /// versions and authenticates when the protocol has SASL.
    fn open(connector: &Connector, addr: &str) -> Result<Self> {
        let timeout = connector.timeout;
        let stream = match &connector.tls {
            Some(config) => Stream::Tls(Box::new(tls_handshake(
                config,
                tcp_connect(addr, timeout)?,
                addr,
                connector.protocol,
                timeout,
            )?)),
            None => Stream::Plain(tcp_connect(addr, timeout)?),
        };
        let mut conn = Self {
            stream,
            addr: addr.to_string(),
            correlation: 0,
            versions: Vec::new(),
            transaction_version: 0,
            rbuf: BytesMut::with_capacity(64 * 1024),
            read_timeout: timeout,
            in_flight: 0,
            received: 0,
            protocol: connector.protocol,
            sasl: connector.sasl.clone(),
            reauth_at: None,
            reauthentications: connector.reauthentications.clone(),
            timeout,
        };
        // ApiVersions v3 is what every broker since 2.4 answers; Kafka 4 requires it. It is
        // allowed before SASL authentication.
        let body = conn.request_body(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("weir-kafka"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION"))),
        )?;
        let answer =
            responses::api_versions(&body).map_err(|e| conn.malformed("ApiVersions", e))?;
        if answer.error_code != 0 {
            return Err(conn.protocol("ApiVersions", format!("error code {}", answer.error_code)));
        }
        conn.transaction_version = answer.transaction_version;
        for (key, min, max) in answer.keys {
            let i = key as usize;
            if key >= 0 && i < 256 {
                if conn.versions.len() <= i {
                    conn.versions.resize(i + 1, (-1, -1));
                }
                conn.versions[i] = (min, max);
            }
        }
        if conn.sasl.is_some() {
            conn.authenticate()?;
        }
        Ok(conn)
    }

    /// SaslHandshake, then the mechanism's exchange over SaslAuthenticate. Sets the
    /// re-authentication deadline from the session lifetime the broker grants.
    fn authenticate(&mut self) -> Result<()> {
        let Some(mechanism) = self.sasl.clone() else {
            return Ok(());
        };
        let name = mechanism.name().to_string();
        let started = Instant::now();
        let v = self.version(ApiKey::SaslHandshake, "SaslHandshake", 1, 1)?;
        let body = self.request_body(
            ApiKey::SaslHandshake,
            v,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(name.clone())),
        )?;
        let (code, offered) =
            responses::sasl_handshake(&body).map_err(|e| self.malformed("SaslHandshake", e))?;
        match code {
            0 => {}
            33 => {
                return Err(Error::MechanismNotEnabled {
                    broker: self.addr.clone(),
                    mechanism: name,
                    offered,
                })
            }
            34 => {
                return Err(Error::WrongProtocol {
                    broker: self.addr.clone(),
                    protocol: self.protocol.name(),
                    reason: "this listener does not use SASL (it answered SaslHandshake with ILLEGAL_SASL_STATE); PLAINTEXT or SSL may be what it speaks".into(),
                })
            }
            code => {
                return Err(Error::Authentication {
                    broker: self.addr.clone(),
                    mechanism: name,
                    user: mechanism.principal(),
                    cause: Box::new(AuthFailure::Refused(format!(
                        "SaslHandshake failed with {} ({code})",
                        error_name(code)
                    ))),
                })
            }
        }
        let auth_error = |conn: &Self, cause: AuthFailure| Error::Authentication {
            broker: conn.addr.clone(),
            mechanism: name.clone(),
            user: mechanism.principal(),
            cause: Box::new(cause),
        };
        let mut exchange = mechanism.begin(&self.addr)?;
        let v = self.version(ApiKey::SaslAuthenticate, "SaslAuthenticate", 0, 2)?;
        let mut message = exchange.first().map_err(|e| auth_error(self, e.into()))?;
        let lifetime_ms = loop {
            let body = self.request_body(
                ApiKey::SaslAuthenticate,
                v,
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message)),
            );
            let body = match body {
                Ok(b) => b,
                // A broker that refuses credentials may close the connection at once.
                Err(Error::Io { source, .. }) => {
                    return Err(auth_error(self, AuthFailure::Closed(source)))
                }
                Err(e) => return Err(e),
            };
            let answer = responses::sasl_authenticate(&body, v)
                .map_err(|e| self.malformed("SaslAuthenticate", e))?;
            if answer.error_code != 0 {
                let message = answer
                    .error_message
                    .unwrap_or_else(|| error_name(answer.error_code).to_string());
                return Err(auth_error(self, AuthFailure::Refused(message)));
            }
            match exchange
                .next(&answer.auth_bytes)
                .map_err(|e| auth_error(self, e.into()))?
            {
                Some(next) => message = next,
                None => break answer.session_lifetime_ms,
            }
        };
        // Re-authenticate once 85% of the session has passed (the Java client picks 85-95%):
        // the broker closes a connection whose session expired at its next request. Not
        // sooner than a second after this authentication began: the broker refuses a
        // re-authentication within a second of the last (and a session that short ends in a
        // closed connection and a reconnect instead).
        // The broker's value is outside data: a lifetime too long for the clock means no
        // re-authentication is needed within this process's life.
        self.reauth_at = u64::try_from(lifetime_ms)
            .ok()
            .filter(|&ms| ms > 0)
            .and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms / 100 * 85)))
            .map(|at| at.max(started + Duration::from_millis(1_100)));
        if lifetime_ms > 0 {
            log::debug!(
                "kafka broker {}: SASL {name} session of {lifetime_ms} ms",
                self.addr
            );
        }
        Ok(())
    }

    /// True when the SASL session is due for renewal and a request is in flight, so it cannot
    /// be renewed before the next send: a caller that keeps requests in flight reads their
    /// answers first.
    pub fn reauthentication_blocked(&self) -> bool {
        self.in_flight > 0 && self.reauth_at.is_some_and(|at| Instant::now() >= at)
    }

    /// Renews the SASL session when it is due and nothing is in flight (KIP-368).
    fn maybe_reauthenticate(&mut self) -> Result<()> {
        if self.in_flight == 0 && self.reauth_at.is_some_and(|at| Instant::now() >= at) {
            self.reauth_at = None;
            let before = self.read_timeout;
            self.set_read_timeout(self.timeout)?;
            match self.authenticate() {
                Ok(()) => {}
                // The broker did not take the SaslHandshake as a re-authentication (its
                // session had ended, or the last one was too recent): a new connection
                // authenticates afresh, so this is retried like a dropped connection.
                Err(Error::WrongProtocol { reason, .. }) => {
                    return Err(Error::Io {
                        broker: self.addr.clone(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::ConnectionAborted,
                            format!("re-authentication refused: {reason}"),
                        ),
                    })
                }
                Err(e) => return Err(e),
            }
            self.set_read_timeout(before)?;
            self.reauthentications.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A response whose reply will not be read (a produce request with acks = 0).
    pub fn forget_reply(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Sets how long a read may block (the fetch wait plus the request timeout).
    pub fn set_read_timeout(&mut self, t: Duration) -> Result<()> {
        if t == self.read_timeout {
            return Ok(());
        }
        self.stream
            .tcp()
            .set_read_timeout(Some(t))
            .map_err(|source| Error::Io {
                broker: self.addr.clone(),
                source,
            })?;
        self.read_timeout = t;
        Ok(())
    }

    pub fn protocol(&self, api: &'static str, reason: impl Into<String>) -> Error {
        Error::Protocol {
            broker: self.addr.clone(),
            api,
            reason: reason.into(),
        }
    }

    /// The error for a response body of `api` that does not decode.
    pub(crate) fn malformed(&self, api: &'static str, source: WireError) -> Error {
        Error::Malformed {
            broker: self.addr.clone(),
            api,
            source,
        }
    }

    fn io(&self, source: std::io::Error) -> Error {
        // On a connection that reads and writes requests, a TLS error that does not refuse
        // the session (a corrupt record, an unexpected alert) is a fault of the stream,
        // retried like a socket error, not a setting to fix.
        if let Some(e) = rustls_error(&source) {
            let (broker, reason) = (self.addr.clone(), tls::explain(e));
            return if tls::refuses_session(e) {
                Error::Tls { broker, reason }
            } else {
                Error::TlsStream { broker, reason }
            };
        }
        // A listener that expects TLS closes a plaintext connection at its first request; one
        // that expects SASL closes at the first request after ApiVersions.
        let early = if self.protocol.tls() {
            false
        } else if self.protocol.sasl() {
            self.received == 0
        } else {
            self.received <= 1
        };
        if early {
            use std::io::ErrorKind as K;
            if matches!(
                source.kind(),
                K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe
            ) {
                // Still an I/O error (retried like one), with the likely cause in it.
                return Error::Io {
                    broker: self.addr.clone(),
                    source: std::io::Error::new(
                        source.kind(),
                        format!(
                            "the broker closed the connection at once ({source}); a listener that expects TLS or SASL does that: check 'security.protocol' (it is {})",
                            self.protocol.name()
                        ),
                    ),
                };
            }
        }
        // A read cut short is the broker closing the connection (it stopped or restarted):
        // say so rather than "failed to fill whole buffer".
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            return Error::Io {
                broker: self.addr.clone(),
                source: std::io::Error::new(
                    source.kind(),
                    format!("the broker closed the connection ({source})"),
                ),
            };
        }
        Error::Io {
            broker: self.addr.clone(),
            source,
        }
    }

    /// The cluster's finalized `transaction.version` feature level, as this broker told it
    /// (0 when it named none): 2 and above offers KIP-890's transaction protocol.
    pub fn transaction_version(&self) -> i16 {
        self.transaction_version
    }

    /// The highest version of `key` both sides speak, within `min..=max` of this client.
    pub fn version(&self, key: ApiKey, api: &'static str, min: i16, max: i16) -> Result<i16> {
        let (lo, hi) = self.versions.get(key as usize).copied().unwrap_or((-1, -1));
        let v = hi.min(max);
        if hi < 0 || v < min || v < lo {
            return Err(Error::UnsupportedVersion {
                broker: self.addr.clone(),
                api,
                min,
                max,
                offered_min: lo,
                offered_max: hi,
            });
        }
        Ok(v)
    }

    fn next_correlation(&mut self) -> i32 {
        self.correlation = self.correlation.wrapping_add(1) & 0x7fff_ffff;
        self.correlation
    }

    /// Encodes a full frame (size, header, body) of `req` into a new buffer.
    pub fn encode_frame<R: Encodable + HeaderVersion + Message>(
        key: ApiKey,
        version: i16,
        correlation: i32,
        req: &R,
    ) -> std::result::Result<Vec<u8>, String> {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut buf = BytesMut::with_capacity(256);
        buf.extend_from_slice(&[0; 4]);
        header
            .encode(&mut buf, R::header_version(version))
            .map_err(|e| e.to_string())?;
        req.encode(&mut buf, version).map_err(|e| e.to_string())?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        // The buffer's own allocation, not a copy of it (a Produce frame holds whole batches).
        Ok(Vec::from(buf))
    }

    /// Sends an already framed request after writing a fresh correlation id into it (bytes
    /// 8..12 of every request frame); returns the id to expect back.
    pub fn send_frame(&mut self, frame: &mut [u8]) -> Result<i32> {
        self.send_frame_parts(frame, &[], &[])
    }

    /// Sends a request frame in three pieces, `head` (its size prefix already counting the
    /// other two), `body` and `tail`, as [`Connection::send_frame`] does: a Produce request's
    /// batch goes out from where it was built instead of being copied into one frame. Plain
    /// TCP sends the pieces with one vectored write, TLS as one run of records.
    pub fn send_frame_parts(&mut self, head: &mut [u8], body: &[u8], tail: &[u8]) -> Result<i32> {
        self.maybe_reauthenticate()?;
        let id = self.next_correlation();
        if head.len() < 12 {
            return Err(self.protocol("request", "frame shorter than a header"));
        }
        head[8..12].copy_from_slice(&id.to_be_bytes());
        let mut slices = [IoSlice::new(head), IoSlice::new(body), IoSlice::new(tail)];
        let mut left: &mut [IoSlice<'_>] = &mut slices;
        while !left.is_empty() {
            match self.stream.write_vectored(left) {
                Ok(0) => {
                    let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                    return Err(self.io(e));
                }
                Ok(n) => IoSlice::advance_slices(&mut left, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e)),
            }
        }
        self.stream.flush().map_err(|e| self.io(e))?;
        self.in_flight += 1;
        Ok(id)
    }

    /// Reads one response frame and checks its correlation id; returns the bytes after it
    /// (the rest of the header and the body).
    pub fn recv_frame(&mut self, api: &'static str, correlation: i32) -> Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(|e| self.io(e))?;
        if self.received == 0 && matches!(self.stream, Stream::Plain(_)) && looks_like_tls(size) {
            return Err(Error::WrongProtocol {
                broker: self.addr.clone(),
                protocol: self.protocol.name(),
                reason: "the broker answered with TLS: this listener expects SSL or SASL_SSL"
                    .into(),
            });
        }
        self.received += 1;
        self.in_flight = self.in_flight.saturating_sub(1);
        let n = i32::from_be_bytes(size);
        if n < 4 || n as usize > MAX_FRAME {
            return Err(self.protocol(api, format!("impossible frame size {n}")));
        }
        let n = n as usize;
        self.rbuf.clear();
        self.rbuf.reserve(n);
        // Zero-fill then read over it: `resize` reuses the reclaimed capacity.
        self.rbuf.resize(n, 0);
        if let Err(e) = self.stream.read_exact(&mut self.rbuf[..]) {
            return Err(self.io(e));
        }
        let mut frame = self.rbuf.split().freeze();
        let got = frame.get_i32();
        if got != correlation {
            return Err(self.protocol(api, format!("correlation id {got}, expected {correlation}")));
        }
        Ok(frame)
    }

    /// Sends `req` and returns its response body (after the correlation id), for the
    /// responses this crate reads by hand.
    pub fn request_body<Req>(&mut self, key: ApiKey, version: i16, req: &Req) -> Result<Bytes>
    where
        Req: Encodable + HeaderVersion + Message,
    {
        let api = api_name(key);
        let mut frame = Self::encode_frame(key, version, 0, req)
            .map_err(|e| self.protocol(api, format!("cannot encode the request: {e}")))?;
        let id = self.send_frame(&mut frame)?;
        self.recv_frame(api, id)
    }

    /// Sends `req` and waits for its response, decoded by `kafka-protocol` (used only off the
    /// consumer's path: Produce, InitProducerId, CreateTopics).
    pub fn request<Req, Resp>(&mut self, key: ApiKey, version: i16, req: &Req) -> Result<Resp>
    where
        Req: Encodable + HeaderVersion + Message,
        Resp: Decodable,
    {
        let api = api_name(key);
        let mut frame = Self::encode_frame(key, version, 0, req)
            .map_err(|e| self.protocol(api, format!("cannot encode the request: {e}")))?;
        let id = self.send_frame(&mut frame)?;
        let mut body = self.recv_frame(api, id)?;
        decode_response(key, version, &mut body).map_err(|e| self.protocol(api, e))
    }
}

/// True when the first bytes of an answer are a TLS record header (a handshake or an alert,
/// TLS 1.x), not a Kafka frame size: no first response is hundreds of megabytes.
fn looks_like_tls(b: [u8; 4]) -> bool {
    matches!(b[0], 0x15 | 0x16) && b[1] == 0x03 && b[2] <= 0x04
}

/// The TLS handshake with a deadline: an answer that is not TLS, or none within `timeout`,
/// is a hint about 'security.protocol'.
fn tls_handshake(
    config: &Arc<rustls::ClientConfig>,
    tcp: TcpStream,
    addr: &str,
    protocol: SecurityProtocol,
    timeout: Duration,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TlsSocket>> {
    let mut tcp = TlsSocket::new(tcp);
    let name = tls::server_name(addr)?;
    let mut conn = rustls::ClientConnection::new(config.clone(), name).map_err(|e| Error::Tls {
        broker: addr.to_string(),
        reason: tls::explain(&e),
    })?;
    let deadline = Instant::now() + timeout;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            let failure = match rustls_error(&e) {
                Some(tls_error) => HandshakeError::Tls(tls_error.clone()),
                None => HandshakeError::Io(e),
            };
            return Err(handshake_failure(addr, protocol, timeout, failure));
        }
        if Instant::now() > deadline {
            return Err(handshake_failure(
                addr,
                protocol,
                timeout,
                HandshakeError::Io(std::io::ErrorKind::TimedOut.into()),
            ));
        }
    }
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// A TCP connection to the first address of `addr` that answers, with the timeouts set.
fn tcp_connect(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let io = |source| Error::Io {
        broker: addr.to_string(),
        source,
    };
    let mut last = None;
    for sa in addr.to_socket_addrs().map_err(io)? {
        match TcpStream::connect_timeout(&sa, timeout) {
            Ok(stream) => {
                stream.set_nodelay(true).map_err(io)?;
                stream.set_read_timeout(Some(timeout)).map_err(io)?;
                stream.set_write_timeout(Some(timeout)).map_err(io)?;
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(io(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
    })))
}

/// The error for a TLS handshake that failed: a hint about 'security.protocol' when the
/// answer was not TLS or did not come.
fn handshake_failure(
    addr: &str,
    protocol: SecurityProtocol,
    timeout: Duration,
    e: HandshakeError,
) -> Error {
    use std::io::ErrorKind as K;
    let wrong = |reason: String| Error::WrongProtocol {
        broker: addr.to_string(),
        protocol: protocol.name(),
        reason,
    };
    match e {
        HandshakeError::Tls(rustls::Error::InvalidMessage(_)) => wrong(
            "the broker's answer to the TLS handshake is not TLS: this listener expects PLAINTEXT or SASL_PLAINTEXT".into(),
        ),
        HandshakeError::Tls(e) => Error::Tls {
            broker: addr.to_string(),
            reason: tls::explain(&e),
        },
        HandshakeError::Io(e) => match rustls_error(&e) {
            Some(inner) => Error::Tls {
                broker: addr.to_string(),
                reason: tls::explain(inner),
            },
            None => match e.kind() {
                K::WouldBlock | K::TimedOut => wrong(format!(
                    "no TLS answer within {} s: a plaintext listener waits for more bytes",
                    timeout.as_secs()
                )),
                K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted => wrong(
                    "the broker closed the connection during the TLS handshake: a plaintext listener does that".into(),
                ),
                _ => Error::Io {
                    broker: addr.to_string(),
                    source: e,
                },
            },
        },
    }
}

/// Decodes the rest of a response header (tagged fields for flexible versions) and the body.
pub(crate) fn decode_response<Resp: Decodable>(
    key: ApiKey,
    version: i16,
    body: &mut Bytes,
) -> std::result::Result<Resp, String> {
    // The correlation id was read already; a v1 header adds tagged fields after it.
    if key.response_header_version(version) >= 1 {
        let n = tagged_fields_len(body).ok_or("truncated response header")?;
        body.advance(n);
    }
    Resp::decode(body, version).map_err(|e| e.to_string())
}

/// Length of an encoded tagged-field section at the start of `b` (unsigned varint count, then
/// per field: tag varint, size varint, data).
fn tagged_fields_len(b: &Bytes) -> Option<usize> {
    fn uvarint(b: &[u8], pos: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = *b.get(*pos)?;
            *pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
            shift += 7;
            if shift > 35 {
                return None;
            }
        }
    }
    let mut pos = 0;
    let n = uvarint(b, &mut pos)?;
    for _ in 0..n {
        uvarint(b, &mut pos)?;
        let size = uvarint(b, &mut pos)? as usize;
        pos = pos.checked_add(size).filter(|&p| p <= b.len())?;
    }
    Some(pos)
}

/// The API's name for errors.
pub(crate) fn api_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::InitProducerId => "InitProducerId",
        _ => "request",
    }
}
