//! Tolerance policy: which tolerance judges a row, whether its stats gate,
//! whether it is ignored, and whether it is the output of an asynchronous
//! collective captured before it completed ("unsynced").
//!
//! Resolution order for a row: the first [`Rule`] that matches it (key regex
//! over the whole raw key, and optionally op name, phase, dtype), else the
//! per-dtype default for its dtype, else the global default. The global
//! default is the reference's rule (hashes: relative 1e-8; stats shown, not
//! gating) unless `--rtol`/`--atol`/`--bitwise` say otherwise.
//!
//! Rules come from `actdiff.toml` ([`Policy::from_toml`]) or a rules text
//! file ([`parse_rules_text`]): one rule per line, `<key regex> <predicate>`,
//! where the predicate is `rel <= X` and `abs <= Y` terms joined by `or` or
//! `and` (`and` binds tighter; parentheses group) that come down to one
//! tolerance: `rel <= X`, `abs <= Y`, `rel <= X or abs <= Y` or
//! `rel <= X and abs <= Y`.

use std::path::Path;

use regex::bytes::Regex;

use super::compare::{CompareOptions, Tolerance};
use crate::parser::Phase;

/// The smallest normal float32, used as the default absolute floor when the
/// stats gate: a subnormal against zero is not a divergence by default.
pub const F32_MIN_NORMAL: f64 = 1.175_494_350_822_287_5e-38;

/// Ops whose outputs are, by default, captured before their asynchronous
/// collective completed: shown, never gating, never an origin.
pub const DEFAULT_UNSYNCED_OPS: &[&str] = &[
    "_allgather_base_",
    "_reduce_scatter_base_",
    "all_gather_into_tensor",
    "all_gather_into_tensor_out",
    "reduce_scatter_tensor",
    "all_reduce",
    "all_reduce_",
    "allreduce_",
    "all_to_all_single",
    "broadcast_",
    "reduce_scatter_",
    "allgather_",
    "_c10d_functional.all_gather_into_tensor",
    "_c10d_functional.reduce_scatter_tensor",
    "_c10d_functional.all_reduce",
];

/// Errors in a rules or config file: `file:line:column: message`, or
/// `file: message` for a file that cannot be read (`line` 0).
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", position(*line, *column))]
pub struct RuleError {
    /// The file.
    pub file: String,
    /// 1-based line; 0 when the error is the whole file's (unreadable).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What was expected.
    pub message: String,
}

/// `:line:column` of a [`RuleError`], or nothing for the whole file.
fn position(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}:{column}")
    }
}

/// One ordered tolerance rule.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Where the rule was written (`file:line`), for the report.
    pub origin: String,
    /// The key pattern as written.
    pub key_src: String,
    /// Matches the whole raw key.
    pub key: Option<Regex>,
    /// Matches the whole op name (`mm`, `_fused_adamw_`).
    pub op: Option<Regex>,
    /// `forward`, `backward` or `optimizer` ([`crate::parser::Phase`]).
    pub phase: Option<Phase>,
    /// Dtype name without `torch.` (`bfloat16`).
    pub dtype: Option<String>,
    /// Tolerance for hashes and gating stats; `None` keeps the default's.
    pub tol: Option<Tolerance>,
    /// Whether the stats (L2 norm, Min, Max, Mean) gate; `None`: they do
    /// whenever the rule sets a tolerance.
    pub gate_stats: Option<bool>,
    /// Rows matched are shown but never gate.
    pub ignore: bool,
    /// Overrides the unsynced-collective default for matched rows.
    pub unsynced: Option<bool>,
    /// Whether Input hashes gate matched rows (`None`: as the default).
    /// Not in the rules syntax: set by the layout stage for ops whose
    /// inputs have no whole-tensor value (`crate::layout`).
    pub gate_inputs: Option<bool>,
}

impl Rule {
    fn matches(&self, key: &[u8], op: &[u8], phase: Phase, dtype: &str) -> bool {
        if let Some(k) = &self.key {
            if !k.is_match(key) {
                return false;
            }
        }
        if let Some(o) = &self.op {
            if !o.is_match(op) {
                return false;
            }
        }
        if self.phase.is_some_and(|p| p != phase) {
            return false;
        }
        if let Some(d) = &self.dtype {
            if d != dtype {
                return false;
            }
        }
        true
    }
    /// A short description for the report (`rules.txt:2 rel <= 1e-5`).
    pub fn describe(&self) -> String {
        let mut s = self.origin.clone();
        if self.ignore {
            s.push_str(" ignore");
        }
        if let Some(t) = self.tol {
            s.push(' ');
            s.push_str(&describe_tolerance(&t));
        }
        s
    }
}

