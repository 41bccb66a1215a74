//! The index page, `index.html`: the verdict, counts per status, one line
//! per rank (first diverging row, first cause, page links), each rank's
//! heatmap and causes, the key search, excluded ops, the run's warnings
//! (as on stderr), input warnings and unused overrides. Built from the [`Summary`] alone (and each rank's
//! heatmap, cut out of its first result page in the report folder).

use std::path::Path;

use serde::Serialize;

use super::parts::{
    cause_link, excluded, left_out_note, row_link, shown_note, status_counts, Excluded, StatusCount,
};
use super::{engine, heatmap, keys, markup};
use crate::matcher::cause::CauseKind;
use crate::report::messages::{self, Message};
use crate::report::reasons::Reason;
use crate::report::summary::{CausesSummary, SideSummary};
use crate::report::{files, RankSummary, ReportError, ReportOptions, Summary};

/// Run warnings (as on stderr) listed on the index (the rest are counted).
const INDEX_RUN_WARNINGS: usize = 50;

/// Parse warnings listed per side on the index (the rest are counted).
const INDEX_WARNINGS: usize = 5;

/// Duplicate keys listed per side on the index.
const INDEX_DUPLICATES: usize = 5;

/// Above this many compared ranks the index lists one line per rank group
/// (its first rank, the group's ranks beside it) and loads the table of
/// every rank part by part ([`files::rank_table`]), so that its size
/// follows what differs, not the rank count.
pub const INDEX_FULL_RANKS: usize = crate::report::summary::GROUPED_ABOVE_RANKS;

/// Rank groups listed on such an index: diverging groups first, the
/// largest first; the others are counted.
const INDEX_GROUPS: usize = 40;

/// Rank sections (heatmap and causes) on such an index: those of the first
/// groups listed.
const INDEX_DETAILS: usize = 8;

/// Ranks per part of the full rank table.
pub const RANK_TABLE_PART: usize = 512;

/// Logs with input warnings listed on the index (the others are counted).
const INDEX_WARNING_LOGS: usize = 50;

/// Ranks that could not be compared listed in the index's table (the
/// others are counted).
const INDEX_FAILED_RANKS: usize = 50;

/// A page link on the index.
#[derive(Serialize)]
struct PageLink<'a> {
    file: &'a str,
    n: usize,
    first: usize,
    end: usize,
    /// The link's title: the rows the page holds.
    title: String,
}

/// One rank's line in the index table, and its section below it.
#[derive(Serialize, Default)]
struct RankRow<'a> {
    rank: u32,
    rank2: u32,
    /// "" for a compared rank; `only1` / `only2` for a rank one run lacks.
    only: &'static str,
    /// Why a rank both runs have was not compared ("" otherwise).
    failed: String,
    entries1: usize,
    entries2: usize,
    counts: Vec<u64>,
    diverged: bool,
    incomplete: bool,
    /// The first diverging row's link ([`markup::row_link`]), "" when none.
    first_divergence: String,
    /// The first cause ([`markup::cause_link`]), "" when none.
    first_cause: String,
    pages: Vec<PageLink<'a>>,
    /// "showing 31,880 diverging rows of 3,264,458; ..." when filtered.
    shown_note: String,
    /// Origins and entries, in dispatch order.
    causes: Vec<CauseRow>,
    /// Why the rank has several causes, when that needs saying
    /// ([`crate::report::reasons::optimizer_only_words`]); "" otherwise.
    causes_note: String,
    /// Origins and entries not listed.
    more_causes: u64,
    /// The rank's heatmap, cut out of its first result page.
    heatmap: String,
    /// The rank's key index file, when it exists (the search box can load
    /// it); "" otherwise.
    keys: String,
    /// The rank has a section below the table (heatmap or causes).
    detail: bool,
    /// On an index of rank groups: the group's ranks (`12 ranks: 0–3,
    /// 8–15`); "" otherwise.
    group: String,
}

