//! The record layer against rustls over loopback: a rustls server (its buffered stream), or a
//! "raw" server that runs the handshake with rustls and then writes records of its own making
//! with rustls's record encrypter, to send what a well-behaved peer would not.

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use base64::Engine;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::{PeerMisbehaved, ServerConfig, ServerConnection, SignatureScheme, StreamOwned};

use super::*;
use crate::security::{tls, PemSource, Secret, TlsConfig};

const TIMEOUT: Duration = Duration::from_secs(10);

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A DER element: tag, length, body.
fn der(tag: u8, body: &[u8]) -> Vec<u8> {
    let n = body.len();
    let mut out = vec![tag];
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0xff => out.extend([0x81, n as u8]),
        _ => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(body);
    out
}

/// A fresh self-signed Ed25519 certificate for 127.0.0.1, and its key.
fn self_signed() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let provider = tls::provider();
    let mut seed = [0u8; 32];
    provider.secure_random.fill(&mut seed).unwrap();
    // PKCS#8 v1 of an Ed25519 key (RFC 8410): the seed after a fixed prefix.
    let pkcs8 = cat(&[
        &[
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ],
        &seed,
    ]);
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8));
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .unwrap();
    let spki = signing.public_key().unwrap();
    let ed25519 = der(0x30, &[0x06, 0x03, 0x2b, 0x65, 0x70]);
    let cn = der(
        0x30,
        &cat(&[&[0x06, 0x03, 0x55, 0x04, 0x03], &der(0x0c, b"weir test")]),
    );
    let name = der(0x30, &der(0x31, &cn));
    let validity = der(
        0x30,
        &cat(&[&der(0x17, b"200101000000Z"), &der(0x18, b"99991231235959Z")]),
    );
    // subjectAltName: the IP address 127.0.0.1.
    let san = der(
        0x30,
        &cat(&[
            &der(0x06, &[0x55, 0x1d, 0x11]),
            &der(0x04, &der(0x30, &der(0x87, &[127, 0, 0, 1]))),
        ]),
    );
    let tbs = der(
        0x30,
        &cat(&[
            &der(0xa0, &der(0x02, &[2])),
            &der(0x02, &[1]),
            &ed25519,
            &name,
            &validity,
            &name,
            spki.as_ref(),
            &der(0xa3, &der(0x30, &san)),
        ]),
    );
    let signature = signing
        .choose_scheme(&[SignatureScheme::ED25519])
        .unwrap()
        .sign(&tbs)
        .unwrap();
    let cert = der(
        0x30,
        &cat(&[&tbs, &ed25519, &der(0x03, &cat(&[&[0], &signature]))]),
    );
    (CertificateDer::from(cert), key)
}

fn pem(cert: &CertificateDer<'_>) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn server_config(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    tickets: usize,
) -> Arc<ServerConfig> {
    let mut config = ServerConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    config.send_tls13_tickets = tickets;
    config.enable_secret_extraction = true;
    Arc::new(config)
}

/// A client connected over loopback to a server thread running `server`, through the same
/// configuration the connector builds (the certificate checked, host name included).
fn pair<T: Send + 'static>(
    tickets: usize,
    server: impl FnOnce(TcpStream, Arc<ServerConfig>) -> T + Send + 'static,
) -> (Tls13Stream, JoinHandle<T>) {
    let (cert, key) = self_signed();
    let client_config = tls::client_config_tls13(&TlsConfig {
        ca: Some(PemSource::Inline(Secret::new(pem(&cert)))),
        ..TlsConfig::default()
    })
    .unwrap();
    let config = server_config(cert, key, tickets);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
        tcp.set_nodelay(true).unwrap();
        server(tcp, config)
    });
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = tls::server_name(&addr.to_string()).unwrap();
    match connect(client_config, name, tcp, TIMEOUT) {
        Ok(stream) => (stream, handle),
        Err(HandshakeError::Tls(e)) => panic!("handshake: {e}"),
        Err(HandshakeError::Io(e)) => panic!("handshake: {e}"),
    }
}

