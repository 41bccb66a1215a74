//! HTML pages (tera templates in `templates/`, embedded at build time).

use super::summary::PageRef;
use super::{RankComparison, RankSummary, ReportError, ReportOptions, Summary};

/// Writes the result pages of one rank; returns the pages written.
pub fn write_rank_pages(
    rc: &RankComparison<'_>,
    s: &RankSummary,
    opts: &ReportOptions,
) -> Result<Vec<PageRef>, ReportError> {
    let _ = (rc, s, opts);
    Ok(Vec::new())
}

/// Writes `index.html`.
pub fn write_index(summary: &Summary, opts: &ReportOptions) -> Result<(), ReportError> {
    let _ = (summary, opts);
    Ok(())
}