/// An origin or entry in a rank's table on the index.
#[derive(Serialize)]
struct CauseRow {
    kind: &'static str,
    /// Badge classes.
    cls: &'static str,
    /// The row's link ([`markup::row_link`]); for a one-sided cause,
    /// after the link of the earliest op of one run only that feeds it.
    link: String,
    /// 0-based positions of the differing inputs, comma-separated.
    inputs: String,
    inherited: u64,
    /// The first inherited rows' keys, ` → `-separated.
    chain: String,
}

fn cause_rows(c: &CausesSummary, (n1, n2): (&str, &str)) -> Vec<CauseRow> {
    c.causes
        .iter()
        .map(|e| CauseRow {
            kind: e.cause.kind.as_str(),
            cls: match e.cause.kind {
                CauseKind::Origin => "cause",
                _ => "entry",
            },
            link: {
                let mut o = String::new();
                if let Some(f) = e.one_sided.first() {
                    markup::row_link(&mut o, &row_link(f), n1, n2);
                    let place = e.in_its_place.as_ref().map(row_link);
                    markup::in_its_place(&mut o, place.as_ref(), n1, n2);
                    o.push_str(" <span class=mut>feeds</span> ");
                }
                markup::row_link(&mut o, &row_link(&e.row), n1, n2);
                // An optimizer-step op: the parameters it updates.
                if let Some(w) = e.row.parameter_words() {
                    use std::fmt::Write;
                    let _ = write!(o, " <span class=mut>({})</span>", engine::Esc(&w));
                }
                o
            },
            inputs: e
                .cause
                .inputs
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            inherited: e.cause.inherited,
            chain: e.chain.join(" → "),
        })
        .collect()
}

/// Input warnings of one side of one rank.
#[derive(Serialize)]
struct SideWarnings<'a> {
    rank: u32,
    name: &'a str,
    path: &'a str,
    /// Plain-text problems (incomplete, one-sided fields, duplicate keys, counts).
    items: Vec<String>,
    /// The first few parse warnings, `file:line:col: message`.
    warnings: &'a [Message],
    /// Stored warnings not listed.
    more: usize,
}

fn side_warnings<'a>(rank: u32, name: &'a str, s: &'a SideSummary) -> Option<SideWarnings<'a>> {
    let mut items: Vec<String> = s
        .incomplete
        .iter()
        .map(|r| format!("incomplete: {r}"))
        .collect();
    if !s.one_sided_fields.is_empty() {
        items.push(format!(
            "fields only in this log: {}",
            s.one_sided_fields.join(", ")
        ));
    }
    if !s.duplicate_keys.is_empty() {
        let n = s.duplicate_keys.len();
        let listed: Vec<String> = s
            .duplicate_keys
            .iter()
            .take(INDEX_DUPLICATES)
            .map(|(k, lines)| {
                let l: Vec<String> = lines.iter().map(u64::to_string).collect();
                format!("{k} (lines {})", l.join(", "))
            })
            .collect();
        items.push(format!(
            "{n} duplicate key{}: {}{}",
            if n == 1 { "" } else { "s" },
            listed.join("; "),
            if n > INDEX_DUPLICATES { "; …" } else { "" }
        ));
    }
    // Counts by kind; the kinds already listed above are skipped.
    for (kind, label, n) in &s.warning_counts {
        use crate::parser::WarningKind as K;
        if matches!(kind, K::Truncated | K::CountMismatch | K::DuplicateKey) {
            continue;
        }
        // The kind's name in summary.json, `UnknownField`, in words.
        let name = serde_json::to_value(kind).ok();
        let name = name.as_ref().and_then(|v| v.as_str()).unwrap_or("");
        let what = kind_words(name);
        if label.is_empty() || label.eq_ignore_ascii_case(&what) {
            items.push(format!("{n} × {what}"));
        } else {
            items.push(format!("{n} × {what}: {label}"));
        }
    }
    if items.is_empty() && s.warnings.is_empty() {
        return None;
    }
    let shown = s.warnings.len().min(INDEX_WARNINGS);
    Some(SideWarnings {
        rank,
        name,
        path: &s.path,
        items,
        warnings: &s.warnings[..shown],
        more: s.warnings.len() - shown,
    })
}