/// The length of the record at the start of `b`, when all of it is there.
fn whole_record(b: &[u8]) -> Option<usize> {
    let n = 5 + usize::from(u16::from_be_bytes([*b.get(3)?, *b.get(4)?]));
    (b.len() >= n).then_some(n)
}

/// A server that writes records of its own making after rustls's handshake.
struct Raw {
    tcp: TcpStream,
    kernel: KernelConnection<ServerConnectionData>,
    suite: &'static Tls13CipherSuite,
    tx: Box<dyn MessageEncrypter>,
    tx_seq: u64,
    rx: Box<dyn MessageDecrypter>,
    rx_seq: u64,
    /// Received bytes not processed yet.
    input: Vec<u8>,
    /// KeyUpdate messages received (and acted upon).
    key_updates: usize,
}

impl Raw {
    fn accept(mut tcp: TcpStream, config: Arc<ServerConfig>) -> Self {
        let mut conn = UnbufferedServerConnection::new(config).unwrap();
        let mut incoming = vec![0u8; 1 << 16];
        let mut used = 0;
        let mut outgoing = vec![0u8; 1 << 16];
        let mut out = 0;
        // Records offered to rustls: one at a time, so that it stops at the client's Finished
        // and leaves the records after it (which the client may send at once) to `recv`.
        let mut fed = 0;
        loop {
            let UnbufferedStatus { discard, state } =
                conn.process_tls_records(&mut incoming[..fed]);
            let mut read = false;
            match state.unwrap() {
                ConnectionState::EncodeTlsData(mut s) => {
                    out += s.encode(&mut outgoing[out..]).unwrap()
                }
                ConnectionState::TransmitTlsData(s) => {
                    tcp.write_all(&outgoing[..out]).unwrap();
                    out = 0;
                    s.done();
                }
                ConnectionState::BlockedHandshake | ConnectionState::WriteTraffic(_) => read = true,
                _ => panic!("unexpected state"),
            }
            incoming.copy_within(discard..used, 0);
            used -= discard;
            fed -= discard;
            if read {
                if !conn.is_handshaking() {
                    break;
                }
                if let Some(n) = whole_record(&incoming[fed..used]) {
                    fed += n;
                    continue;
                }
                let n = tcp.read(&mut incoming[used..]).unwrap();
                assert!(n > 0, "EOF during the handshake");
                used += n;
            }
        }
        let (secrets, kernel) = conn.dangerous_into_kernel_connection().unwrap();
        let SupportedCipherSuite::Tls13(suite) = kernel.negotiated_cipher_suite() else {
            panic!("TLS 1.2")
        };
        Self {
            tcp,
            kernel,
            suite,
            tx: encrypter(suite, secrets.tx.1).unwrap(),
            tx_seq: secrets.tx.0,
            rx: decrypter(suite, secrets.rx.1).unwrap(),
            rx_seq: secrets.rx.0,
            input: incoming[..used].to_vec(),
            key_updates: 0,
        }
    }

    /// A record of `payload` and `typ` (the encrypter appends the type byte).
    fn record(&mut self, typ: ContentType, payload: &[u8]) -> Vec<u8> {
        let msg = OutboundPlainMessage {
            typ,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::Single(payload),
        };
        let out = self.tx.encrypt(msg, self.tx_seq).unwrap();
        self.tx_seq += 1;
        out.encode()
    }

    /// A record whose inner plaintext is `inner` and one zero byte (content, type, padding).
    fn seal_inner(&mut self, inner: &[u8]) -> Vec<u8> {
        self.record(ContentType::Unknown(0), inner)
    }

    fn send(&mut self, typ: ContentType, payload: &[u8]) {
        let r = self.record(typ, payload);
        self.tcp.write_all(&r).unwrap();
    }

    fn update_tx(&mut self) {
        let (seq, secrets) = self.kernel.update_tx_secret().unwrap();
        self.tx = encrypter(self.suite, secrets).unwrap();
        self.tx_seq = seq;
    }

