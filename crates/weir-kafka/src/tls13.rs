//! TLS 1.3 records decrypted in place, in one receive buffer.
//!
//! rustls 0.23 copies every decrypted record into a `Vec` of its own before the application
//! reads it (its buffered and unbuffered APIs alike: an allocation per record), then the
//! application copies it again, and its buffered stream reads the socket a few KiB at a time:
//! over a fast link that costs more than the decryption. So for TLS 1.3, rustls runs the
//! handshake (unbuffered API) and hands over the traffic secrets through its kernel-connection
//! API (made for kTLS); from then on this module reads the socket into a 256 KiB buffer (one
//! system call for many records), has rustls's own record decrypter (`MessageDecrypter`:
//! nonce, AAD, padding and content type) open each record in place there, and copies the
//! plaintext once, into the caller's buffer (the fetch response). Nothing is allocated per
//! record. When the broker sends slower than this reads (it encrypts in Java), a read that
//! must wait for the rest of a record lingers 100 µs first so it takes many records at once.
//! Key updates and session tickets go to rustls's `KernelConnection`; alerts end the stream
//! (user_canceled is ignored). Writes (small requests) go through rustls's record encrypter,
//! with a KeyUpdate before a send key reaches its AEAD's confidentiality limit.
//!
//! A broker that only speaks TLS 1.2 refuses the TLS-1.3-only handshake; the connector then
//! uses rustls's buffered stream for it (see `connection.rs`).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::crypto::cipher::{
    InboundOpaqueMessage, MessageDecrypter, MessageEncrypter, OutboundChunks, OutboundPlainMessage,
};
use rustls::kernel::KernelConnection;
use rustls::pki_types::ServerName;
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls::{
    AlertDescription, ClientConfig, ConnectionTrafficSecrets, ContentType, PeerMisbehaved,
    ProtocolVersion, SupportedCipherSuite, Tls13CipherSuite,
};

/// The largest TLS 1.3 record body: 2^14 bytes of plaintext plus 256 of expansion.
const MAX_RECORD: usize = (1 << 14) + 256;
/// The largest record body rustls takes during the handshake (TLS 1.2's allowance).
const MAX_HANDSHAKE_RECORD: usize = (1 << 14) + 2048;
/// A record body holds at least the content type byte and the 16-byte tag.
const MIN_RECORD: usize = 17;
/// Plaintext per record sent.
const MAX_FRAGMENT: usize = 1 << 14;
/// KeyUpdate messages accepted in a row without application data (rustls's limit).
const MAX_KEY_UPDATES: u8 = 32;
/// user_canceled alerts ignored (rustls's limit on warning alerts).
const MAX_USER_CANCELED: u8 = 4;
/// Records per send key when the suite has no confidentiality limit (ChaCha20-Poly1305):
/// rustls's, far from the sequence number wrapping.
const SEQ_SOFT_LIMIT: u64 = 0xffff_ffff_ffff_0000;

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A handshake that did not complete: the rustls error if there was one.
pub(crate) enum HandshakeError {
    Tls(rustls::Error),
    Io(io::Error),
}

