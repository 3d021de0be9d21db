//! Logs: `tracing` events on standard error, one line each, as text or JSON.
//!
//! Which events: `RUST_LOG` when it is set (tracing's `target=level,...` syntax: `debug`,
//! `weir_kafka=debug,info`); otherwise `--log-level` for weir's own crates and `warn` for the
//! libraries under them. `RUST_LOG` wins because it is the finer tool (per-target levels),
//! as `RUST_LOG` wins over defaults in other Rust programs. The SQL parser is held at `warn`
//! whatever is asked: at `debug` it echoes the statement text, and a `CREATE SOURCE` may hold
//! a password literally. weir-kafka's `log` records (retries, leader moves, TLS fallbacks) are
//! bridged into the same output under their own target. Nothing is logged per message.

use std::fmt;
use std::str::FromStr;

use anyhow::{Context, Result};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The target of events bridged from the `log` crate; the record's own target is in the
/// `log_target` field and shown as the event's target.
const BRIDGE: &str = "weir_log_bridge";

/// weir's own crates, which `--log-level` sets.
const OWN: [&str; 5] = [
    "weir",
    "weir_kafka",
    "weir_dedup",
    "weir_codec",
    "weir_testdata",
];

/// Crates whose debug output can carry statement text (and so a secret): never below `warn`.
const QUIET: [&str; 1] = ["sqlparser"];

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// `2026-11-24T08:00:00.123Z  WARN weir_kafka::consumer::pipeline: message key=value`
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, `fields`.
    Json,
}

/// The filter: `RUST_LOG` if set and not empty, else `level` for weir's crates and `warn` for
/// the rest; the quiet crates capped at `warn`.
pub(crate) fn filter(level: LevelFilter, rust_log: Option<&str>) -> Result<Targets> {
    let mut targets = match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(spec) => Targets::from_str(spec).with_context(|| {
            format!("RUST_LOG='{spec}' is not a filter; write for example 'info' or 'warn,weir_kafka=debug'")
        })?,
        None => OWN.iter().fold(
            Targets::new().with_default(LevelFilter::WARN.min(level)),
            |t, c| t.with_target(*c, level),
        ),
    };
    // delta-rs's kernel logs an error when it looks for a table that does not exist yet, which
    // is how the `delta` sink finds out it must create one; its real failures reach weir as
    // errors. Off unless RUST_LOG names it.
    if !targets.iter().any(|(t, _)| t.starts_with("buoyant_kernel")) {
        targets = targets.with_target("buoyant_kernel::snapshot::builder", LevelFilter::OFF);
    }
    for c in QUIET {
        let asked = targets.iter().find(|(t, _)| *t == c).map(|(_, l)| l);
        let capped = asked
            .unwrap_or_else(|| targets.default_level().unwrap_or(LevelFilter::OFF))
            .min(LevelFilter::WARN);
        targets = targets.with_target(c, capped);
    }
    Ok(targets)
}

/// Installs the subscriber and the `log` bridge. Called once, before anything logs.
pub(crate) fn init(level: LevelFilter, format: LogFormat) -> Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let targets = filter(level, rust_log.as_deref())?;
    // The most verbose level any target asks for, so `log` macros below it cost nothing.
    let max = targets
        .iter()
        .map(|(_, l)| l)
        .chain(targets.default_level())
        .max()
        .unwrap_or(LevelFilter::OFF);
    let bridge = LogBridge {
        targets: targets.clone(),
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .event_format(WeirFormat { format });
    tracing_subscriber::registry()
        .with(layer)
        .with(targets.with_target(BRIDGE, LevelFilter::TRACE))
        .try_init()
        .context("cannot install the logger")?;
    // Leaked once for the life of the process: `log` wants a `'static` logger, and
    // `set_boxed_logger` needs log's `alloc` feature (see Cargo.toml for why not).
    let bridge: &'static LogBridge = Box::leak(Box::new(bridge));
    // When tracing-subscriber's `tracing-log` feature is on in the build (a dependency may turn
    // it on), `try_init` above has already installed its own bridge, which hands `log` records
    // to the same subscriber; then that one serves.
    let _ = log::set_logger(bridge);
    log::set_max_level(log_level(max));
    Ok(())
}

fn log_level(l: LevelFilter) -> log::LevelFilter {
    match l.into_level() {
        None => log::LevelFilter::Off,
        Some(Level::ERROR) => log::LevelFilter::Error,
        Some(Level::WARN) => log::LevelFilter::Warn,
        Some(Level::INFO) => log::LevelFilter::Info,
        Some(Level::DEBUG) => log::LevelFilter::Debug,
        Some(_) => log::LevelFilter::Trace,
    }
}

