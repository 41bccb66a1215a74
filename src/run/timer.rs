//! Per-stage wall times for benchmarks (`ACTDIFF_TIMINGS=1`).

/// Per-stage wall times on stderr when `ACTDIFF_TIMINGS` is set (for
/// benchmarks), each with the process's anonymous memory (heap and stacks,
/// `RssAnon` of /proc/self/status on Linux) at the end of the stage.
pub struct Timer {
    /// The rank timed; `None`: the whole comparison.
    rank: Option<u32>,
    on: bool,
    last: std::cell::Cell<std::time::Instant>,
}

impl Timer {
    /// Times the stages of rank `rank`.
    pub fn new(rank: u32) -> Timer {
        Timer::of(Some(rank))
    }
    /// Times the stages of rank `rank`, or of the whole comparison (`None`).
    pub fn of(rank: Option<u32>) -> Timer {
        Timer {
            rank,
            on: std::env::var_os("ACTDIFF_TIMINGS").is_some(),
            last: std::cell::Cell::new(std::time::Instant::now()),
        }
    }
    /// Prints the time since the last lap (or since the timer was made)
    /// as stage `stage`, when timing is on.
    pub fn lap(&self, stage: &str) {
        if self.on {
            let now = std::time::Instant::now();
            let anon = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    let l = s.lines().find(|l| l.starts_with("RssAnon:"))?;
                    l.split_whitespace().nth(1)?.parse::<u64>().ok()
                })
                .map(|kb| format!(" (RssAnon {} MB)", kb / 1024))
                .unwrap_or_default();
            let what = self.rank.map_or(String::new(), |r| format!("rank {r} "));
            eprintln!(
                "timing: {what}{stage} {:.3} s{anon}",
                (now - self.last.get()).as_secs_f64()
            );
            self.last.set(now);
        }
    }
}
