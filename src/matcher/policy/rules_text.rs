//! The rules text format (`--rules FILE`): one rule per line, `<key
//! regex> <predicate>`, where the predicate is `rel <= X` and `abs <= Y`
//! terms joined by `or` and `and` (`and` binds tighter; parentheses group).
//! It is parsed here, apart from the resolution in [`super`], because its
//! grammar and its error positions are a small language of their own; a
//! predicate must come down to the one [`Tolerance`] a rule holds.

use super::super::compare::Tolerance;
use super::{full_regex, Rule, RuleError};

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
            side: None,
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
