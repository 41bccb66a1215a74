//! The HTML pieces result pages and the index share, written by Rust into a
//! `String`: a status badge, a clipped run name, a link to a result row, a
//! rank's first cause, a side's excluded-op chips, and a page's pager.
//! Result pages are written from these alone (`page.rs`, no template
//! engine per rank); the index's template gets them as finished markup.
//! Every text that comes from a log or a run name goes through
//! [`engine::escape`], as the templates' `{{ }}` does.

use std::fmt::Write;

use super::engine::Esc;
use super::parts::{CauseLink, Excluded, RowLink};

/// The status badge of a result row: `<b class="bd diff">diff</b>`, or
/// `only NAME` for a row of one run only.
pub(super) fn badge(o: &mut String, st: &str, name1: &str, name2: &str) {
    let _ = write!(o, "<b class=\"bd {}\">", Esc(st));
    let _ = match st {
        "only1" => write!(o, "only {}", Esc(name1)),
        "only2" => write!(o, "only {}", Esc(name2)),
        _ => write!(o, "{}", Esc(st)),
    };
    o.push_str("</b>");
}

/// Text that may be too long for its column (a run name): clipped with an
/// ellipsis where it does not fit, the full text on hover.
pub(super) fn clip(o: &mut String, t: &str) {
    let t = Esc(t);
    let _ = write!(o, "<span class=clip title=\"{t}\">{t}</span>");
}

/// The excluded-op chips of one side; ops the other run's list lacks are
/// marked.
pub(super) fn excluded(o: &mut String, e: &Excluded<'_>) {
    let name = Esc(e.name);
    let _ = write!(o, "<div class=exrow><span class=exname>{name}");
    if !e.ranks.is_empty() {
        let _ = write!(o, " <span class=mut>({})</span>", Esc(&e.ranks));
    }
    o.push_str(":</span> ");
    if !e.recorded {
        o.push_str("<span class=mut>not recorded</span>");
    } else if e.ops.is_empty() {
        o.push_str("<span class=xchip>(none)</span>");
    } else {
        for op in &e.ops {
            if op.only {
                let _ = write!(
                    o,
                    "<span class=\"xchip xo\" title=\"only in {name}\">{}</span>",
                    Esc(op.op)
                );
            } else {
                let _ = write!(o, "<span class=xchip>{}</span>", Esc(op.op));
            }
        }
    }
    if !e.only.is_empty() {
        let _ = write!(
            o,
            " <span class=exonly>only in {name}: {}</span>",
            Esc(&e.only)
        );
    }
    o.push_str("</div>");
}

/// A link to a result row, with its keys, status, strategy, lines and
/// phase (the keys without a link when the row is on no page). Two lines:
/// the keys, then the details.
pub(super) fn row_link(o: &mut String, r: &RowLink<'_>, name1: &str, name2: &str) {
    let key1 = Esc(r.key1);
    if r.href.is_empty() {
        let _ = write!(
            o,
            "<span class=fdk title=\"on no page: the pages hold only diverging rows\">{key1}</span>"
        );
        if !r.key2.is_empty() {
            let _ = write!(
                o,
                " <span class=mut>↔</span> <span class=fdk>{}</span>",
                Esc(r.key2)
            );
        }
    } else {
        let href = Esc(&r.href);
        let _ = write!(o, "<a class=fdk href=\"{href}\">{key1}</a>");
        if !r.key2.is_empty() {
            let _ = write!(
                o,
                " <span class=mut>↔</span> <a class=fdk href=\"{href}\">{}</a>",
                Esc(r.key2)
            );
        }
    }
    o.push_str("\n<span class=fdmeta>");
    badge(o, r.st, name1, name2);
    if !r.chip.is_empty() {
        let _ = write!(o, " <i class=\"ch {}\">{}</i>", Esc(r.sg), Esc(r.chip));
    }
    let _ = write!(o, " <span class=mut>row {}", r.index);
    // A line number is 1-based; 0 means none, as the templates' `if` read it.
    for (line, name) in [(r.line1, name1), (r.line2, name2)] {
        if let Some(l) = line.filter(|&l| l != 0) {
            o.push_str(" · ");
            clip(o, name);
            let _ = write!(o, " line {l}");
        }
    }
    let _ = write!(o, " · {}</span></span>", Esc(r.phase));
}

