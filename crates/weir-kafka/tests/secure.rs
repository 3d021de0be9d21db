//! TLS, mutual TLS and SASL against the secure listeners of a real broker (`scripts/kafka.sh
//! start --secure`, which `scripts/test.sh` runs and whose addresses it exports; see
//! [`Secure::from_env`]). Every mechanism reads and produces; every fault of the security
//! options is checked for its message.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read as _, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{drain, serial, topic};
use weir_kafka::{
    create_topic_with, parse_properties, Consumer, ConsumerConfig, Error, PollStatus, Producer,
    ProducerConfig, SecurityConfig, StartupMode,
};

/// The secure listeners and the files of their PKI, from the `WEIR_KAFKA_*` variables that
/// `scripts/kafka.sh env` prints.
pub struct Secure {
    pub plaintext: String,
    pub ssl: String,
    pub mtls: String,
    pub sasl_plaintext: String,
    pub sasl_ssl: String,
    pub reauth: String,
    pub expired: String,
    pub wrong_host: String,
    pub tls12: String,
    pub ca: String,
    pub other_ca: String,
    pub client_cert: String,
    pub client_key: String,
    pub client_key_encrypted: String,
    pub client_key_password: String,
    pub user: String,
    pub password: String,
}

impl Secure {
    /// The listeners, or `None` (with a notice) when `WEIR_KAFKA_SASL_SSL` is not set. With it
    /// set, every listener must accept connections.
    pub fn from_env(test: &str) -> Option<Self> {
        if std::env::var("WEIR_KAFKA_SASL_SSL").is_err() {
            let _ = writeln!(
                std::io::stderr(),
                "NOTICE: {test} skipped: WEIR_KAFKA_SASL_SSL is not set (scripts/test.sh starts a \
                 broker with secure listeners and exports them; or run scripts/kafka.sh start \
                 --secure and `eval \"$(scripts/kafka.sh env)\"`)"
            );
            return None;
        }
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("WEIR_KAFKA_SASL_SSL is set but {name} is not (see scripts/kafka.sh env)")
            })
        };
        let s = Self {
            plaintext: var("WEIR_KAFKA_BOOTSTRAP"),
            ssl: var("WEIR_KAFKA_SSL"),
            mtls: var("WEIR_KAFKA_MTLS"),
            sasl_plaintext: var("WEIR_KAFKA_SASL_PLAINTEXT"),
            sasl_ssl: var("WEIR_KAFKA_SASL_SSL"),
            reauth: var("WEIR_KAFKA_REAUTH"),
            expired: var("WEIR_KAFKA_SSL_EXPIRED"),
            wrong_host: var("WEIR_KAFKA_SSL_WRONG_HOST"),
            tls12: var("WEIR_KAFKA_SSL_TLS12"),
            ca: var("WEIR_KAFKA_CA"),
            other_ca: var("WEIR_KAFKA_OTHER_CA"),
            client_cert: var("WEIR_KAFKA_CLIENT_CERT"),
            client_key: var("WEIR_KAFKA_CLIENT_KEY"),
            client_key_encrypted: var("WEIR_KAFKA_CLIENT_KEY_ENCRYPTED"),
            client_key_password: var("WEIR_KAFKA_CLIENT_KEY_PASSWORD"),
            user: var("WEIR_KAFKA_SASL_USER"),
            password: var("WEIR_KAFKA_SASL_PASSWORD"),
        };
        for addr in [
            &s.plaintext,
            &s.ssl,
            &s.mtls,
            &s.sasl_plaintext,
            &s.sasl_ssl,
            &s.reauth,
            &s.expired,
            &s.wrong_host,
            &s.tls12,
        ] {
            let sa = addr.parse().expect("a 127.0.0.1:PORT address");
            assert!(
                std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(5)).is_ok(),
                "{addr} is exported but no broker accepts connections there"
            );
        }
        Some(s)
    }
}

/// A security configuration from option pairs, through the parser the engine uses.
fn security(pairs: &[(&str, &str)]) -> SecurityConfig {
    SecurityConfig::from_properties(pairs.iter().copied()).expect("valid security options")
}