/// Runs a TLS 1.3 handshake over `tcp` with `config` (which must allow TLS 1.3 only and
/// enable secret extraction) and returns the stream, or why not within `timeout`.
pub(crate) fn connect(
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    mut tcp: TcpStream,
    timeout: Duration,
) -> Result<Tls13Stream, HandshakeError> {
    let mut conn = UnbufferedClientConnection::new(config, name).map_err(HandshakeError::Tls)?;
    let mut incoming = vec![0u8; 2 * (MAX_RECORD + 5)];
    let mut in_used = 0;
    let mut outgoing = vec![0u8; MAX_RECORD + 5];
    let mut out_used = 0;
    let deadline = Instant::now() + timeout;
    // The bytes rustls is given: whole records, one more each time it is blocked, so that it
    // stops at the server's Finished and leaves the records after it (tickets, key updates,
    // data) to the record layer. Given them, rustls would process them too: a message split
    // across records would stay half-decrypted in `incoming`, the answer to a KeyUpdate
    // would be queued in rustls and lost at the handover.
    let mut fed = 0;
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming[..fed]);
        let (mut done, mut blocked) = (false, false);
        match state.map_err(HandshakeError::Tls)? {
            ConnectionState::EncodeTlsData(mut s) => loop {
                match s.encode(&mut outgoing[out_used..]) {
                    Ok(n) => {
                        out_used += n;
                        break;
                    }
                    Err(EncodeError::InsufficientSize(e)) => {
                        outgoing.resize(out_used + e.required_size, 0)
                    }
                    Err(e) => return Err(HandshakeError::Io(io::Error::other(e.to_string()))),
                }
            },
            ConnectionState::TransmitTlsData(s) => {
                tcp.write_all(&outgoing[..out_used])
                    .map_err(HandshakeError::Io)?;
                out_used = 0;
                s.done();
            }
            ConnectionState::BlockedHandshake => blocked = true,
            ConnectionState::WriteTraffic(_) => done = true,
            ConnectionState::PeerClosed | ConnectionState::Closed => {
                return Err(HandshakeError::Io(io::ErrorKind::UnexpectedEof.into()))
            }
            _ => {
                return Err(HandshakeError::Io(io::Error::other(
                    "application data before the TLS handshake completed",
                )))
            }
        }
        incoming.copy_within(discard..in_used, 0);
        in_used -= discard;
        fed -= discard;
        if done {
            break;
        }
        if blocked {
            let next = handshake_record(&incoming[fed..in_used]);
            if next > 0 {
                fed += next;
                continue;
            }
            if Instant::now() > deadline {
                return Err(HandshakeError::Io(io::ErrorKind::TimedOut.into()));
            }
            if in_used == incoming.len() {
                incoming.resize(incoming.len() * 2, 0);
            }
            let n = tcp
                .read(&mut incoming[in_used..])
                .map_err(HandshakeError::Io)?;
            if n == 0 {
                return Err(HandshakeError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            in_used += n;
        }
    }
    if conn.protocol_version() != Some(ProtocolVersion::TLSv1_3) {
        return Err(HandshakeError::Tls(rustls::Error::General(
            "the broker did not negotiate TLS 1.3".into(),
        )));
    }
    let (secrets, kernel) = conn
        .dangerous_into_kernel_connection()
        .map_err(HandshakeError::Tls)?;
    let SupportedCipherSuite::Tls13(suite) = kernel.negotiated_cipher_suite() else {
        return Err(HandshakeError::Tls(rustls::Error::General(
            "a TLS 1.2 suite on a TLS 1.3 connection".into(),
        )));
    };
    let (tx_seq, tx) = secrets.tx;
    let (rx_seq, rx) = secrets.rx;
    // Records received after the handshake's last one (session tickets) are ours to read.
    let mut buf = vec![0u8; RECEIVE_BUFFER.max(in_used)].into_boxed_slice();
    buf[..in_used].copy_from_slice(&incoming[..in_used]);
    Ok(Tls13Stream {
        tcp,
        tx: encrypter(suite, tx).map_err(HandshakeError::Tls)?,
        rx: decrypter(suite, rx).map_err(HandshakeError::Tls)?,
        kernel,
        suite,
        tx_seq,
        tx_limit: suite.common.confidentiality_limit.min(SEQ_SOFT_LIMIT),
        rx_seq,
        buf,
        start: 0,
        end: in_used,
        plain: 0..0,
        handshake: Vec::new(),
        key_updates: 0,
        user_canceled: 0,
        peer_closed: false,
        last_short: false,
    })
}

/// How many of the bytes `b` received during the handshake rustls may process next: the
/// first record when all of it is there (0 when not), or all of them when they do not begin
/// with a TLS record header (rustls then says what is wrong).
fn handshake_record(b: &[u8]) -> usize {
    match *b {
        [0x14..=0x18, 3, _, hi, lo, ..] => {
            let n = 5 + usize::from(u16::from_be_bytes([hi, lo]));
            match n {
                _ if n > 5 + MAX_HANDSHAKE_RECORD => b.len(),
                _ if b.len() >= n => n,
                _ => 0,
            }
        }
        [_, _, _, _, _, ..] => b.len(),
        _ => 0,
    }
}

fn keys(
    secrets: ConnectionTrafficSecrets,
) -> Result<(rustls::crypto::cipher::AeadKey, rustls::crypto::cipher::Iv), rustls::Error> {
    match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => Ok((key, iv)),
        _ => Err(rustls::Error::General(
            "an AEAD this client does not read records of".into(),
        )),
    }
}

fn decrypter(
    suite: &'static Tls13CipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> Result<Box<dyn MessageDecrypter>, rustls::Error> {
    let (key, iv) = keys(secrets)?;
    Ok(suite.aead_alg.decrypter(key, iv))
}

fn encrypter(
    suite: &'static Tls13CipherSuite,
    secrets: ConnectionTrafficSecrets,
) -> Result<Box<dyn MessageEncrypter>, rustls::Error> {
    let (key, iv) = keys(secrets)?;
    Ok(suite.aead_alg.encrypter(key, iv))
}