/// Where a rank's divergence starts or enters: the first cause's kind and
/// row (with the one-sided op feeding it), or the ranks it enters from.
pub(super) fn cause_link(o: &mut String, c: &CauseLink<'_>, name1: &str, name2: &str) {
    let Some(row) = &c.row else {
        let _ = write!(
            o,
            "<span class=mut>divergence only enters via collectives; see {}</span>",
            Esc(&c.via_collectives)
        );
        return;
    };
    let _ = write!(o, "<b class=\"bd cause\">{}</b> ", Esc(c.kind));
    if let Some(f) = &c.fed_by {
        row_link(o, f, name1, name2);
        in_its_place(o, c.in_its_place.as_ref(), name1, name2);
        o.push_str(" <span class=mut>feeds</span> ");
    }
    row_link(o, row, name1, name2);
    if c.inherited > 0 {
        let _ = write!(
            o,
            " <span class=mut>· {} inherited row{} back here</span>",
            c.inherited,
            if c.inherited != 1 {
                "s trace"
            } else {
                " traces"
            }
        );
    }
    if c.count > 1 {
        let _ = write!(
            o,
            " <span class=mut>· {} {} in all</span>",
            c.count, c.counted
        );
    }
}

/// After a one-sided cause's op: `(B ran OP in its place)`, the other
/// run's op at its place ([`crate::report::summary::CauseRef::in_its_place`];
/// `r` an `only1` or `only2` row, named by its own run); nothing when `r`
/// is `None`.
pub(super) fn in_its_place(o: &mut String, r: Option<&RowLink<'_>>, name1: &str, name2: &str) {
    let Some(r) = r else {
        return;
    };
    let run = if r.st == "only1" { name1 } else { name2 };
    let _ = write!(o, " <span class=mut>({} ran</span> ", Esc(run));
    row_link(o, r, name1, name2);
    o.push_str(" <span class=mut>in its place)</span>");
}

/// A result page's place among its rank's pages, for [`pager`]: page
/// `page` of `pages` (from 1), and the files of the previous, next, first
/// and last pages ("" where there is none).
pub(super) struct Pager<'a> {
    pub(super) page: usize,
    pub(super) pages: usize,
    pub(super) prev: &'a str,
    pub(super) next: &'a str,
    pub(super) first: &'a str,
    pub(super) last: &'a str,
}

/// The pager of a result page: the link to the index, the previous and
/// next page, and on the top pager (`bottom` false) the first and last.
pub(super) fn pager(o: &mut String, p: &Pager<'_>, bottom: bool) {
    let _ = write!(
        o,
        "<nav class={}><a href=\"index.html\">↑ index</a>",
        if bottom { "\"pager bottom\"" } else { "pager" }
    );
    if p.pages > 0 {
        o.push('\n');
        if p.prev.is_empty() {
            if !bottom {
                o.push_str("<span class=dis>« first</span> ");
            }
            o.push_str("<span class=dis>‹ previous</span>");
        } else {
            if !bottom {
                let _ = write!(o, "<a href=\"{}\">« first</a> ", Esc(p.first));
            }
            let _ = write!(o, "<a href=\"{}\" rel=prev>‹ previous</a>", Esc(p.prev));
        }
        let _ = writeln!(o, "\n<span class=mut>page {} of {}</span>", p.page, p.pages);
        if p.next.is_empty() {
            o.push_str("<span class=dis>next ›</span>");
            if !bottom {
                o.push_str(" <span class=dis>last »</span>");
            }
        } else {
            let _ = write!(o, "<a href=\"{}\" rel=next>next ›</a>", Esc(p.next));
            if !bottom {
                let _ = write!(o, " <a href=\"{}\">last »</a>", Esc(p.last));
            }
        }
    }
    o.push_str("</nav>");
}

/// [`row_link`] into a new string.
pub(super) fn row_link_html(r: &RowLink<'_>, name1: &str, name2: &str) -> String {
    let mut o = String::with_capacity(256);
    row_link(&mut o, r, name1, name2);
    o
}

/// [`cause_link`] into a new string.
pub(super) fn cause_link_html(c: &CauseLink<'_>, name1: &str, name2: &str) -> String {
    let mut o = String::with_capacity(512);
    cause_link(&mut o, c, name1, name2);
    o
}