/// `UnknownField` → `unknown field`.
fn kind_words(kind: &str) -> String {
    let mut out = String::with_capacity(kind.len() + 4);
    for (i, c) in kind.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// An unused override pair.
#[derive(Serialize)]
struct Unused<'a> {
    rank: u32,
    key1: &'a str,
    key2: &'a str,
}

/// Everything the index shows.
#[derive(Serialize)]
struct IndexCtx<'a> {
    name1: &'a str,
    name2: &'a str,
    path1: &'a str,
    path2: &'a str,
    tool: &'a str,
    exit_status: i32,
    /// The opening sentence ([`Summary::headline`]).
    headline: Option<String>,
    /// The step series' index, for a step's report ([`ReportOptions::series_index`]).
    series_index: Option<&'a str>,
    verdict: &'a [Reason],
    counts: Vec<StatusCount>,
    /// Columns of the rank table after the rank number.
    rest_cols: usize,
    /// Some rank has a key index: show the search box.
    searchable: bool,
    /// The rank the search box starts on (the first diverging one).
    search_rank: u32,
    /// On an index of rank groups, where the search box can only list the
    /// groups' ranks: the key-index file of each block of
    /// [`files::KEYS_PER_FILE`] ranks, as JSON (`{"0": "keys-0.js", ...}`),
    /// so that a rank typed by number is searched too; "" otherwise.
    key_files: String,
    /// [`files::KEYS_PER_FILE`].
    keys_per_file: u32,
    /// Compared ranks and ranks of one run only, by rank number; on an
    /// index of rank groups, one line per group listed.
    ranks: Vec<RankRow<'a>>,
    /// Ranks of one run only, as a short list (`0–3, 7`).
    ranks_only1: String,
    ranks_only2: String,
    /// The index lists rank groups ([`INDEX_FULL_RANKS`]).
    grouped: Option<Grouped>,
    /// What the pages leave out, and how to get it ([`left_out_note`]).
    left_out: String,
    /// Ranks that could not be compared, not listed ([`INDEX_FAILED_RANKS`]).
    more_failed: usize,
    /// Each side's excluded-op chips ([`markup::excluded`]), per group of
    /// ranks with the same list.
    excluded: Vec<String>,
    /// The rank tables' head cells after `rank`: the entries and one
    /// column per status, run names clipped ([`markup::clip`]).
    rank_head: String,
    warnings: Vec<SideWarnings<'a>>,
    /// Logs with input warnings not listed.
    more_warnings: usize,
    /// The first [`INDEX_RUN_WARNINGS`] of [`Summary::warnings`].
    run_warnings: Vec<String>,
    /// Run warnings not listed.
    more_run_warnings: usize,
    unused: Vec<Unused<'a>>,
    /// What was combined across parallel layouts.
    layouts: Vec<String>,
}

/// What an index of rank groups says about them, and where its full rank
/// table is.
#[derive(Serialize)]
struct Grouped {
    /// Compared ranks.
    ranks: usize,
    /// Rank groups in all.
    groups: usize,
    /// Groups not listed, and their ranks.
    more_groups: usize,
    more_ranks: usize,
    /// The full rank table's parts: file names, and each part's first rank.
    parts: Vec<String>,
    starts: Vec<u32>,
}