    /// Sends a KeyUpdate and switches to the next key.
    fn key_update(&mut self, requested: bool) {
        self.send(ContentType::Handshake, &[24, 0, 0, 1, u8::from(requested)]);
        self.update_tx();
    }

    /// The next record from the client, decrypted (KeyUpdate messages applied); `None` at EOF.
    fn recv(&mut self) -> Option<(ContentType, Vec<u8>)> {
        let mut need = 5;
        loop {
            if self.input.len() >= 5 {
                need = 5 + usize::from(u16::from_be_bytes([self.input[3], self.input[4]]));
            }
            if self.input.len() >= need && need > 5 {
                break;
            }
            let mut chunk = [0u8; 1 << 16];
            let n = self.tcp.read(&mut chunk).unwrap();
            if n == 0 {
                assert!(self.input.is_empty(), "EOF mid-record");
                return None;
            }
            self.input.extend_from_slice(&chunk[..n]);
        }
        let mut record: Vec<u8> = self.input.drain(..need).collect();
        assert_eq!(record[0], 0x17);
        let msg = InboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            &mut record[5..],
        );
        let plain = self.rx.decrypt(msg, self.rx_seq).unwrap();
        self.rx_seq += 1;
        let (typ, payload) = (plain.typ, plain.payload.to_vec());
        if typ == ContentType::Handshake && payload[0] == 24 {
            assert_eq!(payload.len(), 5, "a KeyUpdate ends its record");
            self.key_updates += 1;
            let (seq, secrets) = self.kernel.update_rx_secret().unwrap();
            self.rx = decrypter(self.suite, secrets).unwrap();
            self.rx_seq = seq;
        }
        Some((typ, payload))
    }

    /// Application data from the client until `n` bytes.
    fn recv_data(&mut self, n: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while got.len() < n {
            match self.recv() {
                Some((ContentType::ApplicationData, d)) => got.extend_from_slice(&d),
                Some((ContentType::Handshake, _)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        got
    }
}

fn raw_pair(script: impl FnOnce(&mut Raw) + Send + 'static) -> (Tls13Stream, JoinHandle<Raw>) {
    pair(0, move |tcp, config| {
        let mut raw = Raw::accept(tcp, config);
        script(&mut raw);
        let _ = raw.tcp.shutdown(std::net::Shutdown::Write);
        raw
    })
}

/// Reads until EOF or an error.
fn read_all(stream: &mut Tls13Stream) -> (Vec<u8>, io::Result<()>) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 7000];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (got, Ok(())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return (got, Err(e)),
        }
    }
}

/// The rustls error of a failed read.
fn rustls_error(e: &io::Error) -> &rustls::Error {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .unwrap_or_else(|| panic!("not a TLS error: {e:?}"))
}