/// Hands `log` records (weir-kafka's, rustls's) to `tracing`, filtered by the same targets.
struct LogBridge {
    targets: Targets,
}

impl log::Log for LogBridge {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        let level = match m.level() {
            log::Level::Error => Level::ERROR,
            log::Level::Warn => Level::WARN,
            log::Level::Info => Level::INFO,
            log::Level::Debug => Level::DEBUG,
            log::Level::Trace => Level::TRACE,
        };
        self.targets.would_enable(m.target(), &level)
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let t = r.target();
        let m = r.args();
        match r.level() {
            log::Level::Error => tracing::error!(target: BRIDGE, log_target = t, "{m}"),
            log::Level::Warn => tracing::warn!(target: BRIDGE, log_target = t, "{m}"),
            log::Level::Info => tracing::info!(target: BRIDGE, log_target = t, "{m}"),
            log::Level::Debug => tracing::debug!(target: BRIDGE, log_target = t, "{m}"),
            log::Level::Trace => tracing::trace!(target: BRIDGE, log_target = t, "{m}"),
        }
    }

    fn flush(&self) {}
}

/// The fields of one event.
#[derive(Default)]
struct Fields {
    message: String,
    target: Option<String>,
    rest: Vec<(&'static str, serde_json::Value)>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, serde_json::Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, serde_json::Value::String(value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        let text = || match &value {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        match field.name() {
            "message" => self.message = text(),
            "log_target" => self.target = Some(text()),
            name => self.rest.push((name, value)),
        }
    }
}

/// weir's line format, text or JSON.
struct WeirFormat {
    format: LogFormat,
}

impl<S, N> FormatEvent<S, N> for WeirFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        let meta = event.metadata();
        let target = f.target.as_deref().unwrap_or(meta.target());
        let time = now();
        match self.format {
            LogFormat::Text => {
                write!(w, "{time} {:>5} {target}: {}", meta.level(), f.message)?;
                for (k, v) in &f.rest {
                    match v {
                        serde_json::Value::String(s) if !s.contains(' ') && !s.is_empty() => {
                            write!(w, " {k}={s}")?
                        }
                        v => write!(w, " {k}={v}")?,
                    }
                }
                writeln!(w)
            }
            LogFormat::Json => {
                let mut o = serde_json::Map::new();
                o.insert("timestamp".into(), time.into());
                o.insert("level".into(), meta.level().as_str().into());
                o.insert("target".into(), target.into());
                o.insert("message".into(), f.message.into());
                if !f.rest.is_empty() {
                    let fields = f
                        .rest
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect();
                    o.insert("fields".into(), serde_json::Value::Object(fields));
                }
                writeln!(w, "{}", serde_json::Value::Object(o))
            }
        }
    }
}

/// Now, as RFC 3339 UTC with milliseconds.
fn now() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    match arrow::temporal_conversions::timestamp_ms_to_datetime(ms) {
        Some(t) => format!("{}Z", t.format("%Y-%m-%dT%H:%M:%S%.3f")),
        None => ms.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_applies_to_weir_and_rust_log_wins() {
        let t = filter(LevelFilter::DEBUG, None).unwrap();
        assert!(t.would_enable("weir_kafka::consumer", &Level::DEBUG));
        assert!(t.would_enable("weir::pipeline", &Level::DEBUG));
        assert!(!t.would_enable("datafusion::physical_plan", &Level::INFO));
        assert!(t.would_enable("datafusion::physical_plan", &Level::WARN));
        let t = filter(LevelFilter::ERROR, None).unwrap();
        assert!(!t.would_enable("weir", &Level::WARN));
        let t = filter(LevelFilter::INFO, Some("trace")).unwrap();
        assert!(t.would_enable("datafusion", &Level::TRACE));
        assert!(t.would_enable("weir_kafka", &Level::TRACE));
        assert!(filter(LevelFilter::INFO, Some("weir=loud")).is_err());
    }

    #[test]
    fn the_sql_parser_never_logs_below_warn() {
        for spec in [
            None,
            Some("trace"),
            Some("sqlparser=trace"),
            Some("debug,sqlparser=debug"),
        ] {
            let t = filter(LevelFilter::TRACE, spec).unwrap();
            assert!(
                !t.would_enable("sqlparser::parser", &Level::DEBUG),
                "{spec:?}"
            );
            assert!(
                t.would_enable("sqlparser::parser", &Level::WARN),
                "{spec:?}"
            );
        }
    }
}
