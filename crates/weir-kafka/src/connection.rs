//! One TCP connection to one broker: size-prefixed frames, correlation ids, and the API versions
//! the broker offers (asked once, at connect).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};

use crate::error::{Error, Result};
use crate::responses;

/// The largest response frame accepted: a guard against a corrupt size prefix.
const MAX_FRAME: usize = 1 << 30;

/// The client id sent in every request header.
pub(crate) const CLIENT_ID: &str = "weir";

/// An open connection to a broker.
pub(crate) struct Connection {
    stream: TcpStream,
    /// `host:port`, for errors.
    pub addr: String,
    correlation: i32,
    /// `(min, max)` per API key, from ApiVersions; (-1, -1) when not offered.
    versions: Vec<(i16, i16)>,
    /// Receive buffer; a response is split off it as `Bytes` and its memory is reclaimed by the
    /// next `reserve` once the previous response is dropped, so receiving does not allocate in
    /// steady state.
    rbuf: BytesMut,
    /// The read timeout last set, so the per-fetch call is a no-op when it did not change.
    read_timeout: Duration,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Connection {
    /// Connects and asks for the broker's API versions.
    pub fn open(addr: &str, timeout: Duration) -> Result<Self> {
        let io = |source| Error::Io {
            broker: addr.to_string(),
            source,
        };
        let mut last = None;
        let mut stream = None;
        for sa in addr.to_socket_addrs().map_err(io)? {
            match TcpStream::connect_timeout(&sa, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match stream {
            Some(s) => s,
            None => {
                return Err(io(last.unwrap_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                })))
            }
        };
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let mut conn = Self {
            stream,
            addr: addr.to_string(),
            correlation: 0,
            versions: Vec::new(),
            rbuf: BytesMut::with_capacity(64 * 1024),
            read_timeout: timeout,
        };
        // ApiVersions v3 is what every broker since 2.4 answers; Kafka 4 requires it.
        let body = conn.request_body(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("weir-kafka"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION"))),
        )?;
        let (error_code, keys) =
            responses::api_versions(&body).map_err(|e| conn.protocol("ApiVersions", e))?;
        if error_code != 0 {
            return Err(conn.protocol("ApiVersions", format!("error code {error_code}")));
        }
        for (key, min, max) in keys {
            let i = key as usize;
            if key >= 0 && i < 256 {
                if conn.versions.len() <= i {
                    conn.versions.resize(i + 1, (-1, -1));
                }
                conn.versions[i] = (min, max);
            }
        }
        Ok(conn)
    }

    /// Sets how long a read may block (the fetch wait plus the request timeout).
    pub fn set_read_timeout(&mut self, t: Duration) -> Result<()> {
        if t == self.read_timeout {
            return Ok(());
        }
        self.stream
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

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            broker: self.addr.clone(),
            source,
        }
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
        Ok(buf.to_vec())
    }

    /// Sends an already framed request after writing a fresh correlation id into it (bytes
    /// 8..12 of every request frame); returns the id to expect back.
    pub fn send_frame(&mut self, frame: &mut [u8]) -> Result<i32> {
        let id = self.next_correlation();
        if frame.len() < 12 {
            return Err(self.protocol("request", "frame shorter than a header"));
        }
        frame[8..12].copy_from_slice(&id.to_be_bytes());
        self.stream.write_all(frame).map_err(|e| self.io(e))?;
        Ok(id)
    }

    /// Reads one response frame and checks its correlation id; returns the bytes after it
    /// (the rest of the header and the body).
    pub fn recv_frame(&mut self, api: &'static str, correlation: i32) -> Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).map_err(|e| self.io(e))?;
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
        _ => "request",
    }
}
