//! What a person sees while a job runs — one live progress line — and the summary at its end.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;
use weir_runtime::{JobProgress, JobSummary};

/// A progress line, redrawn in place on a terminal and printed every few seconds otherwise.
pub struct ProgressLine {
    tty: bool,
    last_print: Instant,
    drawn: bool,
}

impl ProgressLine {
    pub fn new() -> ProgressLine {
        ProgressLine {
            tty: std::io::stderr().is_terminal(),
            last_print: Instant::now(),
            drawn: false,
        }
    }

    pub fn update(&mut self, p: &JobProgress) {
        let text = format!(
            "{:>6.1} s  {:>6} rec/s  {:>8} records  checkpoints {}{}{}",
            p.elapsed.as_secs_f64(),
            si(p.records_per_second),
            si(p.records as f64),
            p.checkpoints_completed,
            if p.checkpoints_failed > 0 {
                format!(" ({} failed)", p.checkpoints_failed)
            } else {
                String::new()
            },
            p.last_checkpoint
                .map(|c| format!(
                    "  last #{}: {} ms, {}",
                    c.id,
                    c.duration_ms,
                    bytes(c.size_bytes)
                ))
                .unwrap_or_default()
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{text}");
            let _ = err.flush();
            self.drawn = true;
        } else if self.last_print.elapsed().as_secs() >= 2 {
            let _ = writeln!(err, "{text}");
            self.last_print = Instant::now();
        }
    }

    pub fn finish(&mut self) {
        if self.drawn {
            eprintln!();
        }
    }
}

/// `1234567.0` → `1.23 M`.
pub fn si(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

pub fn bytes(n: u64) -> String {
    let x = n as f64;
    if x >= 1e9 {
        format!("{:.2} GB", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.1} MB", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} kB", x / 1e3)
    } else {
        format!("{n} B")
    }
}

pub fn print_summary(s: &JobSummary, checkpoint_root: &Path, output: &Path, interrupted: bool) {
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{} {} after {:.1} s: {} records, {} records/s",
        s.job_name,
        if interrupted {
            "stopped (Ctrl-C)"
        } else {
            "finished"
        },
        secs,
        s.records,
        si(s.records as f64 / secs)
    );
    if let Some(from) = s.restored_from {
        println!("Resumed from checkpoint {from}.");
    }
    let durations = s.stats.summary.end_to_end_duration_ms.snapshot();
    println!(
        "Checkpoints: {} completed, {} failed; duration p50 {} ms, p99 {} ms, max {} ms{}",
        s.checkpoints_completed,
        s.checkpoints_failed,
        durations.p50,
        durations.p99,
        durations.max,
        s.last_checkpoint
            .map(|c| format!("; last #{} ({})", c.id, bytes(c.size_bytes)))
            .unwrap_or_default()
    );
    let retained: Vec<String> = s.retained.iter().map(|id| format!("chk-{id}")).collect();
    println!(
        "Retained: {} in {}",
        if retained.is_empty() {
            "none".to_string()
        } else {
            retained.join(", ")
        },
        checkpoint_root.display()
    );
    println!("Output: {}", output.display());
    println!("Continue with: weir demo --resume");
}
