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

mod rules_text;

pub use rules_text::{parse_predicate, parse_rules_text};

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
    /// The run whose keys the rule names (1 or 2), matched against that
    /// run's row of a pair; `None`: run 1's row (a row of one run: its
    /// own). Set by the layout stage, whose rules list one run's keys: a
    /// pair by fuzzy key has other op counters in the other run (trial
    /// 71 F1: FSDP2's pending-sum norm paired with DDP's, whose extra
    /// broadcasts shifted its counters, and gated).
    pub side: Option<u8>,
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
    /// The per-dtype default of [`Policy::dtype`] entry `i`, carried to a
    /// row of a tighter dtype from the rows its inputs derive from
    /// ([`Carried`]).
    Carried(u16),
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
    /// Per rank, under per-dtype defaults: the defaults carried through
    /// each log's data flow ([`Policy::for_rank`]); empty otherwise.
    pub carried: Carried,
}

/// Per row of each log of one rank, the loosest per-dtype default (an index
/// into [`Policy::dtype`]) among the rows its inputs derive from, where that
/// is looser than its own dtype's ([`NO_DTYPE`] elsewhere).
///
/// A float32 op that reads a bfloat16 op's output (the residual add after
/// an autocast Linear) carries the bfloat16 rounding in its own output, and
/// so does everything computed from it: under `--dtype-tolerance` such a row
/// is judged at the bfloat16 default, not float32's (trial 27: the same
/// tensor agreed as the Linear's output and gated as the add's input). The
/// inputs' rows are those of `Input producers`, or, where none is named (a
/// view the capture leaves out between them), the one earlier row whose
/// Output hash is the input's value. An actdiff extension: the reference
/// has no per-dtype defaults.
#[derive(Clone, Debug, Default)]
pub struct Carried {
    sides: [Vec<u16>; 2],
}

/// No per-dtype default carried to a row.
pub const NO_DTYPE: u16 = u16::MAX;

impl Carried {
    /// The default carried to side `s`'s (0: run 1, 1: run 2) row `r`.
    pub fn of(&self, s: usize, r: usize) -> Option<u16> {
        self.sides[s].get(r).copied().filter(|&d| d != NO_DTYPE)
    }
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
            carried: Carried::default(),
        }
    }
}

/// The dtype name in a Shape text (`torch.Size([2]), Dtype: torch.bfloat16` → `bfloat16`).
pub fn dtype_of(shape: &[u8]) -> &str {
    crate::logformat::read_shape(shape).dtype()
}

impl Policy {
    /// This policy for the rank whose logs are `t1` and `t2`: with the
    /// per-dtype defaults carried through each log's data flow
    /// ([`Carried`]) when there are per-dtype defaults; a plain copy
    /// otherwise.
    pub fn for_rank(&self, t1: &crate::parser::OpTable, t2: &crate::parser::OpTable) -> Policy {
        let mut p = self.clone();
        if !self.dtype.is_empty() {
            p.carried = Carried {
                sides: [self.carried_in(t1), self.carried_in(t2)],
            };
        }
        p
    }

    /// [`Carried`]'s column for one log: one pass in log order (a
    /// producer comes before its readers).
    fn carried_in(&self, t: &crate::parser::OpTable) -> Vec<u16> {
        let lineage = super::lineage::Lineage::new(t);
        let rtol = |d: u16| {
            self.dtype
                .get(d as usize)
                .map_or(f64::NEG_INFINITY, |(_, tol)| tol.rtol)
        };
        // Each row's own default, or the carried one where looser.
        let mut effective = vec![NO_DTYPE; t.len()];
        let mut carried = vec![NO_DTYPE; t.len()];
        for r in 0..t.len() {
            let dtype = dtype_of(t.field(r, crate::parser::Field::Shape));
            let own = self
                .dtype
                .iter()
                .position(|(n, _)| n == dtype)
                .map_or(NO_DTYPE, |i| i as u16);
            let inherited = lineage
                .producers_of(r)
                .map(|p| effective[p])
                .fold(NO_DTYPE, |a, d| if rtol(d) > rtol(a) { d } else { a });
            if rtol(inherited) > rtol(own) {
                carried[r] = inherited;
                effective[r] = inherited;
            } else {
                effective[r] = own;
            }
        }
        carried
    }

    /// The settings for one row. `key` is the raw key, `op` the op name.
    pub fn for_row(&self, key: &[u8], op: &[u8], phase: Phase, dtype: &str) -> RowPolicy {
        self.for_row_of(key, op, phase, dtype, None)
    }