/// `rel <= X or abs <= Y` (`and` for [`Tolerance::both`]).
fn describe_tolerance(t: &Tolerance) -> String {
    let join = if t.both { "and" } else { "or" };
    format!("rel <= {:e} {join} abs <= {:e}", t.rtol, t.atol)
}

/// Anchors a user regex so it must match the whole text.
fn full_regex(src: &str, file: &str, line: usize, column: usize) -> Result<Regex, RuleError> {
    // The pattern alone first, so that an error shows what was written, not
    // the anchored form.
    Regex::new(src)
        .and_then(|_| Regex::new(&format!("^(?:{src})$")))
        .map_err(|e| RuleError {
            file: file.into(),
            line,
            column,
            message: format!("invalid regex `{src}`: {e}"),
        })
}

/// Where the tolerance of a row came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The global default.
    Default,
    /// The per-dtype default of [`Policy::dtype`] entry `i`.
    Dtype(u16),
    /// Rule `i` of [`Policy::rules`].
    Rule(u16),
}

/// The judgement settings of one row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowPolicy {
    /// Tolerances and NaN handling.
    pub opts: CompareOptions,
    /// Where they came from.
    pub source: Source,
    /// Shown, never gating (`--ignore-op` or a rule with `ignore = true`).
    pub ignored: bool,
    /// Output of an asynchronous collective: shown, never gating, never an origin.
    pub unsynced: bool,
}

/// All tolerance settings of a comparison.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The global default.
    pub default: CompareOptions,
    /// Per-dtype defaults: (dtype name without `torch.`, tolerance); stats gate for these rows.
    pub dtype: Vec<(String, Tolerance)>,
    /// Where each of the first `dtype_origins.len()` entries of
    /// [`Policy::dtype`] was written (`actdiff.toml [dtype.bfloat16]`): a
    /// config's sections, which are warned about when they judge no row;
    /// the entries after them are `--dtype-tolerance`'s built-in defaults.
    pub dtype_origins: Vec<String>,
    /// Ordered rules; the first match wins.
    pub rules: Vec<Rule>,
    /// Op names treated as unsynced collectives.
    pub unsynced_ops: Vec<String>,
    /// Op names ignored (`--ignore-op`).
    pub ignore_ops: Vec<String>,
    /// Every row must match a rule (`--rules-exhaustive`).
    pub exhaustive: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            default: CompareOptions::default(),
            dtype: Vec::new(),
            dtype_origins: Vec::new(),
            rules: Vec::new(),
            unsynced_ops: DEFAULT_UNSYNCED_OPS.iter().map(|s| s.to_string()).collect(),
            ignore_ops: Vec::new(),
            exhaustive: false,
        }
    }
}

/// The dtype name in a Shape text (`torch.Size([2]), Dtype: torch.bfloat16` → `bfloat16`).
pub fn dtype_of(shape: &[u8]) -> &str {
    crate::logformat::read_shape(shape).dtype()
}