/// [`excluded`] into a new string.
pub(super) fn excluded_html(e: &Excluded<'_>) -> String {
    let mut o = String::with_capacity(128);
    excluded(&mut o, e);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::html::parts::ExOp;

    fn link<'a>(href: &str, key2: &'a str, lines: (Option<u64>, Option<u64>)) -> RowLink<'a> {
        RowLink {
            href: href.into(),
            key1: "layers.0/op_1_mm<a>",
            key2,
            st: "only2",
            chip: "",
            sg: "none",
            line1: lines.0,
            line2: lines.1,
            phase: "forward",
            index: 7,
        }
    }

    #[test]
    fn a_row_link_escapes_log_text_and_says_when_the_row_is_on_no_page() {
        let mut o = String::new();
        row_link(&mut o, &link("", "k2\"", (Some(12), Some(0))), "a&b", "<b>");
        assert_eq!(
            o,
            "<span class=fdk title=\"on no page: the pages hold only diverging rows\">\
             layers.0/op_1_mm&lt;a&gt;</span> <span class=mut>↔</span> \
             <span class=fdk>k2&quot;</span>\n<span class=fdmeta><b class=\"bd only2\">only \
             &lt;b&gt;</b> <span class=mut>row 7 · <span class=clip title=\"a&amp;b\">a&amp;b</span> \
             line 12 · forward</span></span>"
        );
        let mut o = String::new();
        row_link(
            &mut o,
            &link("rank0-page0.html#r7", "", (None, None)),
            "a",
            "b",
        );
        assert!(o.starts_with(
            "<a class=fdk href=\"rank0-page0.html#r7\">layers.0/op_1_mm&lt;a&gt;</a>\n"
        ));
        assert!(o.ends_with("<span class=mut>row 7 · forward</span></span>"));
    }

    #[test]
    fn a_one_sided_cause_names_the_op_that_feeds_its_row() {
        let c = CauseLink {
            row: Some(link("p.html#r1", "", (None, None))),
            kind: "one-sided op",
            fed_by: Some(link("p.html#r0", "", (None, None))),
            in_its_place: None,
            inherited: 1,
            count: 3,
            counted: "origins/entries",
            via_collectives: String::new(),
        };
        let o = cause_link_html(&c, "a", "b");
        assert!(o.starts_with(
            "<b class=\"bd cause\">one-sided op</b> <a class=fdk href=\"p.html#r0\">"
        ));
        let feeds = o.find(" <span class=mut>feeds</span> <a class=fdk href=\"p.html#r1\">");
        assert!(feeds.is_some(), "{o}");
        assert!(o.ends_with(
            " <span class=mut>· 1 inherited row traces back here</span> \
             <span class=mut>· 3 origins/entries in all</span>"
        ));
        let via = CauseLink {
            row: None,
            kind: "",
            fed_by: None,
            in_its_place: None,
            inherited: 0,
            count: 0,
            counted: "origins/entries",
            via_collectives: "rank 1, 2".into(),
        };
        assert_eq!(
            cause_link_html(&via, "a", "b"),
            "<span class=mut>divergence only enters via collectives; see rank 1, 2</span>"
        );
    }

    #[test]
    fn excluded_chips_mark_ops_the_other_run_lacks() {
        let e = Excluded {
            name: "run<1>",
            ranks: "ranks 0–3".into(),
            recorded: true,
            ops: vec![
                ExOp {
                    op: "aten.view",
                    only: false,
                },
                ExOp {
                    op: "aten.t",
                    only: true,
                },
            ],
            only: "aten.t".into(),
        };
        assert_eq!(
            excluded_html(&e),
            "<div class=exrow><span class=exname>run&lt;1&gt; <span class=mut>(ranks 0–3)</span>:</span> \
             <span class=xchip>aten.view</span><span class=\"xchip xo\" title=\"only in run&lt;1&gt;\">aten.t</span> \
             <span class=exonly>only in run&lt;1&gt;: aten.t</span></div>"
        );
        let none = Excluded {
            recorded: false,
            ops: Vec::new(),
            only: String::new(),
            ranks: String::new(),
            ..e
        };
        assert_eq!(
            excluded_html(&none),
            "<div class=exrow><span class=exname>run&lt;1&gt;:</span> <span class=mut>not recorded</span></div>"
        );
    }

    #[test]
    fn the_bottom_pager_has_no_first_and_last_links() {
        let p = Pager {
            page: 1,
            pages: 2,
            prev: "",
            next: "r-page1.html",
            first: "r-page0.html",
            last: "r-page1.html",
        };
        let mut top = String::new();
        pager(&mut top, &p, false);
        assert_eq!(
            top,
            "<nav class=pager><a href=\"index.html\">↑ index</a>\n<span class=dis>« first</span> \
             <span class=dis>‹ previous</span>\n<span class=mut>page 1 of 2</span>\n\
             <a href=\"r-page1.html\" rel=next>next ›</a> <a href=\"r-page1.html\">last »</a></nav>"
        );
        let mut bottom = String::new();
        pager(&mut bottom, &p, true);
        assert!(bottom.starts_with("<nav class=\"pager bottom\">"));
        assert!(!bottom.contains("first") && !bottom.contains("last"));
    }
}
