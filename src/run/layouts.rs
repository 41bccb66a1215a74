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

/// The `Mesh:` value the run at `path` declares: that of its first rank
/// log with a header (`None`: no such line, no log, or a pipe, which only
/// the comparison may read). Logs without one (empty, binary, cut before
/// the rule) are passed over, so that the layout decision does not hang on
/// which logs could be read: with rank 0's log broken, the run read as one
/// without a mesh, and the other run's FSDP collectives were left out
/// against this run's kept (trial 19 F1: rank 1, byte-identical, was said
/// to diverge).
fn declared_mesh(path: &Path) -> Option<String> {
    let input = RunInput::discover(path).ok()?;
    input
        .ranks
        .iter()
        .find_map(|(_, log)| header_mesh(log))
        .flatten()
}

/// The `Mesh:` value of the log at `log`: `Some(None)` when its header
/// has no such line, `None` when it has no header to read (or is a pipe).
fn header_mesh(log: &Path) -> Option<Option<String>> {
    // A pipe (`-`, process substitution) is read once, by the comparison.
    if !std::fs::metadata(log).is_ok_and(|m| m.is_file()) {
        return None;
    }
    if log.extension().is_some_and(|e| e == "gz") {
        // A gzip log's header needs a decompression: read it whole.
        let t = crate::parser::parse_path(log).ok()?;
        if !t.header().has_rule && t.header().total.is_none() {
            return None;
        }
        return Some(t.header().mesh.as_ref().map(|m| m.dims_text()));
    }
    let mut head = vec![0u8; 8192];
    let mut f = std::fs::File::open(log).ok()?;
    let n = f.read(&mut head).ok()?;
    let head = &head[..n];
    if crate::parser::source::binary_at(head).is_some() {
        return None; // binary data, no activation log
    }
    let text = String::from_utf8_lossy(head);
    let mut mesh = None;
    for line in text.lines() {
        if line.starts_with('[') || line.starts_with("====") {
            return Some(mesh);
        }
        if let Some(v) = line
            .strip_prefix(crate::logformat::MESH_LABEL)
            .and_then(|r| r.strip_prefix(':'))
        {
            mesh = Some(v.trim().to_string());
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
    // A run without logs is the compare's input error; nothing is combined
    // against it (trial 19 L1: the layout's lines, and a passing JUnit
    // case for it, beside that error).
    if [&cfg.run1, &cfg.run2]
        .iter()
        .any(|r| RunInput::discover(r).is_err())
    {
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
                    side: Some(side),
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

#[cfg(test)]
mod tests {
    use super::declared_mesh;

    /// The run's mesh is read from its first log with a header: a rank 0
    /// log that is binary or empty does not make the run one without a
    /// mesh (trial 19 F1).
    #[test]
    fn the_mesh_comes_from_the_first_log_with_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let header = |mesh: &str| {
            format!(
                "Total captured activations: 0\n{mesh}{}\n\n",
                "=".repeat(80)
            )
        };
        let log = |rank: u32, bytes: &[u8]| {
            std::fs::write(
                dir.path().join(format!("rank_{rank}_activations.log")),
                bytes,
            )
            .unwrap()
        };
        log(1, header("Mesh: dp=2\nCoords: dp=1\n").as_bytes());
        for broken in [
            &b"\x7fELF\x02\x01\x01\x00\x00"[..],
            b"",
            b"Total captured activations: 3\n",
        ] {
            log(0, broken);
            assert_eq!(
                declared_mesh(dir.path()).as_deref(),
                Some("dp=2"),
                "{broken:?}"
            );
        }
        // A readable header without the line: no mesh, the later logs unread.
        log(0, header("").as_bytes());
        assert_eq!(declared_mesh(dir.path()), None);
    }

    /// Nothing is combined against a run without logs: the compare says
    /// that input error alone (trial 19 L1: run 1's layout lines and a
    /// passing JUnit case beside it).
    #[test]
    fn nothing_is_combined_against_a_run_without_logs() {
        let dir = tempfile::tempdir().unwrap();
        let (run1, run2) = (dir.path().join("a"), dir.path().join("empty"));
        std::fs::create_dir_all(&run1).unwrap();
        std::fs::create_dir_all(&run2).unwrap();
        let log = format!(
            "Total captured activations: 0\nMesh: dp=2\nCoords: dp=0\n{}\n\n",
            "=".repeat(80)
        );
        std::fs::write(run1.join("rank_0_activations.log"), log).unwrap();
        let cfg = crate::run::pipeline::CompareConfig {
            run1,
            run2: run2.clone(),
            ..Default::default()
        };
        let p = super::prepare(&cfg, false).unwrap();
        assert!(p.combined.is_empty() && p.cfg.run2 == run2);
    }
}