impl Policy {
    /// The settings for one row. `key` is the raw key, `op` the op name.
    pub fn for_row(&self, key: &[u8], op: &[u8], phase: Phase, dtype: &str) -> RowPolicy {
        let mut rp = RowPolicy {
            opts: self.default,
            source: Source::Default,
            ignored: self.ignore_ops.iter().any(|o| o.as_bytes() == op),
            unsynced: self.unsynced_ops.iter().any(|o| o.as_bytes() == op),
        };
        if let Some((i, d)) = self
            .dtype
            .iter()
            .enumerate()
            .find(|(_, (name, _))| name == dtype)
        {
            rp.opts.hash = d.1;
            rp.opts.stats = Some(d.1);
            rp.source = Source::Dtype(i as u16);
        }
        if let Some((i, r)) = self
            .rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(key, op, phase, dtype))
        {
            rp.source = Source::Rule(i as u16);
            if let Some(t) = r.tol {
                rp.opts.hash = t;
                if r.gate_stats != Some(false) {
                    rp.opts.stats = Some(t);
                }
            } else if r.gate_stats == Some(true) {
                rp.opts.stats = Some(rp.opts.hash);
            } else if r.gate_stats == Some(false) {
                rp.opts.stats = None;
            }
            if r.ignore {
                rp.ignored = true;
            }
            if let Some(u) = r.unsynced {
                rp.unsynced = u;
            }
            if let Some(g) = r.gate_inputs {
                rp.opts.gate_inputs = g;
            }
        }
        rp
    }

    /// The settings for run row `r` of `t` (its raw key, op name, phase and dtype).
    pub fn for_table_row(&self, t: &crate::parser::OpTable, r: usize) -> RowPolicy {
        let key = t.key(r);
        let op = t.op_name(t.op_type(r));
        // Reading the dtype costs a search of the Shape text: only when asked for.
        let needs_dtype = !self.dtype.is_empty() || self.rules.iter().any(|r| r.dtype.is_some());
        let dtype = if needs_dtype {
            dtype_of(t.field(r, crate::parser::Field::Shape))
        } else {
            ""
        };
        self.for_row(key, op, t.phase_kind(r), dtype)
    }

    /// The settings for a pair of rows: run 1's, except when no rule judged
    /// run 1's row and run 2's row has another dtype (bfloat16 → float8)
    /// with a per-dtype default. Then, if run 1's dtype has a per-dtype
    /// default too, run 2's applies when its `rtol` is larger; if run 1's
    /// row got the global default, run 2's dtype default applies, whether or
    /// not it is looser than the global one.
    pub fn for_pair(
        &self,
        t1: &crate::parser::OpTable,
        r1: usize,
        t2: &crate::parser::OpTable,
        r2: usize,
    ) -> RowPolicy {
        let rp = self.for_table_row(t1, r1);
        if self.dtype.is_empty() || matches!(rp.source, Source::Rule(_)) {
            return rp;
        }
        let d2 = dtype_of(t2.field(r2, crate::parser::Field::Shape));
        let other = self
            .dtype
            .iter()
            .enumerate()
            .find(|(_, (name, _))| name == d2);
        let looser = match (rp.source, other) {
            (Source::Dtype(i), Some((j, (_, t)))) if t.rtol > self.dtype[i as usize].1.rtol => {
                Some((j, t))
            }
            (Source::Default, Some((j, (_, t)))) => Some((j, t)),
            _ => None,
        };
        match looser {
            Some((j, t)) => RowPolicy {
                opts: CompareOptions {
                    hash: *t,
                    stats: Some(*t),
                    ..rp.opts
                },
                source: Source::Dtype(j as u16),
                ..rp
            },
            None => rp,
        }
    }

    /// The settings for a result row's sides: for a pair,
    /// [`Policy::for_pair`]'s; for a row of one run, its row's
    /// ([`Policy::for_table_row`]). The one resolution the verdict, root
    /// cause and row notes share.
    pub fn for_sides(
        &self,
        t1: &crate::parser::OpTable,
        t2: &crate::parser::OpTable,
        sides: super::Sides,
    ) -> RowPolicy {
        match sides {
            super::Sides::Both(a, b) => self.for_pair(t1, a, t2, b),
            super::Sides::Only1(a) => self.for_table_row(t1, a),
            super::Sides::Only2(b) => self.for_table_row(t2, b),
        }
    }

    /// A short description of a source, for the report.
    pub fn describe(&self, s: Source) -> String {
        match s {
            Source::Default => {
                let o = &self.default;
                if o.stats.is_none() {
                    format!("default: hashes rel <= {:e}", o.hash.rtol)
                } else {
                    format!("default: {}", describe_tolerance(&o.hash))
                }
            }
            Source::Dtype(i) => {
                let (n, t) = &self.dtype[i as usize];
                format!("{n} default: {}", describe_tolerance(t))
            }
            Source::Rule(i) => self.rules[i as usize].describe(),
        }
    }

    /// Reads an `actdiff.toml` config (see `docs/tolerances.md` for its keys). The
    /// file is read with serde into the sections below; an unknown section
    /// or setting, a value of the wrong type, a negative or non-finite
    /// tolerance, a phase other than `forward`/`backward`/`optimizer` and an invalid
    /// regex are errors at their line and column.
    pub fn from_toml(text: &str, file: &str) -> Result<Policy, RuleError> {
        use toml::Spanned;
        let at = |offset: usize, message: String| {
            let (line, column) = line_col(text, offset);
            RuleError {
                file: file.into(),
                line,
                column,
                message,
            }
        };
        let cfg: ConfigFile = toml::from_str(text).map_err(|e: toml::de::Error| {
            at(
                e.span().map_or(0, |s| s.start),
                e.message().trim_end().to_string(),
            )
        })?;
        let tol = |v: &Option<Spanned<f64>>, what: &str| -> Result<Option<f64>, RuleError> {
            match v {
                Some(x) if !(x.get_ref().is_finite() && *x.get_ref() >= 0.0) => Err(at(
                    x.span().start,
                    format!("{what} must be a finite number >= 0, not {}", x.get_ref()),
                )),
                Some(x) => Ok(Some(*x.get_ref())),
                None => Ok(None),
            }
        };
        let mut p = Policy::default();
        if let Some(d) = &cfg.defaults {
            let (rtol, atol) = (tol(&d.rtol, "rtol")?, tol(&d.atol, "atol")?);
            if rtol.is_some() || atol.is_some() {
                p.default.hash = Tolerance {
                    rtol: rtol.unwrap_or(p.default.hash.rtol),
                    atol: atol.unwrap_or(p.default.hash.atol),
                    both: false,
                };
            }
            match d.gate_stats {
                Some(true) => p.default.stats = Some(p.default.hash),
                Some(false) => p.default.stats = None,
                None => {}
            }
            if let Some(b) = d.nan_equal {
                p.default.nan_equal = b;
            }
        }
        for (name, d) in &cfg.dtype {
            p.dtype_origins.push(format!("{file} [dtype.{name}]"));
            p.dtype.push((
                name.trim_start_matches("torch.").to_string(),
                Tolerance {
                    rtol: tol(&d.rtol, "rtol")?.unwrap_or(0.0),
                    atol: tol(&d.atol, "atol")?.unwrap_or(F32_MIN_NORMAL),
                    both: false,
                },
            ));
        }
        if let Some(unsynced) = cfg.collectives.and_then(|c| c.unsynced) {
            p.unsynced_ops = unsynced;
        }
        for (i, r) in cfg.rule.iter().enumerate() {
            let origin = format!("{file} rule {}", i + 1);
            let regex = |v: &Spanned<String>| {
                let (line, column) = line_col(text, v.span().start);
                full_regex(v.get_ref(), file, line, column)
            };
            let key_src = r
                .key
                .as_ref()
                .map_or_else(|| ".*".to_string(), |k| k.get_ref().clone());
            let key = match &r.key {
                Some(k) => regex(k)?,
                None => full_regex(".*", file, 1, 1)?,
            };
            let (rtol, atol) = (tol(&r.rtol, "rtol")?, tol(&r.atol, "atol")?);
            p.rules.push(Rule {
                origin,
                key: Some(key),
                key_src,
                op: r.op.as_ref().map(regex).transpose()?,
                phase: r.phase.map(PhaseName::phase),
                dtype: r
                    .dtype
                    .as_ref()
                    .map(|d| d.trim_start_matches("torch.").to_string()),
                tol: (rtol.is_some() || atol.is_some()).then(|| Tolerance {
                    rtol: rtol.unwrap_or(0.0),
                    atol: atol.unwrap_or(F32_MIN_NORMAL),
                    both: false,
                }),
                gate_stats: r.gate_stats,
                ignore: r.ignore.unwrap_or(false),
                unsynced: r.unsynced,
                gate_inputs: None,
            });
        }
        Ok(p)
    }

    /// Reads an `actdiff.toml` file.
    pub fn read_toml(path: &Path) -> Result<Policy, RuleError> {
        let text = std::fs::read_to_string(path).map_err(|e| RuleError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: e.to_string(),
        })?;
        Policy::from_toml(&text, &path.display().to_string())
    }
}

