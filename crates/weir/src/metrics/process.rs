//! Process metrics from `/proc/self` (Linux): resident memory, CPU seconds, open file
//! descriptors. Elsewhere they are left out.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux's USER_HZ: the unit of `utime` and `stime` in `/proc/self/stat`, fixed at 100 for
/// user space on every architecture Linux supports today.
const CLOCK_TICKS: f64 = 100.0;

/// What `/proc/self` says, or `None` where it cannot be read.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct ProcessFigures {
    pub(crate) resident_bytes: Option<u64>,
    pub(crate) cpu_seconds: Option<f64>,
    pub(crate) open_fds: Option<u64>,
}

pub(crate) fn read() -> ProcessFigures {
    let resident_bytes = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| vm_rss(&s));
    let cpu_seconds = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| cpu(&s));
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    ProcessFigures {
        resident_bytes,
        cpu_seconds,
        open_fds,
    }
}

/// `VmRSS:   12345 kB` in `/proc/self/status`, in bytes.
fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// utime + stime (fields 14 and 15) of `/proc/self/stat`, in seconds. The command name (field
/// 2) is in parentheses and may hold spaces, so fields are counted after its closing one.
fn cpu(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After ')' come field 3 (state) onwards: utime is field 14, the 12th here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / CLOCK_TICKS)
}

pub(super) fn encode(e: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let p = read();
    if let Some(v) = p.resident_bytes {
        let g = ConstGauge::new(v as i64);
        g.encode(e.encode_descriptor(
            "process_resident_memory_bytes",
            "resident memory size in bytes",
            None,
            g.metric_type(),
        )?)?;
    }
    if let Some(v) = p.cpu_seconds {
        let c = ConstCounter::new(v);
        c.encode(e.encode_descriptor(
            "process_cpu_seconds",
            "user and system CPU time spent, in seconds",
            None,
            c.metric_type(),
        )?)?;
    }
    if let Some(v) = p.open_fds {
        let g = ConstGauge::new(v as i64);
        g.encode(e.encode_descriptor(
            "process_open_fds",
            "open file descriptors",
            None,
            g.metric_type(),
        )?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "4242 (weir (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 100 1000000 2500";
        assert_eq!(cpu(stat), Some(3.0));
        assert_eq!(vm_rss("Name:\tweir\nVmRSS:\t  2048 kB\n"), Some(2 << 20));
        assert_eq!(vm_rss("Name:\tweir\n"), None);
        let p = read();
        if cfg!(target_os = "linux") {
            assert!(p.resident_bytes.unwrap() > 0);
            assert!(p.open_fds.unwrap() >= 3);
            assert!(p.cpu_seconds.is_some());
        }
    }
}