/// An unsecured JWT (`alg: none`) as Kafka's default OAUTHBEARER validator accepts it.
pub fn unsecured_jwt(sub: &str, lifetime: Duration) -> String {
    use base64::Engine as _;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    format!(
        "{}.{}.",
        enc(r#"{"alg":"none"}"#),
        enc(&format!(
            r#"{{"sub":"{sub}","iat":{},"exp":{}}}"#,
            now as i64,
            (now + lifetime.as_secs_f64()) as i64
        ))
    )
}

/// Creates a topic, writes `n` keyed records through `security` on `addr`, reads them back
/// through the same listener and checks every record once, in order per partition.
fn round_trip(addr: &str, security: &SecurityConfig, what: &str) {
    let t = topic(&format!("secure-{}", what.replace([' ', '/'], "-")));
    let brokers = vec![addr.to_string()];
    create_topic_with(&brokers, security, &t, 2, 1, &[], false)
        .unwrap_or_else(|e| panic!("{what}: create_topic_with: {e}"));
    let mut p = Producer::connect(&ProducerConfig {
        brokers: brokers.clone(),
        topic: t.clone(),
        security: security.clone(),
        batch_bytes: 8 << 10,
        ..ProducerConfig::default()
    })
    .unwrap_or_else(|e| panic!("{what}: producer: {e}"));
    let n = 2_000;
    for i in 0..n {
        p.send(
            Some(i % 2),
            Some(format!("k{i}").as_bytes()),
            format!("{what} {i}").as_bytes(),
        )
        .unwrap();
    }
    p.flush().unwrap_or_else(|e| panic!("{what}: flush: {e}"));
    let mut c = Consumer::connect(&ConsumerConfig {
        brokers,
        topic: t.clone(),
        security: security.clone(),
        ..ConsumerConfig::default()
    })
    .unwrap_or_else(|e| panic!("{what}: consumer: {e}"));
    let got = drain(&mut c);
    for part in 0..2 {
        let recs = &got[&part];
        assert_eq!(recs.len(), n as usize / 2, "{what}: partition {part}");
        for (k, r) in recs.iter().enumerate() {
            let i = part as usize + 2 * k;
            assert_eq!(r.offset, k as i64, "{what}");
            assert_eq!(r.value.as_deref(), Some(format!("{what} {i}").as_bytes()));
        }
    }
}

#[test]
fn tls_and_mutual_tls_read_and_produce() {
    let _serial = serial();
    let Some(s) = Secure::from_env("tls_and_mutual_tls_read_and_produce") else {
        return;
    };
    let ssl = [("security.protocol", "SSL"), ("ssl.ca.location", &s.ca)];
    round_trip(&s.ssl, &security(&ssl), "ssl");
    // A broker that speaks TLS 1.2 only: rustls negotiates TLS 1.2 with it.
    round_trip(&s.tls12, &security(&ssl), "ssl tls12");
    // The CA given inline, as PEM text.
    let ca_pem = std::fs::read_to_string(&s.ca).unwrap();
    round_trip(
        &s.ssl,
        &security(&[("security.protocol", "SSL"), ("ssl.ca.pem", &ca_pem)]),
        "ssl inline ca",
    );
    let mtls = [
        ("security.protocol", "SSL"),
        ("ssl.ca.location", &s.ca),
        ("ssl.certificate.location", &s.client_cert),
        ("ssl.key.location", &s.client_key),
    ];
    round_trip(&s.mtls, &security(&mtls), "mtls");
    round_trip(
        &s.mtls,
        &security(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", &s.ca),
            ("ssl.certificate.location", &s.client_cert),
            ("ssl.key.location", &s.client_key_encrypted),
            ("ssl.key.password", &s.client_key_password),
        ]),
        "mtls encrypted key",
    );
    // Host name checking off: a certificate for another name is accepted, its chain still
    // checked.
    round_trip(
        &s.wrong_host,
        &security(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", &s.ca),
            ("ssl.endpoint.identification.algorithm", "none"),
        ]),
        "ssl any host",
    );
}