/// `actdiff.toml`, as written (see [`Policy::from_toml`]).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    defaults: Option<DefaultsSection>,
    #[serde(default)]
    dtype: std::collections::BTreeMap<String, DtypeSection>,
    collectives: Option<CollectivesSection>,
    #[serde(default)]
    rule: Vec<RuleSection>,
}

/// `[defaults]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultsSection {
    rtol: Option<toml::Spanned<f64>>,
    atol: Option<toml::Spanned<f64>>,
    gate_stats: Option<bool>,
    nan_equal: Option<bool>,
}

/// `[dtype.NAME]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DtypeSection {
    rtol: Option<toml::Spanned<f64>>,
    atol: Option<toml::Spanned<f64>>,
}

/// `[collectives]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CollectivesSection {
    unsynced: Option<Vec<String>>,
}

/// One `[[rule]]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSection {
    key: Option<toml::Spanned<String>>,
    op: Option<toml::Spanned<String>>,
    phase: Option<PhaseName>,
    dtype: Option<String>,
    rtol: Option<toml::Spanned<f64>>,
    atol: Option<toml::Spanned<f64>>,
    gate_stats: Option<bool>,
    ignore: Option<bool>,
    unsynced: Option<bool>,
}

/// A rule's `phase`.
#[derive(serde::Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum PhaseName {
    Forward,
    Backward,
    Optimizer,
}