/// What the client reads of what the raw server sends with `script` (then it closes).
fn client_reads(script: impl FnOnce(&mut Raw) + Send + 'static) -> (Vec<u8>, io::Result<()>) {
    let (mut client, server) = raw_pair(script);
    let got = read_all(&mut client);
    server.join().unwrap();
    got
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn reads_what_rustls_writes_across_key_updates_and_tickets() {
    const N: usize = 3 << 20;
    let (mut client, server) = pair(2, |tcp, config| {
        let mut s = StreamOwned::new(ServerConnection::new(config).unwrap(), tcp);
        let data = pattern(N);
        let mut at = 0;
        let mut i = 0;
        while at < N {
            let n = [1, 100, 16384, 16385, 70000, 200_000][i % 6].min(N - at);
            s.write_all(&data[at..at + n]).unwrap();
            at += n;
            i += 1;
            // A KeyUpdate that requests one back, every 512 KiB or so.
            if i % 12 == 0 {
                s.conn.refresh_traffic_keys().unwrap();
            }
        }
        s.flush().unwrap();
        // The client's request after the key updates: read with the keys it switched to.
        let mut request = vec![0u8; 100_000];
        s.read_exact(&mut request).unwrap();
        assert_eq!(request, pattern(100_000));
        s.write_all(b"done").unwrap();
        s.conn.send_close_notify();
        s.flush().unwrap();
        s
    });
    let mut got = vec![0u8; N];
    let mut at = 0;
    let mut i = 0;
    while at < N {
        let want = [1, 5, 4096, 16384, 300_000][i % 5].min(N - at);
        let n = client.read(&mut got[at..at + want]).unwrap();
        assert!(n > 0);
        at += n;
        i += 1;
    }
    assert!(
        got == pattern(N),
        "the data read differs from the data written"
    );
    client.write_all(&pattern(100_000)).unwrap();
    client.flush().unwrap();
    let (rest, end) = read_all(&mut client);
    end.unwrap();
    assert_eq!(rest, b"done");
    server.join().unwrap();
}

#[test]
fn records_in_any_split_padding_and_size() {
    let (got, end) = client_reads(|raw| {
        // One record a byte at a time.
        let r = raw.record(ContentType::ApplicationData, b"split");
        for b in r {
            raw.tcp.write_all(&[b]).unwrap();
            thread::sleep(Duration::from_micros(200));
        }
        // Padding, an empty record, the largest record, many records in one write.
        let padded = raw.seal_inner(&cat(&[b"padded", &[0x17], &[0; 200]]));
        raw.tcp.write_all(&padded).unwrap();
        raw.send(ContentType::ApplicationData, b"");
        let largest = raw.record(ContentType::ApplicationData, &vec![b'L'; 1 << 14]);
        assert_eq!(largest.len(), 5 + (1 << 14) + 17);
        raw.tcp.write_all(&largest).unwrap();
        let mut many = Vec::new();
        for i in 0..100u8 {
            many.extend(raw.record(ContentType::ApplicationData, &[i]));
        }
        raw.tcp.write_all(&many).unwrap();
        raw.send(ContentType::Alert, &[1, 0]);
        // Ignored after close_notify.
        raw.send(ContentType::ApplicationData, b"after close_notify");
    });
    end.unwrap();
    let want = cat(&[
        b"split",
        b"padded",
        &vec![b'L'; 1 << 14],
        &(0..100u8).collect::<Vec<_>>(),
    ]);
    assert!(got == want);
}

#[test]
fn bad_records_are_errors() {
    // The outer header: not application data (a handshake record, a change_cipher_spec
    // record, which TLS 1.3 allows only before the server's Finished, an alert in the clear),
    // a length over 2^14 + 256 (refused before its body arrives), a length under a tag.
    for header in [
        [0x16, 3, 3, 0, 40],
        [0x14, 3, 3, 0, 1],
        [0x15, 3, 3, 0, 2],
        [0x17, 3, 3, 0x41, 0x01],
        [0x17, 3, 3, 0xff, 0xff],
        [0x17, 3, 3, 0, 16],
        [0x17, 2, 0, 0, 40],
    ] {
        let (mut client, server) = raw_pair(move |raw| raw.tcp.write_all(&header).unwrap());
        let e = client.read(&mut [0; 10]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(matches!(rustls_error(&e), rustls::Error::General(_)), "{e}");
        server.join().unwrap();
    }
    // A tampered record.
    let (got, end) = client_reads(|raw| {
        raw.send(ContentType::ApplicationData, b"ok");
        let mut r = raw.record(ContentType::ApplicationData, b"tampered");
        r[7] ^= 1;
        raw.tcp.write_all(&r).unwrap();
    });
    assert_eq!(got, b"ok");
    assert_eq!(
        rustls_error(&end.unwrap_err()),
        &rustls::Error::DecryptError
    );
    // A record from the future (sequence number skipped).
    let (got, end) = client_reads(|raw| {
        raw.tx_seq += 1;
        raw.send(ContentType::ApplicationData, b"skipped");
    });
    assert!(got.is_empty());
    assert_eq!(
        rustls_error(&end.unwrap_err()),
        &rustls::Error::DecryptError
    );
    // Inner plaintext: all padding; an encrypted change_cipher_spec; an unknown type; over
    // 2^14 bytes.
    // The last: a record of 2^14 + 256 bytes, the longest the header may announce.
    let cases: [(Vec<u8>, rustls::Error); 3] = [
        (
            vec![0u8; 30],
            PeerMisbehaved::IllegalTlsInnerPlaintext.into(),
        ),
        (
            vec![1, 0x14],
            PeerMisbehaved::IllegalMiddleboxChangeCipherSpec.into(),
        ),
        (
            cat(&[&vec![b'x'; 1 << 14], &[0x17], &[0; 238]]),
            rustls::Error::PeerSentOversizedRecord,
        ),
    ];
    for (inner, want) in cases {
        let (got, end) = client_reads(move |raw| {
            let r = raw.seal_inner(&inner);
            if inner.len() > 1 << 14 {
                assert_eq!(r.len(), 5 + (1 << 14) + 256);
            }
            raw.tcp.write_all(&r).unwrap();
        });
        assert!(got.is_empty());
        assert_eq!(rustls_error(&end.unwrap_err()), &want);
    }
    let (_, end) = client_reads(|raw| raw.send(ContentType::Unknown(99), b"?"));
    assert!(matches!(
        rustls_error(&end.unwrap_err()),
        rustls::Error::General(_)
    ));
    // Alerts: fatal, malformed.
    let (got, end) = client_reads(|raw| {
        raw.send(ContentType::ApplicationData, b"before");
        raw.send(ContentType::Alert, &[2, 40]);
    });
    assert_eq!(got, b"before");
    assert_eq!(
        rustls_error(&end.unwrap_err()),
        &rustls::Error::AlertReceived(AlertDescription::HandshakeFailure)
    );
    let (_, end) = client_reads(|raw| raw.send(ContentType::Alert, &[1, 0, 0]));
    assert!(matches!(
        rustls_error(&end.unwrap_err()),
        rustls::Error::General(_)
    ));
    // Handshake messages a client does not take after the handshake, a malformed KeyUpdate,
    // a malformed ticket, a message over 64 KiB.
    for message in [
        vec![13, 0, 0, 0],
        vec![24, 0, 0, 1, 2],
        vec![24, 0, 0, 2, 0, 0],
        vec![4, 0, 0, 3, 1, 2, 3],
        vec![4, 1, 0, 1],
    ] {
        let (_, end) = client_reads(move |raw| raw.send(ContentType::Handshake, &message));
        let e = end.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}

#[test]
fn eof_without_close_notify_is_an_error() {
    // Mid-header, mid-record, and between records: truncation is never a clean end.
    for cut in [3, 20, usize::MAX] {
        let (got, end) = client_reads(move |raw| {
            raw.send(ContentType::ApplicationData, b"whole");
            let r = raw.record(ContentType::ApplicationData, b"cut short");
            if cut < r.len() {
                raw.tcp.write_all(&r[..cut]).unwrap();
            }
        });
        assert_eq!(got, b"whole");
        assert_eq!(end.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }
}

#[test]
fn takes_tickets_and_key_updates_split_across_records() {
    // A NewSessionTicket in three records; two messages in one record; KeyUpdate requested.
    let ticket = TICKET;
    let (mut client, server) = raw_pair(move |raw| {
        raw.send(ContentType::Handshake, &ticket[..2]);
        raw.send(ContentType::Handshake, &ticket[2..10]);
        raw.send(ContentType::Handshake, &ticket[10..]);
        raw.send(ContentType::Handshake, &cat(&[ticket, ticket]));
        raw.send(ContentType::ApplicationData, b"one");
        raw.key_update(true);
        raw.send(ContentType::ApplicationData, b"two");
        assert_eq!(raw.recv_data(5), b"three");
        assert_eq!(raw.key_updates, 1);
        raw.key_update(false);
        raw.send(ContentType::ApplicationData, b"four");
        raw.send(ContentType::Alert, &[1, 0]);
    });
    let mut buf = [0u8; 3];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"one");
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"two");
    client.write_all(b"three").unwrap();
    let (rest, end) = read_all(&mut client);
    end.unwrap();
    assert_eq!(rest, b"four");
    server.join().unwrap();
}

#[test]
fn a_send_key_is_updated_at_its_confidentiality_limit() {
    // The suites rustls prefers are AES-GCM: 2^24 records per key. Start just under it.
    let (mut client, server) = raw_pair(|raw| {
        let limit = raw.suite.common.confidentiality_limit;
        assert_eq!(limit, 1 << 24);
        raw.rx_seq = limit - 2;
        assert_eq!(raw.recv_data(5 * 20_000), pattern(5 * 20_000));
        assert_eq!(raw.key_updates, 1);
        // A KeyUpdate asked for is answered with the new key, which counts from 0.
        raw.key_update(true);
        raw.send(ContentType::ApplicationData, b"ok");
        assert_eq!(raw.recv_data(2), b"ok");
        assert_eq!(raw.key_updates, 2);
        assert_eq!(raw.rx_seq, 1);
    });
    client.tx_seq = (1 << 24) - 2;
    // Five records: two under the old key, the KeyUpdate, three under the new one.
    client.write_all(&pattern(5 * 20_000)[..]).unwrap();
    let mut buf = [0u8; 2];
    client.read_exact(&mut buf).unwrap();
    client.write_all(&buf).unwrap();
    server.join().unwrap();
}

/// lifetime 60 s, age_add, nonce, ticket, no extensions.
const TICKET: &[u8] = &[
    4, 0, 0, 18, 0, 0, 0, 60, 0, 0, 0, 1, 1, 0, 0, 4, 1, 2, 3, 4, 0, 0,
];
const KEY_UPDATE: &[u8] = &[24, 0, 0, 1, 0];

#[test]
fn a_key_update_ends_its_record() {
    // Last in its record: fine.
    let (got, end) = client_reads(|raw| {
        raw.send(ContentType::Handshake, &cat(&[TICKET, KEY_UPDATE]));
        raw.update_tx();
        raw.send(ContentType::ApplicationData, b"after");
        raw.send(ContentType::Alert, &[1, 0]);
    });
    end.unwrap();
    assert_eq!(got, b"after");
    // A message after it in the same record, whole or in part.
    for split in [TICKET.len(), 2] {
        let (got, end) = client_reads(move |raw| {
            raw.send(
                ContentType::Handshake,
                &cat(&[KEY_UPDATE, &TICKET[..split]]),
            );
            raw.update_tx();
            if split < TICKET.len() {
                raw.send(ContentType::Handshake, &TICKET[split..]);
            }
            raw.send(ContentType::ApplicationData, b"after");
        });
        assert!(got.is_empty());
        assert_eq!(
            rustls_error(&end.unwrap_err()),
            &PeerMisbehaved::KeyEpochWithPendingFragment.into()
        );
    }
}

#[test]
fn nothing_comes_between_the_records_of_a_handshake_message() {
    for between in [ContentType::ApplicationData, ContentType::Alert] {
        let (got, end) = client_reads(move |raw| {
            raw.send(ContentType::Handshake, &TICKET[..5]);
            match between {
                ContentType::Alert => raw.send(between, &[1, 0]),
                _ => raw.send(between, b"between"),
            }
            raw.send(ContentType::Handshake, &TICKET[5..]);
            raw.send(ContentType::Alert, &[1, 0]);
        });
        assert!(got.is_empty());
        assert_eq!(
            rustls_error(&end.unwrap_err()),
            &PeerMisbehaved::MessageInterleavedWithHandshakeMessage.into()
        );
    }
}

#[test]
fn key_updates_without_data_are_limited() {
    // 32 in a row, twice, are answered; a 33rd in a row is refused.
    let (got, end) = client_reads(|raw| {
        for round in 0..2 {
            for i in 0..32 {
                raw.key_update(i % 2 == 0);
            }
            raw.send(ContentType::ApplicationData, &[round]);
        }
        for _ in 0..33 {
            raw.key_update(true);
        }
        raw.send(ContentType::ApplicationData, b"never");
    });
    assert_eq!(got, [0, 1]);
    assert_eq!(
        rustls_error(&end.unwrap_err()),
        &PeerMisbehaved::TooManyKeyUpdateRequests.into()
    );
}

#[test]
fn user_canceled_is_not_an_error() {
    // Java's SSLSocket closes a TLS 1.3 connection with user_canceled, then close_notify.
    let (got, end) = client_reads(|raw| {
        raw.send(ContentType::ApplicationData, b"data");
        raw.send(ContentType::Alert, &[1, 90]);
        raw.send(ContentType::Alert, &[1, 0]);
    });
    end.unwrap();
    assert_eq!(got, b"data");
    // Not without end, though.
    let (got, end) = client_reads(|raw| {
        for _ in 0..5 {
            raw.send(ContentType::Alert, &[1, 90]);
        }
        raw.send(ContentType::ApplicationData, b"never");
    });
    assert!(got.is_empty());
    assert_eq!(
        rustls_error(&end.unwrap_err()),
        &PeerMisbehaved::TooManyWarningAlertsReceived.into()
    );
}

#[test]
fn records_right_after_the_servers_finished_are_the_record_layers() {
    // A server may write right after its Finished ("half-RTT" data, or a ticket): in the same
    // read as the Finished, the record goes to the record layer, not to rustls.
    let (mut client, server) = pair(0, |mut tcp, config| {
        let mut config = Arc::unwrap_or_clone(config);
        config.send_half_rtt_data = true;
        let mut conn = ServerConnection::new(Arc::new(config)).unwrap();
        conn.writer().write_all(b"half-RTT").unwrap();
        while !conn.wants_write() {
            conn.read_tls(&mut tcp).unwrap();
            conn.process_new_packets().unwrap();
        }
        let mut flight = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut flight).unwrap();
        }
        tcp.write_all(&flight).unwrap();
        let mut s = StreamOwned::new(conn, tcp);
        s.write_all(b", then more").unwrap();
        s.conn.send_close_notify();
        s.flush().unwrap();
        s
    });
    let (got, end) = read_all(&mut client);
    end.unwrap();
    assert_eq!(got, b"half-RTT, then more");
    server.join().unwrap();
}