#[test]
fn every_sasl_mechanism_reads_and_produces() {
    let _serial = serial();
    let Some(s) = Secure::from_env("every_sasl_mechanism_reads_and_produces") else {
        return;
    };
    let token = unsecured_jwt("weir-oauth", Duration::from_secs(3600));
    for (addr, protocol) in [
        (&s.sasl_plaintext, "SASL_PLAINTEXT"),
        (&s.sasl_ssl, "SASL_SSL"),
    ] {
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] {
            let mut pairs = vec![
                ("security.protocol", protocol),
                ("sasl.mechanism", mechanism),
                ("ssl.ca.location", s.ca.as_str()),
            ];
            if mechanism == "OAUTHBEARER" {
                pairs.push(("sasl.oauthbearer.token", &token));
            } else {
                pairs.push(("sasl.username", &s.user));
                pairs.push(("sasl.password", &s.password));
            }
            round_trip(addr, &security(&pairs), &format!("{protocol} {mechanism}"));
        }
    }
    // A Java client's properties file, as `--kafka-config FILE` reads it.
    let file = format!(
        "# as for kafka-console-consumer --command-config\nbootstrap.servers={}\n\
         security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.ca.location={}\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n    \
         username=\"{}\" password=\"{}\";\n",
        s.sasl_ssl, s.ca, s.user, s.password
    );
    let props = parse_properties(&file).unwrap();
    let sec = SecurityConfig::from_properties(props).unwrap();
    round_trip(&s.sasl_ssl, &sec, "properties file");
}

/// A small OIDC token endpoint (client-credentials grant) on 127.0.0.1, in Python: it checks
/// the client's Basic credentials and issues unsecured JWTs of `lifetime_s` seconds; GET /count
/// says how many it issued.
pub struct TokenEndpoint {
    child: Child,
    pub url: String,
    port: u16,
}

const TOKEN_ENDPOINT: &str = r#"
import base64, http.server, json, sys, time
lifetime = int(sys.argv[1])
expected = "Basic " + base64.b64encode(b"weir-client:client-s3cret").decode()
issued = 0
def b64(s):
    return base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.reply(200, {"issued": issued})
    def do_POST(self):
        global issued
        form = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        if self.headers.get("Authorization") != expected:
            return self.reply(401, {"error": "invalid_client", "error_description": "bad client credentials"})
        if "grant_type=client_credentials" not in form:
            return self.reply(400, {"error": "unsupported_grant_type"})
        now = int(time.time())
        jwt = b64('{"alg":"none"}') + "." + b64(json.dumps({"sub": "weir-oidc", "iat": now, "exp": now + lifetime})) + "."
        issued += 1
        self.reply(200, {"access_token": jwt, "token_type": "bearer", "expires_in": lifetime})
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