impl PhaseName {
    fn phase(self) -> Phase {
        match self {
            PhaseName::Forward => Phase::Forward,
            PhaseName::Backward => Phase::Backward,
            PhaseName::Optimizer => Phase::Optimizer,
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}

/// Parses a rules text file: one rule per line, `<key regex> <predicate>`
/// separated by whitespace (see [`parse_predicate`] for the predicate).
/// Blank lines and `#` comments are skipped.
///
/// Errors name the file, line and column: an invalid regex, or a malformed
/// predicate.
pub fn parse_rules_text(text: &str, file: &str) -> Result<Vec<Rule>, RuleError> {
    let mut rules = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let lead = raw.len() - raw.trim_start().len();
        let (pat, rest) = match t.find(char::is_whitespace) {
            Some(p) => (&t[..p], t[p..].trim_start()),
            None => (t, ""),
        };
        let pred_col = lead + t.len() - rest.len() + 1;
        let tol = parse_predicate(rest).map_err(|(at, msg)| RuleError {
            file: file.into(),
            line,
            column: pred_col + at,
            message: format!(
                "malformed predicate `{rest}`: {msg} (expected `rel <= X`, `abs <= Y`, \
                 or both joined by `or` or `and`)"
            ),
        })?;
        rules.push(Rule {
            origin: format!("{file}:{line}"),
            key: Some(full_regex(pat, file, line, lead + 1)?),
            key_src: pat.to_string(),
            op: None,
            phase: None,
            dtype: None,
            tol: Some(tol),
            gate_stats: None,
            ignore: false,
            unsynced: None,
            gate_inputs: None,
        });
    }
    Ok(rules)
}

/// One conjunction of bounds: `rel <= rel and abs <= abs` (infinite: no
/// bound).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bounds {
    rel: f64,
    abs: f64,
}

impl Bounds {
    /// Whether every pair this one accepts, `o` accepts too.
    fn implies(self, o: Bounds) -> bool {
        self.rel <= o.rel && self.abs <= o.abs
    }
}

/// A predicate's tokens: `(`, `)`, `<=`-like operators and words, each with
/// its 0-based byte offset.
fn predicate_tokens(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let op = |c: u8| matches!(c, b'<' | b'>' | b'=' | b'!');
        if c == b'(' || c == b')' {
            i += 1;
        } else if op(c) {
            while i < b.len() && op(b[i]) {
                i += 1;
            }
        } else {
            while i < b.len()
                && !b[i].is_ascii_whitespace()
                && !op(b[i])
                && b[i] != b'('
                && b[i] != b')'
            {
                i += 1;
            }
            // A word may hold multi-byte characters: stop at a char boundary.
            while !text.is_char_boundary(i) {
                i += 1;
            }
        }
        out.push((start, &text[start..i]));
    }
    out
}

/// Parses a rule predicate into a [`Tolerance`]:
///
/// ```text
/// predicate := conjunction ("or" conjunction)*
/// conjunction := term ("and" term)*          (`and` binds tighter than `or`)
/// term := ("rel" | "abs") "<=" number | "(" predicate ")"
/// ```
///
/// `rel` is the relative difference `|a-b| / max(|a|,|b|)`, `abs` the
/// absolute `|a-b|`; numbers are non-negative (`1e-3`, `0`, `inf`). A
/// predicate must come down to what a tolerance judges: `rel <= X`,
/// `abs <= Y`, `rel <= X or abs <= Y`, or `rel <= X and abs <= Y`
/// (repeated bounds of one kind combine: `rel <= 1 and rel <= 2` is
/// `rel <= 1`; a conjunction implied by another of an `or` is dropped).
///
/// Errors: `(byte offset in text, what is wrong)`.
pub fn parse_predicate(text: &str) -> Result<Tolerance, (usize, String)> {
    let toks = predicate_tokens(text);
    if toks.is_empty() {
        return Err((0, "missing".into()));
    }
    let mut pos = 0;
    let dnf = predicate_or(text, &toks, &mut pos)?;
    if let Some(&(at, t)) = toks.get(pos) {
        let msg = if t == ")" {
            "`)` without a matching `(`".to_string()
        } else {
            format!("expected `and`, `or` or the end, found `{t}`")
        };
        return Err((at, msg));
    }
    // Drop conjunctions that another one implies (it accepts more).
    let mut kept: Vec<Bounds> = Vec::new();
    for (i, c) in dnf.iter().enumerate() {
        let dominated = dnf
            .iter()
            .enumerate()
            .any(|(j, o)| j != i && c.implies(*o) && (c != o || j < i));
        if !dominated {
            kept.push(*c);
        }
    }
    let inf = f64::INFINITY;
    let pure = |c: &Bounds| c.rel == inf || c.abs == inf;
    match kept[..] {
        [c] if c.rel < inf && c.abs < inf => Ok(Tolerance {
            rtol: c.rel,
            atol: c.abs,
            both: true,
        }),
        _ if kept.iter().all(pure) => {
            // An `or` of single bounds: the loosest of each kind.
            let loosest = |f: fn(&Bounds) -> f64| {
                kept.iter()
                    .map(f)
                    .filter(|v| *v < inf)
                    .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
            };
            let (rel, abs) = (loosest(|c| c.rel), loosest(|c| c.abs));
            Ok(Tolerance {
                // No bound of a kind: that side never accepts a difference
                // (`agrees` takes equal values before either).
                rtol: rel.unwrap_or(if abs.is_some() { 0.0 } else { inf }),
                atol: abs.unwrap_or(0.0),
                both: false,
            })
        }
        _ => Err((
            0,
            "an `or` of `and` terms that a tolerance cannot hold; write \
             `rel <= X or abs <= Y` or `rel <= X and abs <= Y`"
                .into(),
        )),
    }
}