    /// [`Policy::for_row`] for a row of run `side` of a pair (`None`: of
    /// one run), whose rules of the other run do not apply to it.
    fn for_row_of(
        &self,
        key: &[u8],
        op: &[u8],
        phase: Phase,
        dtype: &str,
        side: Option<u8>,
    ) -> RowPolicy {
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
        if let Some((i, r)) = self.rules.iter().enumerate().find(|(_, r)| {
            (side.is_none() || r.side.is_none() || r.side == side)
                && r.matches(key, op, phase, dtype)
        }) {
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
        self.for_side_row(t, r, None)
    }

    /// [`Policy::for_table_row`] for a row of run `side` (1 or 2; `None`:
    /// either), the rules of the other run ([`Rule::side`]) left out.
    pub fn for_side_row(
        &self,
        t: &crate::parser::OpTable,
        r: usize,
        side: Option<u8>,
    ) -> RowPolicy {
        let key = t.key(r);
        let op = t.op_name(t.op_type(r));
        // Reading the dtype costs a search of the Shape text: only when asked for.
        let needs_dtype = !self.dtype.is_empty() || self.rules.iter().any(|r| r.dtype.is_some());
        let dtype = if needs_dtype {
            dtype_of(t.field(r, crate::parser::Field::Shape))
        } else {
            ""
        };
        self.for_row_of(key, op, t.phase_kind(r), dtype, side)
    }

    /// The settings for a pair of rows: run 1's row's, except that run 2's
    /// row's per-dtype default (for its hashes and its stats) replaces them
    /// when no rule judged run 1's row and run 2's dtype has a per-dtype
    /// default, and either run 1's row got the global default (then run
    /// 2's dtype default applies whether or not it is looser than the
    /// global one) or run 1's row got its own dtype's default and run 2's
    /// has the larger `rtol` (`atol` is not compared). Rows of one dtype,
    /// or of a run-2 dtype without a default, keep run 1's settings.
    pub fn for_pair(
        &self,
        t1: &crate::parser::OpTable,
        r1: usize,
        t2: &crate::parser::OpTable,
        r2: usize,
    ) -> RowPolicy {
        let rp = self.for_side_row(t1, r1, Some(1));
        // A rule of run 2's keys that comes first judges the pair.
        if self.rules.iter().any(|r| r.side == Some(2)) {
            let rp2 = self.for_side_row(t2, r2, Some(2));
            if let Source::Rule(b) = rp2.source {
                let first = match rp.source {
                    Source::Rule(a) => b < a,
                    _ => true,
                };
                if first && self.rules[b as usize].side == Some(2) {
                    return rp2;
                }
            }
        }
        if self.dtype.is_empty() || matches!(rp.source, Source::Rule(_)) {
            return rp;
        }
        let d2 = dtype_of(t2.field(r2, crate::parser::Field::Shape));
        let other = self
            .dtype
            .iter()
            .enumerate()
            .find(|(_, (name, _))| name == d2);
        // Two dtypes under a per-dtype default: the change is expected.
        let d1 = dtype_of(t1.field(r1, crate::parser::Field::Shape));
        let rp = if d1 != d2 && (matches!(rp.source, Source::Dtype(_)) || other.is_some()) {
            RowPolicy {
                opts: CompareOptions {
                    dtype_free: true,
                    ..rp.opts
                },
                ..rp
            }
        } else {
            rp
        };
        let run2_default = match (rp.source, other) {
            (Source::Dtype(i), Some((j, (_, t)))) if t.rtol > self.dtype[i as usize].1.rtol => {
                Some((j, t))
            }
            (Source::Default, Some((j, (_, t)))) => Some((j, t)),
            _ => None,
        };
        let rp = match run2_default {
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
        };
        // A looser default carried in from either run's inputs.
        let carried = [self.carried.of(0, r1), self.carried.of(1, r2)]
            .into_iter()
            .flatten()
            .max_by(|a, b| {
                self.dtype[*a as usize]
                    .1
                    .rtol
                    .total_cmp(&self.dtype[*b as usize].1.rtol)
            });
        match carried {
            Some(c) if self.dtype[c as usize].1.rtol > rp.opts.hash.rtol => {
                let t = self.dtype[c as usize].1;
                RowPolicy {
                    opts: CompareOptions {
                        hash: t,
                        stats: Some(t),
                        ..rp.opts
                    },
                    source: Source::Carried(c),
                    ..rp
                }
            }
            _ => rp,
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
            super::Sides::Only1(a) => self.for_side_row(t1, a, Some(1)),
            super::Sides::Only2(b) => self.for_side_row(t2, b, Some(2)),
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
            Source::Carried(i) => {
                let (n, t) = &self.dtype[i as usize];
                format!(
                    "{n} default (its inputs derive from {n} ops): {}",
                    describe_tolerance(t)
                )
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
                side: None,
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

/// `--dtype-tolerance`: per-dtype default tolerances for low-precision
/// dtypes (relative: bfloat16 1e-2, float16 1e-3, float8_e4m3fn 1.25e-1,
/// float8_e5m2 2.5e-1; absolute: [`F32_MIN_NORMAL`]), added to `p` for each
/// dtype it has no default for (a config's `[dtype.X]` wins), each at least
/// as loose as `floor` (the `--rtol`/`--atol` given beside it).
pub fn add_dtype_defaults(p: &mut Policy, floor: Option<Tolerance>) {
    // `--rtol`/`--atol` given beside it (`floor`): a per-dtype default is
    // never tighter than what they ask (trial 21: `--dtype-tolerance --atol
    // 1e-3` left bfloat16 rows without an absolute floor, so a LayerNorm's
    // mean near zero could never agree).
    let (rtol_floor, atol_floor) = floor.map_or((0.0, 0.0), |t| (t.rtol, t.atol));
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
                    rtol: f64::max(rtol, rtol_floor),
                    atol: f64::max(F32_MIN_NORMAL, atol_floor),
                    both: false,
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests;
