//! `weir run PIPELINE.sql`: runs a script's statements in order, prints the progress line and,
//! at the end, what every source and sink did.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use weir::{Engine, EngineOptions, ResultWriter, StdoutFormat};

use super::progress::{bytes, count, ProgressLine, Totals};

/// What `weir run` was given.
pub(crate) struct RunArgs {
    pub(crate) pipeline: PathBuf,
    pub(crate) follow: bool,
    pub(crate) output: Option<PathBuf>,
    pub(crate) partitions: Option<usize>,
    pub(crate) batch_size: usize,
    pub(crate) quiet: bool,
    pub(crate) kafka_config: Option<PathBuf>,
    pub(crate) metrics_addr: Option<String>,
}

pub(crate) fn run(a: RunArgs) -> Result<()> {
    let script = std::fs::read_to_string(&a.pipeline)
        .with_context(|| format!("cannot read {}", a.pipeline.display()))?;
    let engine = Engine::new(EngineOptions {
        follow: a.follow,
        partitions: a.partitions.unwrap_or(0),
        batch_size: a.batch_size,
        kafka_properties: super::kafka_properties(a.kafka_config.as_deref())?,
        ..EngineOptions::default()
    });
    // Off by default; when on, it serves until the run ends (its summary is printed first).
    let metrics = match &a.metrics_addr {
        Some(addr) => {
            let server = weir::MetricsServer::start(addr, engine.metrics_handle())
                .with_context(|| format!("cannot serve metrics on {addr}"))?;
            tracing::info!(
                "serving metrics on http://{}/metrics (and /health, /ready)",
                server.addr()
            );
            Some(server)
        }
        None => None,
    };
    let mut out = match &a.output {
        Some(path) => ResultWriter::file(path)?,
        None => ResultWriter::stdout(StdoutFormat::Table, a.follow),
    };
    let result = super::runtime(a.partitions)?
        .block_on(run_script(&engine, &script, &mut out, a.quiet))
        .with_context(|| format!("in {}", a.pipeline.display()));
    if let Some(server) = metrics {
        server.stop();
    }
    result
}

async fn run_script(
    engine: &Engine,
    script: &str,
    out: &mut ResultWriter,
    quiet: bool,
) -> Result<()> {
    let started = Instant::now();
    let progress = start_progress(engine, quiet);
    let result = async {
        engine.run_script(script, out).await?;
        if engine.pipelines_running() {
            // One wait, carried on after Ctrl-C: it has already taken the pipelines, so a
            // second `wait()` would find none and the summary would come before the sinks end.
            let wait = engine.wait();
            tokio::pin!(wait);
            tokio::select! {
                r = &mut wait => r?,
                _ = stop_signal() => {
                    tracing::info!("stopping: finishing the sinks");
                    engine.stop();
                    wait.await?;
                }
            }
        }
        anyhow::Ok(())
    }
    .await;
    progress.stop();
    // Sinks are completed even after an error, so what was written stays readable.
    let sinks = engine.finish().await;
    let output = out.finish();
    if !quiet {
        report(engine, started);
        if let Ok(sinks) = &sinks {
            for s in sinks {
                let at = s
                    .path
                    .as_ref()
                    .map(|p| format!(" to {}", p.display()))
                    .unwrap_or_default();
                eprintln!("sink {}: {} rows{at}", s.name, count(s.rows));
            }
        }
    }
    // The run's own error first: a sink's or the output's may follow from it.
    result?;
    output?;
    sinks?;
    Ok(())
}

/// Ctrl-C (SIGINT), or SIGTERM, which service managers and Kubernetes send to stop a
/// process: either ends a `--follow` run cleanly (open steps committed, a consumer group left).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// The progress line over every source's counters.
pub(crate) fn start_progress(engine: &Engine, quiet: bool) -> ProgressLine {
    let stats = engine.source_stats_handle();
    ProgressLine::start(quiet, move || {
        let mut t = Totals::default();
        for s in stats.snapshot() {
            t.messages += s.messages;
            t.bytes += s.bytes;
            t.errors += s.skipped + s.dead_lettered;
        }
        t
    })
}

fn report(engine: &Engine, started: Instant) {
    let secs = started.elapsed().as_secs_f64();
    for s in engine.source_reports() {
        if s.messages == 0 {
            continue;
        }
        eprintln!(
            "source {}: {} messages ({}), {} decoded, {} skipped, {} dead-lettered in {:.2} s ({}/s)",
            s.name,
            count(s.messages),
            bytes(s.bytes),
            count(s.decoded),
            count(s.skipped),
            count(s.dead_lettered),
            secs,
            count((s.messages as f64 / secs.max(1e-9)) as u64)
        );
        let t = s.stages;
        let readers = t.read + t.walk_ahead + t.framing + t.waiting + t.decoding;
        if !readers.is_zero() {
            eprintln!(
                "source {}: readers' time (summed over {} partitions): read {:.2} s, decode {:.2} s, \
                 framing ahead {:.3} s, wait for framing {:.2} s, framing {:.3} s (taken in turn: \
                 {:.1}% of the run)",
                s.name,
                engine.partitions(),
                t.read.as_secs_f64(),
                t.decoding.as_secs_f64(),
                t.walk_ahead.as_secs_f64(),
                t.waiting.as_secs_f64(),
                t.framing.as_secs_f64(),
                100.0 * t.framing.as_secs_f64() / secs.max(1e-9)
            );
        }
        if s.window_shards > 0 {
            let each = s.window_shards_busy.as_secs_f64() / s.window_shards as f64;
            eprintln!(
                "source {}: windows merged on {} threads by group: busy {:.2} s each ({:.1}% of \
                 the run); the watermark's thread busy {:.2} s ({:.1}%)",
                s.name,
                s.window_shards,
                each,
                100.0 * each / secs.max(1e-9),
                s.window_merge.as_secs_f64(),
                100.0 * s.window_merge.as_secs_f64() / secs.max(1e-9)
            );
        } else if !s.window_merge.is_zero() {
            eprintln!(
                "source {}: windows merged on one thread: busy {:.2} s ({:.1}% of the run)",
                s.name,
                s.window_merge.as_secs_f64(),
                100.0 * s.window_merge.as_secs_f64() / secs.max(1e-9)
            );
        }
        if s.schema_ids > 0 {
            eprintln!(
                "source {}: {} schema ids seen (schema registry), {} decode plans compiled",
                s.name,
                count(s.schema_ids),
                count(s.schema_plans)
            );
        }
        if s.late > 0 || s.windows_dropped > 0 {
            eprintln!(
                "source {}: {} late rows dropped behind the watermark, {} open windows dropped at the stop (a source without 'state.dir' keeps none)",
                s.name,
                count(s.late),
                count(s.windows_dropped)
            );
        }
    }
    for (name, st) in engine.state_reports() {
        eprintln!("source {name}, state:");
        for line in st.to_string().lines() {
            eprintln!("  {line}");
        }
    }
}