impl TokenEndpoint {
    pub fn start(lifetime_s: u32) -> Self {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(TOKEN_ENDPOINT)
            .arg(lifetime_s.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 for the token endpoint");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().expect("the endpoint's port");
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/token"),
            port,
        }
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> u64 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.write_all(b"GET /count HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        let json = &body[body.find('{').unwrap()..];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["issued"].as_u64().unwrap()
    }
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn oidc<'a>(url: &'a str, secret: &'a str) -> Vec<(&'static str, &'a str)> {
    vec![
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.method", "oidc"),
        ("sasl.oauthbearer.client.id", "weir-client"),
        ("sasl.oauthbearer.client.secret", secret),
        ("sasl.oauthbearer.token.endpoint.url", url),
        ("sasl.oauthbearer.scope", "kafka"),
    ]
}

#[test]
fn oidc_client_credentials_read_and_produce() {
    let _serial = serial();
    let Some(s) = Secure::from_env("oidc_client_credentials_read_and_produce") else {
        return;
    };
    let endpoint = TokenEndpoint::start(3600);
    let mut pairs = oidc(&endpoint.url, "client-s3cret");
    pairs.push(("security.protocol", "SASL_SSL"));
    pairs.push(("ssl.ca.location", &s.ca));
    round_trip(&s.sasl_ssl, &security(&pairs), "oidc");
    // One token per client (topic creation, producer, consumer), cached while fresh: not one
    // per connection, though each client opens several.
    assert_eq!(endpoint.issued(), 3);

    let mut pairs = oidc(&endpoint.url, "wrong-s3cret");
    pairs.push(("security.protocol", "SASL_SSL"));
    pairs.push(("ssl.ca.location", &s.ca));
    let e = connect_err(&s.sasl_ssl, &security(&pairs));
    let text = one_line(&e);
    assert!(matches!(e, Error::Token { .. }), "{text}");
    assert!(
        text.contains("401") && text.contains("invalid_client"),
        "{text}"
    );
    assert!(text.contains(&endpoint.url), "{text}");
    assert!(!text.contains("wrong-s3cret"), "{text}");
}

/// The error of connecting a consumer to `addr` with `security` (on a topic that need not
/// exist: every failure here comes before the topic is looked up).
fn connect_err(addr: &str, security: &SecurityConfig) -> Error {
    match Consumer::connect(&ConsumerConfig {
        brokers: vec![addr.to_string()],
        topic: "any".into(),
        security: security.clone(),
        request_timeout: Duration::from_secs(10),
        ..ConsumerConfig::default()
    }) {
        Ok(_) => panic!("connecting to {addr} with {security:?} succeeded"),
        Err(e) => e,
    }
}

/// The error's message, checked to be one line (and shown in the test log, so the messages
/// can be read there).
fn one_line(e: &Error) -> String {
    let text = e.to_string();
    assert!(!text.contains('\n'), "not one line: {text}");
    let _ = writeln!(std::io::stderr(), "weir-kafka error message: {text}");
    text
}

#[test]
fn security_faults_are_clear_single_line_errors() {
    let _serial = serial();
    let Some(s) = Secure::from_env("security_faults_are_clear_single_line_errors") else {
        return;
    };
    // A wrong password: authentication failed, for which user, mechanism and broker; the
    // password never shows.
    for (addr, protocol) in [
        (&s.sasl_plaintext, "SASL_PLAINTEXT"),
        (&s.sasl_ssl, "SASL_SSL"),
    ] {
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            let e = connect_err(
                addr,
                &security(&[
                    ("security.protocol", protocol),
                    ("sasl.mechanism", mechanism),
                    ("sasl.username", &s.user),
                    ("sasl.password", "not-the-password"),
                    ("ssl.ca.location", &s.ca),
                ]),
            );
            let text = one_line(&e);
            assert!(matches!(e, Error::Authentication { .. }), "{text}");
            for part in [addr.as_str(), mechanism, &format!("user '{}'", s.user)] {
                assert!(text.contains(part), "{text} lacks {part}");
            }
            assert!(text.contains("authentication failed"), "{text}");
            assert!(!text.contains("not-the-password"), "{text}");
        }
    }
    // A token the broker refuses (not a JWT): its own words come back.
    let e = connect_err(
        &s.sasl_plaintext,
        &security(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.token", "not-a-jwt"),
        ]),
    );
    let text = one_line(&e);
    assert!(matches!(e, Error::Authentication { .. }), "{text}");
    assert!(
        text.contains("OAUTHBEARER") && text.contains(&s.sasl_plaintext),
        "{text}"
    );
    assert!(!text.contains("not-a-jwt"), "{text}");

    // A mechanism the broker does not enable: the list it offers.
    let e = connect_err(
        &s.reauth,
        &security(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", &s.user),
            ("sasl.password", &s.password),
        ]),
    );
    let text = one_line(&e);
    match &e {
        Error::MechanismNotEnabled { offered, .. } => {
            let mut offered = offered.clone();
            offered.sort();
            assert_eq!(
                offered,
                ["OAUTHBEARER", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                "{text}"
            );
        }
        other => panic!("expected MechanismNotEnabled, got {other}"),
    }
    assert!(
        text.contains("'sasl.mechanism'") && text.contains(&s.reauth),
        "{text}"
    );

    // Certificates: untrusted, expired, for another host; which broker and why.
    let tls = |addr: &str, ca: &str| {
        let e = connect_err(
            addr,
            &security(&[("security.protocol", "SSL"), ("ssl.ca.location", ca)]),
        );
        let text = one_line(&e);
        assert!(matches!(e, Error::Tls { .. }), "{text}");
        assert!(text.contains(addr), "{text}");
        text
    };
    let text = tls(&s.ssl, &s.other_ca);
    assert!(
        text.contains("not trusted") && text.contains("'ssl.ca.location'"),
        "{text}"
    );
    let text = tls(&s.expired, &s.ca);
    assert!(text.contains("expired"), "{text}");
    let text = tls(&s.wrong_host, &s.ca);
    assert!(
        text.contains("wrong-host.invalid") && text.contains("127.0.0.1"),
        "{text}"
    );
    // Mutual TLS without a client certificate.
    let text = tls(&s.mtls, &s.ca);
    assert!(text.contains("client certificate"), "{text}");

    // The wrong protocol for the listener, either way: a hint naming 'security.protocol'.
    let cases: [(&str, &[(&str, &str)]); 5] = [
        // TLS spoken to a plaintext port.
        (
            &s.plaintext,
            &[("security.protocol", "SSL"), ("ssl.ca.location", &s.ca)],
        ),
        // Plaintext to a TLS port.
        (&s.ssl, &[]),
        // SASL to a listener without it.
        (
            &s.plaintext,
            &[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", "u"),
                ("sasl.password", "p"),
            ],
        ),
        // No SASL to a listener that requires it.
        (&s.sasl_plaintext, &[]),
        // SASL_PLAINTEXT to SASL_SSL.
        (
            &s.sasl_ssl,
            &[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", &s.user),
                ("sasl.password", &s.password),
            ],
        ),
    ];
    for (addr, pairs) in cases {
        let e = connect_err(addr, &security(pairs));
        let text = one_line(&e);
        assert!(
            text.contains("'security.protocol'"),
            "{addr} {pairs:?}: {text}"
        );
        assert!(text.contains(addr), "{text}");
    }

    // Files that cannot be used fail at connect, naming the option.
    let e = connect_err(
        &s.ssl,
        &security(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "/nonexistent/ca.pem"),
        ]),
    );
    assert!(one_line(&e).contains("'ssl.ca.location'"), "{e}");
    let e = connect_err(
        &s.mtls,
        &security(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", &s.ca),
            ("ssl.certificate.location", &s.client_cert),
            ("ssl.key.location", &s.client_key_encrypted),
            ("ssl.key.password", "wrong-key-password"),
        ]),
    );
    let text = one_line(&e);
    assert!(
        text.contains("'ssl.key.location'") && text.contains("ssl.key.password"),
        "{text}"
    );
    assert!(!text.contains("wrong-key-password"), "{text}");
}

