//! Progress bars on stderr (indicatif), drawn only when stderr is a
//! terminal and `--quiet` is not given.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report;

/// Progress bars on stderr (drawn only when stderr is a terminal): bytes
/// parsed over all logs, and ranks compared.
pub struct Progress {
    pub(super) multi: MultiProgress,
    pub(super) bytes: ProgressBar,
    pub(super) ranks: ProgressBar,
    pub(super) pages: ProgressBar,
}

impl report::PageProgress for Progress {
    fn planned(&self, pages: u64) {
        self.pages.inc_length(pages);
    }
    fn written(&self) {
        self.pages.inc(1);
    }
}

impl Progress {
    /// Bars for `total_bytes` of logs and `ranks` rank pairs; hidden when `quiet`.
    pub fn new(quiet: bool, total_bytes: u64, ranks: u64) -> Progress {
        let multi = if quiet {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        } else {
            MultiProgress::new()
        };
        let bytes = multi.add(ProgressBar::new(total_bytes));
        bytes.set_style(
            ProgressStyle::with_template(
                "{spinner} parsed {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template"),
        );
        let bar = multi.add(ProgressBar::new(ranks));
        bar.set_style(
            ProgressStyle::with_template("{spinner} ranks {pos}/{len} {msg} {wide_bar} eta {eta}")
                .expect("valid template"),
        );
        let pages = multi.add(ProgressBar::new(0));
        pages.set_style(
            ProgressStyle::with_template("{spinner} pages {pos}/{len} {per_sec} eta {eta}")
                .expect("valid template"),
        );
        for b in [&bytes, &bar, &pages] {
            b.enable_steady_tick(std::time::Duration::from_millis(120));
        }
        Progress {
            multi,
            bytes,
            ranks: bar,
            pages,
        }
    }
    /// Shows what rank `rank` is doing.
    pub fn stage(&self, rank: u32, what: &str) {
        self.ranks.set_message(format!("(rank {rank}: {what})"));
    }
    /// Removes the bars.
    pub fn finish(&self) {
        self.bytes.finish_and_clear();
        self.ranks.finish_and_clear();
        self.pages.finish_and_clear();
        let _ = self.multi.clear();
    }
}
