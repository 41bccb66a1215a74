//! HTML pages. Pages written once per report use tera templates in
//! `templates/` (embedded at build time): the index and a step series'
//! index. The pages every rank gets, its result pages, are written by byte
//! writers, so a rank costs about what its rows cost. One module per page
//! kind or part: [`engine`] (tera, escaping, rendering), `page` (result
//! pages), `heatmap` (a rank's heatmap), `keys` (the key index), `index`
//! (the index page), `steps` (a series' index); `markup` (the HTML pieces
//! result pages and the index share: badges, row and cause links,
//! excluded-op chips, the pager) and `parts` (the data behind them). File
//! names come from [`crate::report::files`].
//!
//! Every rank gets one or more result pages (`rank{N}-page{k}.html`,
//! [`ReportOptions::page_rows`](crate::report::ReportOptions::page_rows)
//! result rows each; the first also shows the rank's heatmap, an inline
//! SVG of layers × op type) and a key index, a line of the file of its
//! block of 64 ranks (`keys-{B}.js`, written with the index): no file but
//! its pages, since at thousands of ranks creating a file costs more than
//! writing its bytes. The comparison gets an `index.html` that embeds each
//! rank's heatmap (cut out of its first page), lists its origins and
//! entries, and searches a rank's keys (loading its key-index file only
//! when the search box is used); above 64 ranks it lists rank groups and loads
//! the table of every rank in parts (`ranks-{K}.js`). Result pages link
//! the folder's one `report.css` and `report.js`; the index carries its
//! own CSS and script. Nothing is loaded from the network, so a report
//! works from `file://`.
//!
//! Result pages: `page` writes each page's frame (header, counts, first
//! divergence and cause, excluded ops, filters, the section tables'
//! heads, the colour rules), then the page's rows as JSON from
//! `rowdata.rs`, which the page script draws: serialising rows is much
//! faster than rendering them through a template (`docs/performance.md`).
//!
//! Escaping: all log text (keys, locations, shapes, hashes, producers, run
//! names, op names) reaches the templates only through `{{ }}` expressions
//! with autoescape on (every template name ends in `.html`), and the byte
//! writers (`page`, `heatmap`, `markup`) pass every text through the same
//! escape function (`engine::escape`). The index's `| safe` values are
//! markup built by `markup` and the heatmap cut out of a first page. In a
//! page's row JSON every `<` is written `\u003c`, so no log text can end
//! its `<script>` element, and the page script escapes every string it
//! puts into markup (`tests/browser.rs` checks hostile keys, locations
//! and run names). The key search reads keys from `keys-{B}.js`, where
//! they are JSON strings passed to a function, and shows them with
//! `textContent`. The colour rules in a page's `<style>` are built from
//! numbers only.
//!
//! Cells: a differing cell gets a colour class (below); a value holding NaN
//! or Inf gets `nf`, and a difference involving one `nfx` (the NaN/Inf
//! side) and `nfd` (the other), never a class of the finite scale. Each row
//! shows its notes ([`crate::matcher::notes::row_notes`]; root cause, dtype
//! and shape changes and non-gating rows as chips) and the tolerance or rule
//! that judged it (the key cell's title; a chip on diverging rows judged by
//! a rule or a per-dtype default).
//!
//! Memory: a page is built from its own rows only, each row serialised and
//! dropped in turn, so memory is bounded by the page size (times the rayon
//! threads writing pages at once), not by the number of rows.
//!
//! Colours: differing cells
//! are coloured through classes (`x1`, `x2`, ...) whose rules each page
//! defines in its `<style>`, one per distinct colour, computed with
//! [`crate::report::colour::diff_colour`] (dark theme, the reference's scale) and
//! [`crate::report::colour::light_colour`];
//! the relative difference is the title of run 2's cell (the page script
//! shows it on run 1's too).

pub mod engine;
mod heatmap;
mod index;
mod keys;
mod markup;
mod page;
mod parts;
mod steps;
#[cfg(test)]
mod tests;

pub use engine::prepare;
pub use index::write_index;
pub use keys::{
    read_file as read_keys_file, read_legacy as read_legacy_keys_file,
    write_files as write_keys_files,
};
pub use page::write_rank_pages;
pub use parts::left_out_note;
pub use steps::{gate_shade, loss_svg, write_steps_index};