#[test]
fn an_answer_that_is_not_tls_is_reported_at_once() {
    for answer in [
        &b"HTTP/1.1 400 Bad Request\r\n\r\n"[..],
        &[0, 0, 0, 8, 0, 0, 0, 1],
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut tcp, _) = listener.accept().unwrap();
            assert!(tcp.read(&mut [0u8; 4096]).unwrap() > 0);
            tcp.write_all(answer).unwrap();
            // Open until the client gives up.
            let _ = tcp.read(&mut [0u8; 4096]);
        });
        let (cert, _) = self_signed();
        let config = tls::client_config_tls13(&TlsConfig {
            ca: Some(PemSource::Inline(Secret::new(pem(&cert)))),
            ..TlsConfig::default()
        })
        .unwrap();
        let tcp = TcpStream::connect(addr).unwrap();
        let name = tls::server_name(&addr.to_string()).unwrap();
        let started = Instant::now();
        match connect(config, name, tcp, TIMEOUT) {
            Err(HandshakeError::Tls(rustls::Error::InvalidMessage(_))) => {}
            Err(HandshakeError::Tls(e)) => panic!("{e}"),
            Err(HandshakeError::Io(e)) => panic!("{e}"),
            Ok(_) => panic!("a handshake with no server"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        server.join().unwrap();
    }
}