/// Bytes of the receive buffer: many records per system call.
pub(crate) const RECEIVE_BUFFER: usize = 256 << 10;
/// A read shorter than this means the broker is sending slower than the consumer reads (it
/// encrypts in Java; plaintext goes out with sendfile)...
pub(crate) const SHORT_READ: usize = 32 << 10;
/// ...so the next read waits this long first and takes many records at once, instead of
/// waking for each record the broker writes: a fourth of the system calls and a tenth of the
/// context switches, at most this much latency.
pub(crate) const LINGER: Duration = Duration::from_micros(100);

/// A TLS 1.3 connection whose records this module reads and writes.
pub(crate) struct Tls13Stream {
    tcp: TcpStream,
    kernel: KernelConnection<ClientConnectionData>,
    suite: &'static Tls13CipherSuite,
    rx: Box<dyn MessageDecrypter>,
    rx_seq: u64,
    tx: Box<dyn MessageEncrypter>,
    tx_seq: u64,
    /// Records one send key may protect: the suite's confidentiality limit.
    tx_limit: u64,
    /// Received bytes; `buf[start..end]` are not processed yet (they begin with a record
    /// header), `buf[plain]` is decrypted plaintext not handed out yet.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    plain: std::ops::Range<usize>,
    /// Post-handshake messages (tickets, key updates) not complete yet.
    handshake: Vec<u8>,
    /// KeyUpdate messages received since the last application data.
    key_updates: u8,
    /// user_canceled alerts received.
    user_canceled: u8,
    peer_closed: bool,
    /// The last read returned less than [`SHORT_READ`].
    last_short: bool,
}

impl Tls13Stream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Reads more bytes from the socket after `end`, first moving an incomplete record to the
    /// front when the buffer's tail has no room for the rest of it.
    fn fill(&mut self, need: usize) -> io::Result<()> {
        if self.buf.len() - self.start < need {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.last_short {
            std::thread::sleep(LINGER);
        }
        let n = self.tcp.read(&mut self.buf[self.end..])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.last_short = n < SHORT_READ;
        self.end += n;
        Ok(())
    }

    /// Handles the complete post-handshake messages received (RFC 8446 section 4.6).
    fn handle_handshake(&mut self) -> io::Result<()> {
        loop {
            let h = &self.handshake;
            if h.len() < 4 {
                return Ok(());
            }
            let len = u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize;
            if h.len() < 4 + len {
                if len > 1 << 16 {
                    return Err(tls_error(rustls::Error::General(
                        "a post-handshake message over 64 KiB".into(),
                    )));
                }
                return Ok(());
            }
            let typ = h[0];
            let body: Vec<u8> = h[4..4 + len].to_vec();
            self.handshake.drain(..4 + len);
            // RFC 8446 section 5.1: a message before a key change ends its record.
            if typ == 24 && !self.handshake.is_empty() {
                return Err(tls_error(
                    PeerMisbehaved::KeyEpochWithPendingFragment.into(),
                ));
            }
            match typ {
                // NewSessionTicket: kept in the configuration's session store (rustls's
                // default, in memory); the connector's next connections to the broker resume
                // with it.
                4 => self
                    .kernel
                    .handle_new_session_ticket(&body)
                    .map_err(tls_error)?,
                // KeyUpdate: later records use the next receive key; answer a request with
                // a KeyUpdate of ours, then switch the send key.
                24 => {
                    // As rustls (and BoringSSL): a peer may not keep the connection busy
                    // with key updates alone.
                    if self.key_updates == MAX_KEY_UPDATES {
                        return Err(tls_error(PeerMisbehaved::TooManyKeyUpdateRequests.into()));
                    }
                    self.key_updates += 1;
                    let requested = match body.as_slice() {
                        [0] => false,
                        [1] => true,
                        _ => {
                            return Err(tls_error(rustls::Error::General(
                                "malformed KeyUpdate".into(),
                            )))
                        }
                    };
                    let (seq, secrets) = self.kernel.update_rx_secret().map_err(tls_error)?;
                    self.rx = decrypter(self.suite, secrets).map_err(tls_error)?;
                    self.rx_seq = seq;
                    if requested {
                        self.send_key_update()?;
                    }
                }
                other => {
                    return Err(tls_error(rustls::Error::General(format!(
                        "unexpected post-handshake message type {other}"
                    ))))
                }
            }
        }
    }

    /// Sends a record, after a KeyUpdate when the send key has protected as many records as
    /// its AEAD may (RFC 8446 section 5.5: 2^24 for AES-GCM; rustls does the same).
    fn write_record(&mut self, typ: ContentType, data: &[u8]) -> io::Result<()> {
        if self.tx_seq >= self.tx_limit {
            self.send_key_update()?;
        }
        self.seal(typ, data)
    }

    /// Sends a KeyUpdate (update not requested) with the current key, then switches to the
    /// next one.
    fn send_key_update(&mut self) -> io::Result<()> {
        self.seal(ContentType::Handshake, &[24, 0, 0, 1, 0])?;
        let (seq, secrets) = self.kernel.update_tx_secret().map_err(tls_error)?;
        self.tx = encrypter(self.suite, secrets).map_err(tls_error)?;
        self.tx_seq = seq;
        Ok(())
    }

    fn seal(&mut self, typ: ContentType, data: &[u8]) -> io::Result<()> {
        let msg = OutboundPlainMessage {
            typ,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::Single(data),
        };
        let out = self.tx.encrypt(msg, self.tx_seq).map_err(tls_error)?;
        self.tx_seq += 1;
        self.tcp.write_all(&out.encode())
    }
}

