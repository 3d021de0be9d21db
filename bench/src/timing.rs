//! Interleaved timing for the report binaries (`report`, `json_report`): every contender runs
//! once untimed, then `reps` rounds run each contender in turn, so that background load on a
//! shared machine hits every contender alike.

use std::time::{Duration, Instant};

use crate::{Contender, Corpus, Result};

/// One contender's times over the rounds.
pub struct Timing {
    /// The contender's name.
    pub name: String,
    /// The median over the rounds.
    pub median: Duration,
    /// The fastest round.
    pub min: Duration,
    /// Every timed run, in round order (round r of every contender ran back to back).
    pub rounds: Vec<Duration>,
}

/// Times every contender `reps` times, interleaved (round r runs a, b, c, ... in turn), after
/// one untimed run each that warms caches and the allocator and checks the row count. Prints
/// each contender's median, minimum and maximum to stderr.
pub fn time_all(
    contenders: &mut [Box<dyn Contender>],
    corpus: &Corpus,
    reps: usize,
) -> Result<Vec<Timing>> {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(reps); contenders.len()];
    for contender in contenders.iter_mut() {
        let rows = contender.run_count(corpus)?;
        if rows != corpus.len() {
            return Err(format!(
                "{} produced {rows} rows for {} messages",
                contender.name(),
                corpus.len()
            )
            .into());
        }
    }
    for _ in 0..reps {
        for (contender, times) in contenders.iter_mut().zip(&mut times) {
            let start = Instant::now();
            contender.run_count(corpus)?;
            times.push(start.elapsed());
        }
    }
    let mut out = Vec::new();
    for (contender, rounds) in contenders.iter().zip(times) {
        let mut sorted = rounds.clone();
        sorted.sort();
        let (Some(&min), Some(&max)) = (sorted.first(), sorted.last()) else {
            return Err("no timed rounds".into());
        };
        let median = sorted[sorted.len() / 2];
        eprintln!(
            "  {:<18} median {:>8.1} ms (min {:.1}, max {:.1})",
            contender.name(),
            median.as_secs_f64() * 1e3,
            min.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
        out.push(Timing {
            name: contender.name().to_string(),
            median,
            min,
            rounds,
        });
    }
    Ok(out)
}

/// How much faster `fast` is than `slow` within each round: the median of those ratios and
/// their range. The two ran a second apart in a round, so a drift in the machine's speed
/// between rounds (20-40% here within minutes) cancels out.
pub fn per_round(fast: &Timing, slow: &Timing) -> (f64, f64, f64) {
    let mut ratios: Vec<f64> = fast
        .rounds
        .iter()
        .zip(&slow.rounds)
        .map(|(f, s)| s.as_secs_f64() / f.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    match (ratios.first(), ratios.last()) {
        (Some(&lo), Some(&hi)) => (ratios[ratios.len() / 2], lo, hi),
        _ => (f64::NAN, f64::NAN, f64::NAN),
    }
}

/// The machine's load average (1, 5 and 15 minutes) as /proc/loadavg gives it, for a report's
/// header.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

/// The rounds per contender a report runs: `WEIR_BENCH_REPS`, 11 when unset.
pub fn reps() -> Result<usize> {
    let reps: usize = match std::env::var("WEIR_BENCH_REPS") {
        Ok(v) => v.parse()?,
        Err(_) => 11,
    };
    if reps == 0 {
        return Err("WEIR_BENCH_REPS must be at least 1".into());
    }
    Ok(reps)
}
