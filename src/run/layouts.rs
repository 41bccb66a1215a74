//! Wires the layout stage ([`crate::layout`]) into a comparison: when the
//! two runs declare different device meshes (a TP=2 run against a TP=1
//! run, which declares none), each run whose ops are sharded is combined
//! into whole-tensor logs under `<report>/combined/run{1,2}/`, and the
//! comparison reads those. Runs of the same layout compare rank by rank
//! (shard against shard: the stronger check, digests included), as do
//! runs without mesh lines (the reference tracer's) and `--no-combine`.

use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::pipeline::CompareConfig;
use super::RunInput;
use crate::layout::{self, Combined};
use crate::report::messages::Message;

/// The `Mesh:` value the first rank log of `path` declares, read from its
/// header only (`None`: no such line, no log, or a pipe, which only the
/// comparison may read).
fn declared_mesh(path: &Path) -> Option<String> {
    let input = RunInput::discover(path).ok()?;
    let (_, first) = input.ranks.first()?;
    // A pipe (`-`, process substitution) is read once, by the comparison.
    if !std::fs::metadata(first).is_ok_and(|m| m.is_file()) {
        return None;
    }
    if first.extension().is_some_and(|e| e == "gz") {
        // A gzip log's header needs a decompression: read it whole.
        let t = crate::parser::parse_path(first).ok()?;
        return t.header().mesh.as_ref().map(|m| m.dims_text());
    }
    let mut head = vec![0u8; 8192];
    let mut f = std::fs::File::open(first).ok()?;
    let n = f.read(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head[..n]);
    for line in text.lines() {
        if line.starts_with('[') || line.starts_with("====") {
            break;
        }
        if let Some(v) = line
            .strip_prefix(crate::logformat::MESH_LABEL)
            .and_then(|r| r.strip_prefix(':'))
        {
            return Some(v.trim().to_string());
        }
    }
    None
}

/// What [`prepare`] did: the comparison to run (its run paths replaced by
/// combined logs where a run was combined) and what was combined.
pub struct Prepared {
    /// The configuration to compare.
    pub cfg: CompareConfig,
    /// One entry per combined run.
    pub combined: Vec<Combined>,
}

/// Combines the runs of `cfg` whose layouts differ (see the module doc);
/// `no_combine` keeps them as they are. Errors (logs that cannot be read
/// or combined) name the file: [`Message::ShardLogIncomplete`] for a shard
/// log cut short (exit 3), [`Message::Text`] for the others (exit 2).
pub fn prepare(cfg: &CompareConfig, no_combine: bool) -> Result<Prepared, Message> {
    let unchanged = || Prepared {
        cfg: cfg.clone(),
        combined: Vec::new(),
    };
    if no_combine {
        return Ok(unchanged());
    }
    let (m1, m2) = (declared_mesh(&cfg.run1), declared_mesh(&cfg.run2));
    if m1 == m2 {
        return Ok(unchanged());
    }
    let mut out = unchanged();
    for (side, mesh) in [(1u8, m1), (2u8, m2)] {
        if mesh.is_none() {
            continue;
        }
        let path = if side == 1 { &cfg.run1 } else { &cfg.run2 };
        let input = RunInput::discover(path).map_err(|e| Message::Text(e.to_string()))?;
        let logs: Vec<(u32, crate::parser::OpTable)> = input
            .ranks
            .par_iter()
            .map(|(r, p)| {
                crate::parser::parse_path(p)
                    .map(|t| (*r, t))
                    .map_err(|e| format!("{}: {e}", p.display()))
            })
            .collect::<Result<_, _>>()?;
        let Some(mesh) = layout::mesh_of(&logs)? else {
            continue;
        };
        // A log cut short first: the ranks' logs would part where it ends,
        // and the combined log would look whole (trial 18 M1: the error
        // blamed the intact log beside it, exit 2).
        if let Some((rank, t, why)) = logs.iter().find_map(|(r, t)| {
            let why = crate::report::summary::incomplete_of(t);
            (!why.is_empty()).then_some((*r, t, why))
        }) {
            return Err(Message::ShardLogIncomplete {
                path: t.path().display().to_string(),
                side: if side == 1 { "run1" } else { "run2" },
                rank,
                why,
            });
        }
        // No dimension to combine (FSDP alone): each rank is its own
        // group, only the layout's communication is left out, so that the
        // run pairs with the other layout's combined logs.
        let dims = layout::sharding_dims(&logs, &mesh)?;
        let dir: PathBuf = cfg
            .report
            .out_dir
            .join("combined")
            .join(format!("run{side}"));
        if dir.is_dir() {
            // A previous comparison's combined logs must not be read.
            std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let c = layout::combine(side, &logs, &mesh, &dims, &dir)?;
        // First in the policy, so no other rule judges these ops: ops
        // without a whole-tensor value are shown, never gating; ops whose
        // inputs have none are judged on their outputs.
        for (keys, what, ignore, gate_inputs) in [
            (
                &c.inputs_unknown_keys,
                "inputs without a whole-tensor value",
                false,
                Some(false),
            ),
            (
                &c.not_comparable_keys,
                "no whole-tensor value: a pending sum",
                true,
                None,
            ),
        ] {
            if keys.is_empty() {
                continue;
            }
            let alt: Vec<String> = keys.iter().map(|k| regex::escape(k)).collect();
            let pattern = format!("^(?:{})$", alt.join("|"));
            let key = regex::bytes::Regex::new(&pattern).map_err(|e| e.to_string())?;
            out.cfg.matching.policy.rules.insert(
                0,
                crate::matcher::policy::Rule {
                    origin: format!("run {side}'s layout ({what})"),
                    key_src: format!("{} ops", keys.len()),
                    key: Some(key),
                    op: None,
                    phase: None,
                    dtype: None,
                    tol: None,
                    gate_stats: None,
                    ignore,
                    unsynced: None,
                    gate_inputs,
                },
            );
        }
        if side == 1 {
            out.cfg.run1 = dir;
        } else {
            out.cfg.run2 = dir;
        }
        out.combined.push(c);
    }
    Ok(out)
}
