//! Helpers shared by the case tests: reading and writing case files,
//! generated logs, running the binary, and reading its HTML and JSON.

// What every case module uses (they import `common::*`).
pub use std::collections::BTreeSet;
pub use std::io::Write;
pub use std::path::{Path, PathBuf};
pub use std::time::{Duration, Instant};

pub use serde_json::Value;
pub use tempfile::TempDir;

pub(crate) use crate::support;
pub use crate::support::{counts, gzip, write, Run};

// ------------------------------------------------------------------ inputs

/// `../shared/cases`.
pub fn cases() -> PathBuf {
    let shared = env!("ACTDIFF_SHARED_DIR");
    assert!(
        !shared.is_empty(),
        "../shared is absent: these tests need ../shared/cases"
    );
    PathBuf::from(shared).join("cases")
}

/// The folder of one case.
pub fn case_dir(name: &str) -> PathBuf {
    let d = cases().join(name);
    assert!(d.is_dir(), "{}: no such case folder", d.display());
    d
}

/// The bytes of one file of a case.
pub fn case_file(case: &str, file: &str) -> Vec<u8> {
    let p = case_dir(case).join(file);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The text of one file of a case.
pub fn case_text(case: &str, file: &str) -> String {
    String::from_utf8(case_file(case, file)).unwrap()
}

/// Deterministic pseudo-random bytes (xorshift64).
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Python's `{:.6e}`: `5.000000e-01` (Rust writes `5.000000e-1`).
pub fn py_e6(x: f64) -> String {
    let s = format!("{x:.6e}");
    let (m, e) = s.split_once('e').unwrap();
    let e: i32 = e.parse().unwrap();
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// One block of the template of cases 19 and 20: `h = 1 + i`, times 1.0001
/// when `bumped`.
pub fn template_block(w: &mut impl Write, i: u64, bumped: bool) -> std::io::Result<()> {
    let mut h = (1 + i) as f64;
    if bumped {
        h *= 1.0001;
    }
    write!(
        w,
        "[layers.{}.blk/op_{}_mm]\n  Shape: torch.Size([128, 128]), Dtype: torch.bfloat16\n  L2 norm: {}\n  Min: -1.000000e+00\n  Max: 1.000000e+00\n  Mean: 0.000000e+00\n  Output hash: {}\n  Location: model/blk.py:{}\n\n",
        i % 80,
        i / 80,
        py_e6(0.5 * h),
        py_e6(h),
        i % 500
    )
}

/// Writes a log of `n` template blocks (cases 19 and 20) to `w`.
pub fn template_log(
    w: &mut impl Write,
    n: u64,
    bumped: impl Fn(u64) -> bool,
) -> std::io::Result<()> {
    write!(w, "Total captured activations: {n}\n{}\n\n", "=".repeat(80))?;
    for i in 0..n {
        template_block(w, i, bumped(i))?;
    }
    Ok(())
}

/// Writes `dir/name` as a template log; returns its size in bytes.
pub fn template_file(dir: &Path, name: &str, n: u64, bumped: impl Fn(u64) -> bool) -> u64 {
    let p = dir.join(name);
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&p).unwrap());
    template_log(&mut w, n, bumped).unwrap();
    w.flush().unwrap();
    drop(w);
    std::fs::metadata(&p).unwrap().len()
}

/// The key of template block `i`.
pub fn template_key(i: u64) -> String {
    format!("layers.{}.blk/op_{}_mm", i % 80, i / 80)
}

// ------------------------------------------------------------------ runs

/// Runs `actdiff ARGS -o TMP/out --rows TMP/rows.jsonl` with `dir` as the
/// current folder ([`Run::of`]: never accepts a panic or a death by signal).
/// The report folder and the rows file live in a temporary folder, removed
/// when the run is dropped.
pub fn actdiff(dir: &Path, args: &[&str]) -> Run {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    let rows = tmp.path().join("rows.jsonl");
    Run::of(
        support::actdiff()
            .current_dir(dir)
            .args(args)
            .arg("-o")
            .arg(&out)
            .arg("--rows")
            .arg(&rows),
        out,
    )
    .with_rows(rows)
    .holding(tmp)
}