/// `(offset, value)` of the records read, by partition.
type Read = BTreeMap<i32, Vec<(i64, String)>>;

/// Reads `n` records `r<i>` written at a steady pace by a producer thread, through an
/// unbounded consumer; returns the records by partition and the consumer's re-authentications.
fn read_while_writing(
    addr: &str,
    consumer: &SecurityConfig,
    producer: &SecurityConfig,
    n: usize,
    pace: Duration,
    what: &str,
) -> (Read, u64, u64) {
    let t = topic(what);
    let brokers = vec![addr.to_string()];
    create_topic_with(&brokers, producer, &t, 2, 1, &[], false).unwrap();
    let mut c = Consumer::connect(&ConsumerConfig {
        brokers: brokers.clone(),
        topic: t.clone(),
        security: consumer.clone(),
        bounded: false,
        startup: StartupMode::Earliest,
        ..ConsumerConfig::default()
    })
    .unwrap_or_else(|e| panic!("{what}: consumer: {e}"));
    let writer = {
        let (brokers, t, producer) = (brokers.clone(), t.clone(), producer.clone());
        std::thread::spawn(move || {
            let mut p = Producer::connect(&ProducerConfig {
                brokers,
                topic: t,
                security: producer,
                ..ProducerConfig::default()
            })?;
            for i in 0..n {
                p.send(Some((i % 2) as i32), None, format!("r{i}").as_bytes())?;
                if i % 10 == 9 {
                    p.flush()?;
                    std::thread::sleep(pace);
                }
            }
            p.flush()
        })
    };
    let mut got = Read::new();
    let mut total = 0;
    let mut idle = 0;
    while total < n {
        let status = c
            .poll(Duration::from_millis(200), |r| {
                got.entry(r.partition).or_default().push((
                    r.offset,
                    String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                ));
                Ok::<(), std::io::Error>(())
            })
            .unwrap_or_else(|e| panic!("{what}: poll: {e}"));
        match status {
            PollStatus::Records(k) => {
                total += k;
                idle = 0;
            }
            _ => {
                idle += 1;
                assert!(idle < 600, "{what}: no record for two minutes");
            }
        }
        if total < n && idle > 10 && writer.is_finished() {
            break; // the producer failed: say how below
        }
    }
    writer
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: producer: {e}"));
    assert_eq!(total, n, "{what}: records read");
    // Nothing more arrives: no record was handed out twice.
    for _ in 0..3 {
        let status = c
            .poll(
                Duration::from_millis(200),
                |r| -> Result<(), std::io::Error> {
                    panic!("{what}: an extra record at {}/{}", r.partition, r.offset)
                },
            )
            .unwrap();
        assert_eq!(status, PollStatus::Idle);
    }
    (got, c.reauthentications(), c.retries())
}