/// One rank of the full rank table (`ranks-K.js`), short names to keep the
/// parts small: `r`/`r2` rank numbers, `e` entries per run, `c` counts per
/// status (the index's columns), `d` diverged, `fd` the first diverging
/// row (`[text, href]`, href "" when on no page), `fc` the first cause in
/// words, `p` its first page files, `np` its pages.
#[derive(Serialize)]
struct RankLine<'a> {
    r: u32,
    r2: u32,
    e: [usize; 2],
    c: Vec<u64>,
    d: bool,
    fd: Option<(String, String)>,
    fc: Option<String>,
    p: Vec<&'a str>,
    np: usize,
}

/// Pages a rank line links to; more are counted.
const RANK_LINE_PAGES: usize = 12;

fn rank_line<'a>(r: &'a RankSummary, n1: &str, n2: &str) -> RankLine<'a> {
    let fd = r.first_divergence.as_ref().map(|f| {
        let l = row_link(f);
        let text = if l.key2.is_empty() {
            l.key1.to_string()
        } else {
            format!("{} ↔ {}", l.key1, l.key2)
        };
        (format!("{text} ({})", f.status.as_str()), l.href)
    });
    let fc = r
        .root_causes
        .first_cause
        .as_ref()
        .map(|c| format!("{} {}", c.cause.kind.as_str(), c.row.key()));
    RankLine {
        r: r.rank,
        r2: r.rank2,
        e: [r.run1.entries, r.run2.entries],
        c: status_counts(&r.counts, n1, n2)
            .iter()
            .map(|c| c.n)
            .collect(),
        d: r.diverged(),
        fd,
        fc,
        p: r.pages
            .iter()
            .take(RANK_LINE_PAGES)
            .map(|p| p.file.as_str())
            .collect(),
        np: r.pages.len(),
    }
}

/// Writes the full rank table, [`RANK_TABLE_PART`] ranks per file
/// (`actdiffRanks(K, [...]);`, loaded by a script element, so it works
/// from file://). Returns the file names and each part's first rank.
fn write_rank_table(summary: &Summary, dir: &Path) -> Result<(Vec<String>, Vec<u32>), ReportError> {
    let (n1, n2) = (summary.name1.as_str(), summary.name2.as_str());
    let mut ranks: Vec<&RankSummary> = summary.ranks.iter().collect();
    ranks.sort_by_key(|r| r.rank);
    let lines: Vec<(u32, RankLine)> = ranks
        .iter()
        .map(|r| (r.rank, rank_line(r, n1, n2)))
        .collect();
    write_table_parts(&lines, dir)
}

/// Writes a table of one line per rank (`lines`, by rank number) in
/// parts of [`RANK_TABLE_PART`] lines, [`files::rank_table`]`(K)` each
/// (`actdiffRanks(K, [...]);`, which `templates/ranks.js` loads by a
/// script element, so it works from file://). Returns the file names and
/// each part's first rank. The index's table of every rank and the series
/// index's strip of every rank are such tables.
pub(super) fn write_table_parts<T: Serialize>(
    lines: &[(u32, T)],
    dir: &Path,
) -> Result<(Vec<String>, Vec<u32>), ReportError> {
    let mut names = Vec::new();
    let mut starts = Vec::new();
    for (k, part) in lines.chunks(RANK_TABLE_PART).enumerate() {
        let rows: Vec<&T> = part.iter().map(|(_, l)| l).collect();
        let json = serde_json::to_string(&rows).map_err(|e| ReportError::Io {
            path: dir.join(files::rank_table(k)),
            message: e.to_string(),
        })?;
        // `</script>` cannot appear: the file is a script of its own.
        let text = format!("actdiffRanks({k}, {json});\n");
        let path = dir.join(files::rank_table(k));
        std::fs::write(&path, text).map_err(|e| ReportError::io(&path, e))?;
        names.push(files::rank_table(k));
        starts.push(part[0].0);
    }
    Ok((names, starts))
}

/// `0, 1, 2, 5` → `0–2, 5`.
fn rank_list(ranks: &[u32]) -> String {
    crate::report::summary::rank_ranges(ranks, 2).join(", ")
}