/// `conjunction ("or" conjunction)*`, as a list of [`Bounds`] (an `or`).
fn predicate_or(
    text: &str,
    toks: &[(usize, &str)],
    pos: &mut usize,
) -> Result<Vec<Bounds>, (usize, String)> {
    let mut out = predicate_and(text, toks, pos)?;
    while toks.get(*pos).is_some_and(|t| t.1 == "or") {
        *pos += 1;
        out.extend(predicate_and(text, toks, pos)?);
    }
    Ok(out)
}

/// `term ("and" term)*`: the product of the terms' `or` lists.
fn predicate_and(
    text: &str,
    toks: &[(usize, &str)],
    pos: &mut usize,
) -> Result<Vec<Bounds>, (usize, String)> {
    let mut out = predicate_term(text, toks, pos)?;
    while toks.get(*pos).is_some_and(|t| t.1 == "and") {
        *pos += 1;
        let rhs = predicate_term(text, toks, pos)?;
        out = out
            .iter()
            .flat_map(|a| {
                rhs.iter().map(move |b| Bounds {
                    rel: a.rel.min(b.rel),
                    abs: a.abs.min(b.abs),
                })
            })
            .collect();
        if out.len() > 64 {
            return Err((toks[*pos - 1].0, "predicate too large".into()));
        }
    }
    Ok(out)
}

/// `("rel" | "abs") "<=" number | "(" predicate ")"`.
fn predicate_term(
    text: &str,
    toks: &[(usize, &str)],
    pos: &mut usize,
) -> Result<Vec<Bounds>, (usize, String)> {
    let end = text.len();
    let Some(&(at, word)) = toks.get(*pos) else {
        return Err((end, "expected `rel` or `abs` here, found the end".into()));
    };
    *pos += 1;
    if word == "(" {
        let inner = predicate_or(text, toks, pos)?;
        return match toks.get(*pos) {
            Some((_, ")")) => {
                *pos += 1;
                Ok(inner)
            }
            Some(&(a, t)) => Err((a, format!("expected `)`, found `{t}`"))),
            None => Err((at, "`(` without a matching `)`".into())),
        };
    }
    let inf = f64::INFINITY;
    let rel = match word {
        "rel" => true,
        "abs" => false,
        _ => return Err((at, format!("expected `rel` or `abs`, found `{word}`"))),
    };
    match toks.get(*pos) {
        Some((_, "<=")) => *pos += 1,
        Some(&(a, t)) => {
            let msg = if matches!(t, "<" | ">" | ">=" | "==" | "=" | "!=") {
                format!("only `<=` is supported, found `{t}`")
            } else {
                format!("expected `<=` after `{word}`, found `{t}`")
            };
            return Err((a, msg));
        }
        None => return Err((end, format!("expected `<=` after `{word}`"))),
    }
    let Some(&(a, v)) = toks.get(*pos) else {
        return Err((end, "expected a number after `<=`".into()));
    };
    *pos += 1;
    let x: f64 = v
        .parse()
        .map_err(|_| (a, format!("`{v}` is not a number")))?;
    if x.is_nan() || x < 0.0 {
        return Err((a, format!("tolerances must be non-negative, not `{v}`")));
    }
    Ok(vec![if rel {
        Bounds { rel: x, abs: inf }
    } else {
        Bounds { rel: inf, abs: x }
    }])
}