/// Runs a case's command from its folder.
pub fn in_case(case: &str, args: &[&str]) -> Run {
    actdiff(&case_dir(case), args)
}

/// What the case tests read from a run's report, besides [`Run`]'s own.
impl Run {
    /// Rank `i` of `summary.json`.
    pub fn rank(&self, i: usize) -> Value {
        self.summary()["ranks"][i].clone()
    }
    /// The first row of rank 0 whose run-1 (else run-2) key is `key`, with
    /// its index among rank 0's rows.
    pub fn row_at(&self, key: &str) -> (usize, Value) {
        let rows: Vec<Value> = self.rows().into_iter().filter(|r| r["rank"] == 0).collect();
        rows.iter()
            .position(|r| r["key1"] == key)
            .or_else(|| rows.iter().position(|r| r["key2"] == key))
            .map(|i| (i, rows[i].clone()))
            .unwrap_or_else(|| panic!("no row `{key}` in {rows:#?}\n{}", self.context()))
    }
    pub fn row(&self, key: &str) -> Value {
        self.row_at(key).1
    }
    /// Asserts a row's status and pairing pass (`None`: unpaired).
    pub fn row_is(&self, key: &str, status: &str, strategy: Option<&str>) -> Value {
        let r = self.row(key);
        assert_eq!(r["status"], status, "status of {key}: {r}");
        match strategy {
            Some(s) => assert_eq!(r["strategy"], s, "strategy of {key}: {r}"),
            None => assert!(r["strategy"].is_null(), "strategy of {key}: {r}"),
        }
        r
    }
    /// Every HTML page of the report, by file name.
    pub fn pages(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir(&self.out)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", self.out.display(), self.context()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "html"))
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect();
        v.sort();
        assert!(!v.is_empty(), "no HTML written:\n{}", self.context());
        v
    }
    /// All HTML pages, concatenated.
    pub fn html(&self) -> String {
        self.pages().into_iter().map(|(_, t)| t).collect()
    }
    /// One HTML page.
    pub fn page(&self, name: &str) -> String {
        let p = self.out.join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
    /// Total size of the HTML pages.
    pub fn html_bytes(&self) -> u64 {
        self.pages().iter().map(|(_, t)| t.len() as u64).sum()
    }
    /// The data of rank 0's result row `key` on its page, as JSON text
    /// ([`tbody`]).
    pub fn tbody(&self, key: &str) -> String {
        let (i, _) = self.row_at(key);
        let html = self.html();
        tbody(&html, &format!("rank0-row{i}"))
            .unwrap_or_else(|| panic!("no row {i} ({key}) on the pages"))
    }
}

pub fn notes(row: &Value) -> Vec<String> {
    row["notes"]
        .as_array()
        .map(|a| a.iter().map(|n| n.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

pub fn has_note(row: &Value, part: &str) -> bool {
    notes(row).iter().any(|n| n.contains(part))
}

pub fn assert_note(row: &Value, part: &str) {
    assert!(has_note(row, part), "row lacks a note `{part}`: {row}");
}

/// The key of a row reference in `summary.json` (run 1's, else run 2's).
pub fn ref_key(v: &Value) -> &str {
    v["key1"]
        .as_str()
        .or(v["key2"].as_str())
        .unwrap_or_else(|| panic!("not a row reference: {v}"))
}

// ------------------------------------------------------------------ HTML

/// The result rows a page (or several pages, concatenated) carries for its
/// script to draw, with their section: `("forward" | "backward", row)`.
/// (The rows are JSON in `<script type="application/json" id=rows>`; see
/// `src/report/rowdata.rs`. How the browser draws them is checked in
/// tests/browser.rs.)
pub fn page_rows(html: &str) -> Vec<(String, Value)> {
    const OPEN: &str = "<script type=\"application/json\" id=rows>";
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(p) = rest.find(OPEN) {
        let body = &rest[p + OPEN.len()..];
        let end = body.find("</script>").expect("the row data ends");
        assert!(!body[..end].contains('<'), "a raw `<` in the row data");
        let data: Value = serde_json::from_str(&body[..end]).expect("the row data is JSON");
        for sec in ["forward", "backward"] {
            for row in data[sec].as_array().expect("a section of rows") {
                out.push((sec.to_string(), row.clone()));
            }
        }
        rest = &body[end..];
    }
    out
}

/// The data of result row `anchor` (`rank0-row3`) in `html`, as JSON text
/// (keys, chips, notes, titles and every cell's text and class).
pub fn tbody(html: &str, anchor: &str) -> Option<String> {
    page_rows(html)
        .into_iter()
        .find(|(_, r)| r["id"] == anchor)
        .map(|(_, r)| r.to_string())
}

/// One data cell as drawn: its class attribute and its text.
#[derive(Debug)]
pub struct Cell {
    pub class: Option<String>,
    pub text: String,
}

/// The data cells (both sides) of one row's data (JSON text from
/// [`tbody`]) or of every row of a page.
pub fn cells(text: &str) -> Vec<Cell> {
    let rows: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(text).expect("row data")]
    } else {
        page_rows(text).into_iter().map(|(_, r)| r).collect()
    };
    let mut out = Vec::new();
    for row in &rows {
        for side in row["s"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_array)
        {
            for c in side {
                out.push(match c {
                    Value::String(t) => Cell {
                        class: None,
                        text: t.clone(),
                    },
                    c => {
                        let text = if c["m"] == true {
                            "—".to_string()
                        } else if let Some(v) = c["v"].as_array() {
                            let hs: Vec<&str> =
                                v.iter().map(|h| h["h"].as_str().unwrap()).collect();
                            hs.join(", ")
                        } else {
                            c["t"].as_str().unwrap_or("").to_string()
                        };
                        let class = match (c["x"].as_u64(), c["k"].as_str()) {
                            (Some(x), _) => Some(format!("x{x}")),
                            (None, Some(k)) => Some(k.to_string()),
                            _ => None,
                        };
                        Cell { class, text }
                    }
                });
            }
        }
    }
    out
}

/// The value of attribute `name` in a tag's attribute text.
pub fn attr(attrs: &str, name: &str) -> Option<String> {
    let pat = format!("{name}=");
    let mut from = 0;
    while let Some(p) = attrs[from..].find(&pat) {
        let i = from + p;
        if i == 0 || attrs.as_bytes()[i - 1].is_ascii_whitespace() {
            let v = &attrs[i + pat.len()..];
            return Some(match v.strip_prefix('"') {
                Some(q) => q[..q.find('"').unwrap_or(q.len())].to_string(),
                None => v[..v.find(char::is_whitespace).unwrap_or(v.len())].to_string(),
            });
        }
        from = i + pat.len();
    }
    None
}

/// The `<td>` cells of an HTML fragment (the index's tables).
pub fn html_cells(fragment: &str) -> Vec<Cell> {
    let mut out = Vec::new();
    let mut rest = fragment;
    while let Some(p) = rest.find("<td") {
        rest = &rest[p + 3..];
        if !rest.starts_with(['>', ' ', '\t', '\n']) {
            continue;
        }
        let Some(gt) = rest.find('>') else { break };
        let attrs = &rest[..gt];
        rest = &rest[gt + 1..];
        let end = rest.find('<').unwrap_or(rest.len());
        out.push(Cell {
            class: attr(attrs, "class"),
            text: rest[..end].trim().to_string(),
        });
    }
    out
}

pub fn is_nonfinite_text(t: &str) -> bool {
    matches!(
        t.to_ascii_lowercase().as_str(),
        "nan" | "-nan" | "inf" | "+inf" | "-inf" | "infinity" | "-infinity"
    )
}

/// The bodies of the CSS rules for `.class` in `html`.
pub fn css_rules(html: &str, class: &str) -> Vec<String> {
    let pat = format!(".{class}");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = html[from..].find(&pat) {
        let after = &html[from + p + pat.len()..];
        let t = after.trim_start();
        if let Some(body) = t.strip_prefix('{') {
            out.push(body[..body.find('}').unwrap_or(body.len())].to_string());
        }
        from += p + pat.len();
    }
    out
}

/// The alpha of a rule's `background: rgba(...)` (0 without a background).
pub fn background_alpha(rule: &str) -> f64 {
    let Some(p) = rule.find("background") else {
        return 0.0;
    };
    let v = &rule[p..];
    match v.find("rgba(") {
        Some(q) => {
            let inner = &v[q + 5..v[q..].find(')').map_or(v.len(), |e| q + e)];
            inner.rsplit(',').next().unwrap().trim().parse().unwrap()
        }
        None => 1.0,
    }
}

/// Asserts no cell of an HTML row is highlighted: every colour class it
/// uses has a transparent background.
pub fn no_highlighted_cell(page: &str, body: &str) {
    for c in cells(body) {
        if let Some(class) = c.class.as_deref().filter(|k| k.starts_with('x')) {
            let rules = css_rules(page, class);
            assert!(!rules.is_empty(), "no CSS rule for .{class}");
            for rule in rules {
                assert_eq!(
                    background_alpha(&rule),
                    0.0,
                    "cell {c:?} is highlighted: {rule}"
                );
            }
        }
    }
}

// ------------------------------------------------------------------ measured runs

/// A run whose peak memory and wall time were measured.
pub struct Measured {
    pub code: i32,
    pub stderr: String,
    pub wall: Duration,
    /// Peak resident set size (VmHWM) in bytes, where /proc tells it.
    pub peak_rss: Option<u64>,
    /// Peak anonymous memory (RssAnon: heap and stacks, not the mapped,
    /// page-cache-backed input files) in bytes, sampled.
    pub peak_anon: Option<u64>,
}

/// Peak RSS of process `pid` in bytes (Linux: `VmHWM` in /proc).
pub fn vm_hwm(pid: u32) -> Option<u64> {
    proc_status(pid, "VmHWM:")
}

/// A `kB` field of /proc/PID/status, in bytes.
pub fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs `actdiff ARGS` in `dir` with stdout and stderr to files (as when
/// piped), sampling its peak RSS until it exits.
pub fn measured(dir: &Path, args: &[&str]) -> Measured {
    let so = std::fs::File::create(dir.join("stdout.txt")).unwrap();
    let se = std::fs::File::create(dir.join("stderr.txt")).unwrap();
    let start = Instant::now();
    let mut child = support::actdiff()
        .current_dir(dir)
        .args(args)
        .stdout(so)
        .stderr(se)
        .spawn()
        .unwrap();
    let mut peak = None;
    let mut anon = None;
    let status = loop {
        if let Some(p) = vm_hwm(child.id()) {
            peak = Some(peak.unwrap_or(0).max(p));
        }
        if let Some(a) = proc_status(child.id(), "RssAnon:") {
            anon = Some(anon.unwrap_or(0).max(a));
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(dir.join("stderr.txt")).unwrap();
    let code = status.code().expect("actdiff was killed by a signal");
    assert!(
        code != 101 && !stderr.contains("panicked"),
        "actdiff panicked:\n{stderr}"
    );
    Measured {
        code,
        stderr,
        wall: start.elapsed(),
        peak_rss: peak,
        peak_anon: anon,
    }
}

/// The HTML size budget of case 20 ("e.g. 20 MB").
pub const HTML_BUDGET: u64 = 20_000_000;

// ------------------------------------------------------------------ keys

/// Keys of case 01's logs, which several cases' logs share.
pub const WQ: &str = "layers.0.attention.wq/op_0_mm";
/// See [`WQ`].
pub const WO: &str = "layers.0.attention.wo/op_0_mm";
/// See [`WQ`].
pub const ADD: &str = "layers.0.attention/op_0_add";