/// Groups the ranks of one side by their excluded-ops list; `other` is the
/// other run's side.
fn excluded_groups<'a>(
    name: &'a str,
    ranks: &'a [RankSummary],
    side: fn(&RankSummary) -> &SideSummary,
    other: fn(&RankSummary) -> &SideSummary,
) -> Vec<Excluded<'a>> {
    let mut groups: Vec<(&'a Option<Vec<String>>, Vec<&'a RankSummary>)> = Vec::new();
    for r in ranks {
        let ops = &side(r).excluded_ops;
        match groups.iter_mut().find(|(o, _)| *o == ops) {
            Some((_, rs)) => rs.push(r),
            None => groups.push((ops, vec![r])),
        }
    }
    let single = groups.len() == 1;
    groups
        .into_iter()
        .map(|(ops, rs)| {
            let label = if single && rs.len() == ranks.len() {
                if rs.len() == 1 {
                    String::new()
                } else {
                    "all ranks".into()
                }
            } else {
                let numbers: Vec<u32> = rs.iter().map(|r| r.rank).collect();
                format!(
                    "rank{} {}",
                    if rs.len() > 1 { "s" } else { "" },
                    rank_list(&numbers)
                )
            };
            let others: Vec<&Option<Vec<String>>> =
                rs.iter().map(|r| &other(r).excluded_ops).collect();
            excluded(name, label, ops, &others)
        })
        .collect()
}

/// Rank `rank`'s heatmap, cut out of its first result page, `page` (in
/// `dir`), or, where that page has none, out of `rank{N}-overview.html`,
/// the page that held it in the parts of a sharded compare an earlier
/// actdiff wrote ([`files::LEGACY_OVERVIEW`]; a merge links it in with
/// the pages). Every rank with pages has one, so a missing or unreadable
/// page (or one without the heatmap) is an error naming it, never an
/// index silently without the heatmap.
fn read_heatmap(dir: &Path, rank: u32, page: &str) -> Result<String, ReportError> {
    // All log text in a page is escaped (and every `<` of its rows' JSON
    // written `\u003c`), so the markers are ours.
    let cut = |text: &str| {
        text.split_once(heatmap::HEATMAP_START)
            .and_then(|(_, rest)| rest.split_once(heatmap::HEATMAP_END))
            .map(|(heat, _)| heat.to_string())
    };
    let path = dir.join(page);
    let text = read_through(&path, heatmap::HEATMAP_END).map_err(|e| ReportError::io(&path, e))?;
    if let Some(heat) = cut(&text) {
        return Ok(heat);
    }
    let legacy = dir.join(format!("rank{rank}-{}", files::LEGACY_OVERVIEW));
    std::fs::read_to_string(&legacy)
        .ok()
        .as_deref()
        .and_then(cut)
        .ok_or_else(|| ReportError::Io {
            path,
            message: "not a first result page written by this actdiff (no heatmap in it)".into(),
        })
}