fn check_exactly_once(got: &Read, n: usize, what: &str) {
    for part in 0..2 {
        let recs = &got[&part];
        assert_eq!(recs.len(), n / 2, "{what}: partition {part}");
        for (k, (offset, value)) in recs.iter().enumerate() {
            assert_eq!(
                *offset, k as i64,
                "{what}: gap or repeat in partition {part}"
            );
            assert_eq!(value, &format!("r{}", part as usize + 2 * k), "{what}");
        }
    }
}

/// On the listener with a short `connections.max.reauth.ms`, a consumer (and the producer
/// feeding it) renew their sessions several times while reading, with no record lost or
/// repeated.
#[test]
fn reauthentication_keeps_reading_without_loss_or_repeat() {
    let _serial = serial();
    let Some(s) = Secure::from_env("reauthentication_keeps_reading_without_loss_or_repeat") else {
        return;
    };
    let reauth_ms: u64 = std::env::var("WEIR_KAFKA_REAUTH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let sec = security(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", &s.user),
        ("sasl.password", &s.password),
    ]);
    // Writing takes about three session lifetimes: 100 pauses of reauth_ms / 33.
    let n = 1_000;
    let (got, reauths, retries) = read_while_writing(
        &s.reauth,
        &sec,
        &sec,
        n,
        Duration::from_millis(reauth_ms / 33),
        "reauth",
    );
    check_exactly_once(&got, n, "reauth");
    // Renewed in place: no connection was closed by the broker for an expired session.
    assert_eq!(retries, 0, "the consumer lost connections");
    assert!(
        reauths >= 2,
        "the consumer re-authenticated {reauths} times over three session lifetimes"
    );
}

/// OAUTHBEARER tokens that expire in the middle of the run are renewed: the consumer's from
/// the OIDC endpoint, the producer's from a token file a thread keeps rewriting. The broker
/// ends each session when its token expires, so reading on proves renewal.
#[test]
fn expiring_tokens_are_renewed_without_loss_or_repeat() {
    let _serial = serial();
    let Some(s) = Secure::from_env("expiring_tokens_are_renewed_without_loss_or_repeat") else {
        return;
    };
    // Tokens live 3 s, less than the listener's session limit.
    let lifetime = 3;
    let endpoint = TokenEndpoint::start(lifetime);
    let mut pairs = oidc(&endpoint.url, "client-s3cret");
    pairs.push(("security.protocol", "SASL_PLAINTEXT"));
    let consumer = security(&pairs);

    let dir = std::env::temp_dir().join(topic("weir-token-file"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    let write_token = move |file: &std::path::Path| {
        let tmp = file.with_extension("tmp");
        std::fs::write(
            &tmp,
            unsecured_jwt("weir-file", Duration::from_secs(lifetime.into())),
        )
        .unwrap();
        std::fs::rename(&tmp, file).unwrap();
    };
    write_token(&file);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renewer = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                write_token(&file);
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let producer = security(&[
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.token.file", file.to_str().unwrap()),
    ]);
    let n = 1_000;
    // About 10 s of writing: over three token lifetimes.
    let (got, reauths, retries) = read_while_writing(
        &s.reauth,
        &consumer,
        &producer,
        n,
        Duration::from_millis(100),
        "token-expiry",
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    renewer.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    check_exactly_once(&got, n, "token expiry");
    assert_eq!(retries, 0, "the consumer lost connections");
    assert!(reauths >= 2, "{reauths} re-authentications");
    let issued = endpoint.issued();
    assert!(
        issued >= 3,
        "the endpoint issued {issued} tokens over three lifetimes"
    );
}