impl Read for Tls13Stream {
    fn read(&mut self, dest: &mut [u8]) -> io::Result<usize> {
        if dest.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.plain.is_empty() {
                let n = dest.len().min(self.plain.len());
                dest[..n].copy_from_slice(&self.buf[self.plain.start..self.plain.start + n]);
                self.plain.start += n;
                return Ok(n);
            }
            if self.peer_closed {
                return Ok(0);
            }
            while self.end - self.start < 5 {
                self.fill(5)?;
            }
            let h = &self.buf[self.start..self.start + 5];
            let (typ, major) = (h[0], h[1]);
            let len = usize::from(u16::from_be_bytes([h[3], h[4]]));
            // After the handshake every TLS 1.3 record is "application data" on the outside.
            if typ != 0x17 || major != 0x03 || !(MIN_RECORD..=MAX_RECORD).contains(&len) {
                return Err(tls_error(rustls::Error::General(format!(
                    "a record of type {typ} and length {len} where TLS 1.3 data was expected"
                ))));
            }
            while self.end - self.start < 5 + len {
                self.fill(5 + len)?;
            }
            let body = self.start + 5;
            self.start = body + len;
            let record = &mut self.buf[body..body + len];
            let record_at = record.as_ptr() as usize;
            let msg = InboundOpaqueMessage::new(
                ContentType::ApplicationData,
                ProtocolVersion::TLSv1_2,
                record,
            );
            let plain = self.rx.decrypt(msg, self.rx_seq).map_err(tls_error)?;
            self.rx_seq += 1;
            // TLS 1.3 decrypts in place, from the start of the record body.
            let offset = plain.payload.as_ptr() as usize - record_at;
            let n = plain.payload.len();
            // RFC 8446 section 5.1: nothing between the records of a handshake message.
            if plain.typ != ContentType::Handshake && !self.handshake.is_empty() {
                return Err(tls_error(
                    PeerMisbehaved::MessageInterleavedWithHandshakeMessage.into(),
                ));
            }
            match plain.typ {
                ContentType::ApplicationData => {
                    self.plain = body + offset..body + offset + n;
                    self.key_updates = 0;
                }
                ContentType::Handshake => {
                    let payload = plain.payload.to_vec();
                    self.handshake.extend_from_slice(&payload);
                    self.handle_handshake()?;
                }
                ContentType::Alert => {
                    let desc = match plain.payload {
                        [_level, desc] => *desc,
                        _ => {
                            return Err(tls_error(rustls::Error::General("malformed alert".into())))
                        }
                    };
                    match AlertDescription::from(desc) {
                        AlertDescription::CloseNotify => {
                            self.peer_closed = true;
                            return Ok(0);
                        }
                        // A closure alert that "SHOULD be followed by a close_notify" (RFC
                        // 8446 section 6.1; Java's SSLSocket sends both when it closes): not
                        // an error. rustls, BoringSSL and OpenSSL ignore it too, rustls up to
                        // 4 times.
                        AlertDescription::UserCanceled => {
                            if self.user_canceled == MAX_USER_CANCELED {
                                return Err(tls_error(
                                    PeerMisbehaved::TooManyWarningAlertsReceived.into(),
                                ));
                            }
                            self.user_canceled += 1;
                        }
                        other => return Err(tls_error(rustls::Error::AlertReceived(other))),
                    }
                }
                other => {
                    return Err(tls_error(rustls::Error::General(format!(
                        "unexpected {other:?} record"
                    ))))
                }
            }
        }
    }
}

impl Write for Tls13Stream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        for chunk in data.chunks(MAX_FRAGMENT) {
            self.write_record(ContentType::ApplicationData, chunk)?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

#[cfg(test)]
mod tests;