/// The text of the file `path` up to the end of the first `marker` in it
/// (all of it when there is none): a first result page is read only as far
/// as its heatmap, which comes before its rows (up to about 380 KB a page
/// at the default 500 rows). Errors: the file cannot be read or is not
/// UTF-8 up to there.
fn read_through(path: &Path, marker: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let marker = marker.as_bytes();
    let mut text = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        // The marker may straddle the last chunk's end.
        let from = text.len().saturating_sub(marker.len() - 1);
        text.extend_from_slice(&chunk[..n]);
        if let Some(at) = memchr::memmem::find(&text[from..], marker) {
            text.truncate(from + at + marker.len());
            break;
        }
    }
    String::from_utf8(text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The key-index files of `ranks` that exist in `dir`, by block number
/// ([`files::keys`]), as a JSON object: `{"0": "keys-0.js", "3": "keys-3.js"}`.
fn key_files(ranks: &[RankSummary], dir: &Path) -> String {
    let mut blocks = std::collections::BTreeMap::new();
    for r in ranks.iter().filter(|r| !r.pages.is_empty()) {
        let block = (r.rank / files::KEYS_PER_FILE).to_string();
        if let std::collections::btree_map::Entry::Vacant(e) = blocks.entry(block) {
            let name = files::keys(r.rank);
            if dir.join(&name).is_file() {
                e.insert(name);
            }
        }
    }
    serde_json::to_string(&blocks).expect("a map of strings serialises")
}

/// The name of the file holding rank `r`'s key index when it has pages
/// and the file exists, else "".
fn key_index(dir: &Path, r: &RankSummary) -> String {
    let name = files::keys(r.rank);
    if !r.pages.is_empty() && dir.join(&name).is_file() {
        name
    } else {
        String::new()
    }
}

/// Rank `r`'s line in the index table; with `detail`, its section below
/// the table too (the heatmap, cut out of its first page, and causes).
fn rank_row<'a>(
    r: &'a RankSummary,
    (n1, n2): (&str, &str),
    opts: &ReportOptions,
    detail: bool,
) -> Result<RankRow<'a>, ReportError> {
    // A rank without pages (a step of a series that gets no full pages)
    // has no heatmap either.
    let heatmap = match r.pages.first() {
        Some(first) if detail => read_heatmap(&opts.out_dir, r.rank, &first.file)?,
        _ => String::new(),
    };
    let causes = if detail {
        cause_rows(&r.root_causes, (n1, n2))
    } else {
        Vec::new()
    };
    let listed = r
        .root_causes
        .causes
        .iter()
        .filter(|c| c.cause.kind != CauseKind::ViaCollective)
        .count() as u64;
    Ok(RankRow {
        rank: r.rank,
        rank2: r.rank2,
        only: "",
        failed: String::new(),
        entries1: r.run1.entries,
        entries2: r.run2.entries,
        counts: status_counts(&r.counts, n1, n2)
            .iter()
            .map(|c| c.n)
            .collect(),
        diverged: r.diverged(),
        incomplete: r.incomplete(),
        first_divergence: r
            .first_divergence
            .as_ref()
            .map(|f| markup::row_link_html(&row_link(f), n1, n2))
            .unwrap_or_default(),
        first_cause: cause_link(&r.root_causes)
            .map(|c| markup::cause_link_html(&c, n1, n2))
            .unwrap_or_default(),
        // A rank without pages (a step of a series without full pages):
        // its step's index says so once, in its warnings.
        shown_note: if r.pages.is_empty() {
            String::new()
        } else {
            shown_note(r)
        },
        pages: r
            .pages
            .iter()
            .enumerate()
            .map(|(k, p)| PageLink {
                file: &p.file,
                n: k + 1,
                first: p.first_row + 1,
                end: p.end_row,
                // Pages of diverging rows only hold rows k–j of
                // the rows shown, not result rows k–j.
                title: if r.html_filtered {
                    format!(
                        "diverging rows {}–{} of the {} shown",
                        p.first_row + 1,
                        p.end_row,
                        r.html_rows
                    )
                } else {
                    format!("rows {}–{}", p.first_row, p.end_row.saturating_sub(1))
                },
            })
            .collect(),
        more_causes: if detail {
            r.root_causes.cause_count.saturating_sub(listed)
        } else {
            0
        },
        detail: !causes.is_empty() || !heatmap.is_empty(),
        causes_note: if causes.is_empty() {
            String::new()
        } else {
            crate::report::reasons::optimizer_only_words(r).unwrap_or_default()
        },
        causes,
        heatmap,
        keys: key_index(&opts.out_dir, r),
        group: String::new(),
    })
}