/// `--dtype-tolerance`: per-dtype default tolerances for low-precision
/// dtypes (relative: bfloat16 1e-2, float16 1e-3, float8_e4m3fn 1.25e-1,
/// float8_e5m2 2.5e-1; absolute: [`F32_MIN_NORMAL`]), added to `p` for each
/// dtype it has no default for (a config's `[dtype.X]` wins).
pub fn add_dtype_defaults(p: &mut Policy) {
    for (d, rtol) in [
        ("bfloat16", 1e-2),
        ("float16", 1e-3),
        ("float8_e4m3fn", 1.25e-1),
        ("float8_e5m2", 2.5e-1),
    ] {
        if !p.dtype.iter().any(|(n, _)| n == d) {
            p.dtype.push((
                d.to_string(),
                Tolerance {
                    rtol,
                    atol: F32_MIN_NORMAL,
                    both: false,
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_text_and_errors() {
        let r = parse_rules_text(
            ".*\\.experts\\..*     rel <= 1e-3 or abs <= 1e-8\n.*\\.attention\\..*   rel <= 1e-5\n",
            "rules.txt",
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0].tol,
            Some(Tolerance {
                rtol: 1e-3,
                atol: 1e-8,
                both: false,
            })
        );
        assert!(r[1]
            .key
            .as_ref()
            .unwrap()
            .is_match(b"layers.0.attention.wq/op_0_mm"));
        assert!(!r[1].key.as_ref().unwrap().is_match(b"attention"));
        let e = parse_rules_text(
            "a rel <= 1\nb abs <= 2\n.*  rel <=\n",
            "rules_malformed.txt",
        )
        .unwrap_err();
        // The column is where the number is missing (the end of the line).
        assert_eq!((e.line, e.column), (3, 11));
        assert!(
            e.to_string()
                .starts_with("rules_malformed.txt:3:11: malformed predicate"),
            "{e}"
        );
        assert!(parse_rules_text("( rel <= 1", "r")
            .unwrap_err()
            .message
            .contains("invalid regex"));
        assert!(parse_rules_text("a rel < 1", "r").is_err());
        assert!(parse_rules_text("a speed <= 1", "r").is_err());
    }

    fn tol(rtol: f64, atol: f64, both: bool) -> Tolerance {
        Tolerance { rtol, atol, both }
    }

    #[test]
    fn predicates_combine_with_and_or_and_parentheses() {
        for (text, want) in [
            ("rel <= 1e-3", tol(1e-3, 0.0, false)),
            ("abs <= 1e-8", tol(0.0, 1e-8, false)),
            ("rel <= 1e-3 or abs <= 1e-8", tol(1e-3, 1e-8, false)),
            ("abs <= 1e-13 and rel <= 1e-3", tol(1e-3, 1e-13, true)),
            ("(abs <= 1e-13) and (rel <= 1e-3)", tol(1e-3, 1e-13, true)),
            ("rel<=1e-3 and abs<=2", tol(1e-3, 2.0, true)),
            // Repeated bounds of one kind: the tighter under `and`, the
            // looser under `or`.
            ("rel <= 1 and rel <= 2 and abs <= 3", tol(1.0, 3.0, true)),
            ("rel <= 1 or rel <= 2", tol(2.0, 0.0, false)),
            // `and` binds tighter than `or`: the `and` term here is implied
            // by the `rel` alone, so the whole is `rel <= 1e-3 or abs <= 1`.
            (
                "rel <= 1e-3 and abs <= 1e-9 or rel <= 1e-3 or abs <= 1",
                tol(1e-3, 1.0, false),
            ),
            // Parentheses group: `(a or b) and c` = `a and c or b and c`.
            (
                "(rel <= 1e-3 or rel <= 1e-5) and abs <= 1e-8",
                tol(1e-3, 1e-8, true),
            ),
        ] {
            assert_eq!(parse_predicate(text), Ok(want), "{text}");
        }
        // Errors point at the token (0-based offsets within the predicate).
        for (text, at, says) in [
            ("", 0, "missing"),
            ("rel <=", 6, "a number"),
            ("rel < 1", 4, "only `<=`"),
            ("speed <= 1", 0, "`rel` or `abs`"),
            ("rel <= x", 7, "not a number"),
            ("rel <= -1", 7, "non-negative"),
            ("rel <= 1 xor abs <= 2", 9, "`and`, `or`"),
            ("rel <= 1 and", 12, "found the end"),
            ("(rel <= 1", 0, "without a matching `)`"),
            ("rel <= 1)", 8, "without a matching `(`"),
            ("rel <= 1 or", 11, "found the end"),
            // `rel and abs, or rel` does not fit one tolerance.
            (
                "rel <= 1e-3 and abs <= 1e-8 or abs <= 1e-10",
                0,
                "cannot hold",
            ),
        ] {
            let e = parse_predicate(text).unwrap_err();
            assert_eq!(e.0, at, "{text}: {e:?}");
            assert!(e.1.contains(says), "{text}: {e:?}");
        }
        // In a rules file: the column of the bad token on its line.
        let e =
            parse_rules_text("a rel <= 1\n  b   rel <= 1 nand abs <= 2\n", "r.txt").unwrap_err();
        assert_eq!((e.line, e.column), (2, 16), "{e}");
        assert!(
            e.to_string().starts_with("r.txt:2:16: malformed predicate"),
            "{e}"
        );
        let r = parse_rules_text(".* abs <= 1e-13 and rel <= 1e-3\n", "r.txt").unwrap();
        assert_eq!(r[0].tol, Some(tol(1e-3, 1e-13, true)));
        assert_eq!(
            r[0].describe(),
            "r.txt:1 rel <= 1e-3 and abs <= 1e-13",
            "the report names the rule as it judges"
        );
    }

    #[test]
    fn rules_match_the_optimizer_phase() {
        let p =
            Policy::from_toml("[[rule]]\nphase = 'optimizer'\nignore = true\n", "c.toml").unwrap();
        assert!(
            p.for_row(b"<none>/op_6_lerp_", b"lerp_", Phase::Optimizer, "")
                .ignored
        );
        assert!(
            !p.for_row(b"<none>/op_6_lerp_", b"lerp_", Phase::Forward, "")
                .ignored
        );
        assert!(
            !p.for_row(b"<none>/op_6_lerp_", b"lerp_", Phase::Backward, "")
                .ignored
        );
    }

    #[test]
    fn first_matching_rule_wins_then_dtype_then_default() {
        let mut p = Policy::from_toml(
            r#"
[dtype.bfloat16]
rtol = 1e-2
[[rule]]
key = 'layers\.0\..*'
phase = "backward"
ignore = true
[[rule]]
key = 'layers\..*'
op = "mm"
rtol = 1e-3
"#,
            "actdiff.toml",
        )
        .unwrap();
        let r = p.for_row(b"layers.0.w/op_0_mm", b"mm", Phase::Backward, "float32");
        assert!(r.ignored);
        assert_eq!(r.source, Source::Rule(0));
        let r = p.for_row(b"layers.0.w/op_0_mm", b"mm", Phase::Forward, "bfloat16");
        assert_eq!(r.source, Source::Rule(1));
        assert_eq!(r.opts.hash.rtol, 1e-3);
        assert!(r.opts.stats.is_some());
        let r = p.for_row(b"norm/op_0_mul", b"mul", Phase::Forward, "bfloat16");
        assert_eq!(r.source, Source::Dtype(0));
        assert_eq!(r.opts.hash.rtol, 1e-2);
        let r = p.for_row(b"norm/op_0_mul", b"mul", Phase::Forward, "float32");
        assert_eq!(r.source, Source::Default);
        assert_eq!(r.opts, CompareOptions::default());
        let r = p.for_row(
            b"x/op_0__allgather_base_",
            b"_allgather_base_",
            Phase::Forward,
            "",
        );
        assert!(r.unsynced);
        p.ignore_ops.push("mul".into());
        assert!(
            p.for_row(b"norm/op_0_mul", b"mul", Phase::Forward, "")
                .ignored
        );
        assert_eq!(
            dtype_of(b"torch.Size([2]), Dtype: torch.bfloat16"),
            "bfloat16"
        );
    }

    #[test]
    fn toml_errors_have_positions() {
        let e = Policy::from_toml("[[rule]]\nkey = '('\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("invalid regex"), "{e}");
        let e = Policy::from_toml("[defaults]\nrtol = \n", "c.toml").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = Policy::from_toml("[[rule]]\nspeed = 1\n", "c.toml").unwrap_err();
        assert!(e.message.contains("unknown field `speed`"), "{e}");
        assert_eq!((e.line, e.column), (2, 1), "{e}");
        // Everything a fresh user got through silently before: each is an
        // error at the value's line.
        for (text, line, says) in [
            ("[defaults]\nrtol = \"abc\"\n", 2, "invalid type"),
            ("[defaults]\nrtoll = 1e-3\n", 2, "unknown field `rtoll`"),
            ("[defaults]\ngate_stats = \"yes\"\n", 2, "invalid type"),
            ("[defaults]\nnan_equal = 3\n", 2, "invalid type"),
            ("[collectives]\nunsynced = 5\n", 2, "invalid type"),
            ("[[rule]]\nkey = 'a'\nrtol = -1\n", 3, "finite number >= 0"),
            ("[dtype.bfloat16]\natol = -1e-3\n", 2, "finite number >= 0"),
            (
                "[[rule]]\nphase = \"sideways\"\n",
                2,
                "unknown variant `sideways`",
            ),
            ("[[rule]]\nop = 'mm'\nkey = '('\n", 3, "invalid regex"),
            ("[speed]\nx = 1\n", 1, "unknown field `speed`"),
        ] {
            let e = Policy::from_toml(text, "c.toml").unwrap_err();
            assert!(e.message.contains(says), "{text:?}: {e}");
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().starts_with("c.toml:"), "{e}");
        }
        // Integers are numbers; the phase is checked, not just matched.
        let p = Policy::from_toml(
            "[defaults]\nrtol = 0\n[[rule]]\nphase = 'backward'\natol = 1\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(p.default.hash.rtol, 0.0);
        assert_eq!(p.rules[0].phase, Some(Phase::Backward));
        assert_eq!(p.rules[0].tol.map(|t| t.atol), Some(1.0));
    }
}