/// The lines of an index of rank groups: the first rank of each group
/// listed (diverging groups first, the largest first), the group's ranks
/// beside it, sections for the first [`INDEX_DETAILS`]; and what is not
/// listed.
fn group_rows<'a>(
    summary: &'a Summary,
    opts: &ReportOptions,
) -> Result<(Vec<RankRow<'a>>, Grouped), ReportError> {
    let names = (summary.name1.as_str(), summary.name2.as_str());
    let groups = Summary::group_ranks(&summary.ranks);
    let order = Summary::groups_by_weight(&summary.ranks, &groups);
    let mut rows = Vec::new();
    for (i, (r, g)) in order.iter().take(INDEX_GROUPS).enumerate() {
        let mut row = rank_row(r, names, opts, i < INDEX_DETAILS)?;
        let parts = crate::report::summary::rank_ranges(&g.ranks, 2);
        row.group = format!(
            "{} rank{}: {}{}",
            g.ranks.len(),
            if g.ranks.len() == 1 { "" } else { "s" },
            parts[..parts.len().min(8)].join(", "),
            if parts.len() > 8 { ", …" } else { "" }
        );
        rows.push(row);
    }
    let left = &order[order.len().min(INDEX_GROUPS)..];
    let (parts, starts) = write_rank_table(summary, &opts.out_dir)?;
    Ok((
        rows,
        Grouped {
            ranks: summary.ranks.len(),
            groups: order.len(),
            more_groups: left.len(),
            more_ranks: left.iter().map(|(_, g)| g.ranks.len()).sum(),
            parts,
            starts,
        },
    ))
}

/// The head cells of a rank table after `rank`: the entries of each run,
/// one column per status, the first diverging row and the pages.
fn rank_head(counts: &[StatusCount], n1: &str, n2: &str) -> String {
    let mut o = String::from("<th>entries<br>");
    markup::clip(&mut o, n1);
    o.push_str(" / ");
    markup::clip(&mut o, n2);
    o.push_str("</th>");
    for c in counts {
        o.push_str("<th class=\"cnt ");
        o.push_str(c.st);
        o.push_str("\">");
        markup::clip(&mut o, &c.label);
        o.push_str("</th>");
    }
    o.push_str("<th>first diverging row · first cause</th><th>pages</th>");
    o
}

/// Writes `index.html`: the verdict, counts per status, one table line per
/// rank (with its first diverging row and page links), excluded ops, input
/// warnings, one-sided ranks and unused overrides; first, the files of the
/// ranks' key indexes its search box loads ([`keys::write_files`]). Above
/// `INDEX_FULL_RANKS` (64) compared ranks, one line per rank group
/// instead, and the table of every rank in parts ([`files::rank_table`])
/// that the index loads on demand.
pub fn write_index(summary: &Summary, opts: &ReportOptions) -> Result<(), ReportError> {
    keys::write_files(&summary.ranks, &opts.out_dir)?;
    let (n1, n2) = (summary.name1.as_str(), summary.name2.as_str());
    let grouped_index = summary.ranks.len() > INDEX_FULL_RANKS;
    let (mut ranks, grouped) = if grouped_index {
        let (rows, g) = group_rows(summary, opts)?;
        (rows, Some(g))
    } else {
        let rows = summary
            .ranks
            .iter()
            .map(|r| rank_row(r, (n1, n2), opts, true))
            .collect::<Result<Vec<_>, _>>()?;
        (rows, None)
    };
    // Ranks of one run only, in the table too, in rank-number order (on
    // an index of groups, in the list above the table only).
    if !grouped_index {
        for (only, list) in [
            ("only1", &summary.ranks_only1),
            ("only2", &summary.ranks_only2),
        ] {
            ranks.extend(list.iter().map(|&rank| RankRow {
                rank,
                rank2: rank,
                only,
                ..RankRow::default()
            }));
        }
    }
    // Ranks that could not be compared, with why.
    ranks.extend(
        summary
            .ranks_failed
            .iter()
            .take(INDEX_FAILED_RANKS)
            .map(|f| RankRow {
                rank: f.rank,
                rank2: f.rank,
                failed: messages::join(&f.errors, "; "),
                ..RankRow::default()
            }),
    );
    if !grouped_index {
        ranks.sort_by_key(|r| r.rank);
    }
    let search_rank = ranks
        .iter()
        .find(|r| !r.keys.is_empty() && r.diverged)
        .or_else(|| ranks.iter().find(|r| !r.keys.is_empty()))
        .map(|r| r.rank);
    let mut excl = excluded_groups(n1, &summary.ranks, |r| &r.run1, |r| &r.run2);
    excl.extend(excluded_groups(
        n2,
        &summary.ranks,
        |r| &r.run2,
        |r| &r.run1,
    ));
    let mut warnings = Vec::new();
    let mut unused = Vec::new();
    for r in &summary.ranks {
        warnings.extend(side_warnings(r.rank, n1, &r.run1));
        warnings.extend(side_warnings(r.rank2, n2, &r.run2));
        unused.extend(r.unused_overrides.iter().map(|(a, b)| Unused {
            rank: r.rank,
            key1: a,
            key2: b,
        }));
    }
    let more_warnings = warnings.len().saturating_sub(INDEX_WARNING_LOGS);
    warnings.truncate(INDEX_WARNING_LOGS);
    let ctx = IndexCtx {
        name1: n1,
        name2: n2,
        path1: &summary.path1,
        path2: &summary.path2,
        tool: &summary.tool,
        exit_status: summary.exit_status,
        headline: Summary::headline(&summary.ranks, &summary.name1, &summary.name2),
        series_index: opts.series_index.as_deref(),
        verdict: &summary.verdict,
        counts: status_counts(&summary.counts, n1, n2),
        rest_cols: status_counts(&summary.counts, n1, n2).len() + 3,
        searchable: search_rank.is_some(),
        search_rank: search_rank.unwrap_or(0),
        key_files: if grouped_index {
            key_files(&summary.ranks, &opts.out_dir)
        } else {
            String::new()
        },
        keys_per_file: files::KEYS_PER_FILE,
        ranks,
        ranks_only1: rank_list(&summary.ranks_only1),
        ranks_only2: rank_list(&summary.ranks_only2),
        grouped,
        left_out: left_out_note(&summary.ranks),
        more_failed: summary
            .ranks_failed
            .len()
            .saturating_sub(INDEX_FAILED_RANKS),
        excluded: excl.iter().map(markup::excluded_html).collect(),
        rank_head: rank_head(&status_counts(&summary.counts, n1, n2), n1, n2),
        warnings,
        more_warnings,
        run_warnings: summary.warnings[..summary.warnings.len().min(INDEX_RUN_WARNINGS)]
            .iter()
            .map(|w| w.to_string())
            .collect(),
        more_run_warnings: summary.warnings.len().saturating_sub(INDEX_RUN_WARNINGS),
        unused,
        layouts: summary.layout_lines(),
    };
    engine::render_file(files::INDEX, &ctx, &opts.out_dir.join(files::INDEX))
}

#[cfg(test)]
mod tests {
    use super::read_through;

    /// The text ends with the marker wherever it falls, across the 64 KiB
    /// chunks too; with none, the whole file.
    #[test]
    fn read_through_stops_after_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("page.html");
        let marker = "<!--end-->";
        for at in [0, 10, (64 << 10) - 4, 64 << 10, (128 << 10) + 3] {
            let text = format!("{}{marker}{}", "a".repeat(at), "b".repeat(200_000));
            std::fs::write(&path, &text).unwrap();
            let got = read_through(&path, marker).unwrap();
            assert_eq!(got.len(), at + marker.len(), "marker at {at}");
            assert!(got.ends_with(marker));
        }
        std::fs::write(&path, "no marker é").unwrap();
        assert_eq!(read_through(&path, marker).unwrap(), "no marker é");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(read_through(&path, marker).is_err());
    }
}
