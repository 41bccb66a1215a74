//! What the parser reads, end to end through `actdiff compare`: the
//! optimizer phase on real captures, malformed numbers, rule predicates with
//! `and`, and the capture agent's full-precision and digest lines.
//!
//! Real data: `testdata/` (in the repository) and, for the optimizer
//! captures, `../shared` (tests that need it are reported as *ignored*
//! without it, see build.rs).

#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};

use actdiff::parser::{parse_bytes, parse_path, Field, Phase, Precision, WarningKind};
use serde_json::Value;
use support::Run;
use tempfile::TempDir;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(rel)
}

/// Runs `actdiff compare` with `args`, a report into a temp folder; returns
/// (exit status, stderr, summary.json when written, the run).
fn compare(args: &[&std::ffi::OsStr]) -> (i32, String, Option<Value>, Run) {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().to_path_buf();
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .args(args)
            .arg("-o")
            .arg(&out)
            .arg("-q"),
        &out,
    )
    .holding(tmp);
    let summary = out.join("summary.json").exists().then(|| r.summary());
    (r.code, r.stderr.clone(), summary, r)
}

fn key1(v: &Value) -> Option<&str> {
    v["key1"].as_str()
}

/// The step's last backward op and every op after it without a Phase line,
/// on a real capture (`shared/capture/ref/*/adamw`: AdamW after backward).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn optimizer_rows_of_a_real_capture() {
    let t = parse_path(&shared(
        "capture/ref/torch-2.13.0/adamw/rank_0_activations.log",
    ))
    .unwrap();
    assert_eq!(t.len(), 598);
    let last_bwd = (0..t.len()).rposition(|r| t.is_backward(r)).unwrap();
    assert_eq!(
        t.key_str(last_bwd),
        "tok_embeddings/op_1_embedding_dense_backward"
    );
    for r in 0..t.len() {
        let want = if t.is_backward(r) {
            Phase::Backward
        } else if r > last_bwd {
            Phase::Optimizer
        } else {
            Phase::Forward
        };
        assert_eq!(t.phase_kind(r), want, "row {r} {}", t.key_str(r));
    }
    let opt: Vec<usize> = (0..t.len())
        .filter(|r| t.phase_kind(*r) == Phase::Optimizer)
        .collect();
    assert_eq!(opt.len(), 598 - 1 - last_bwd);
    assert_eq!(t.key_str(opt[0]), "<none>/op_3_add_");
    assert_eq!(t.phase(opt[0]), "optimizer");
}

/// `shared/testdata/optimizer`: run B doubles the learning rate. Forward and
/// backward match; the first divergence is an optimizer op, and summary.json
/// says so per phase.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn optimizer_divergence_is_named_as_optimizer() {
    let (a, b) = (
        shared("testdata/optimizer/run_A"),
        shared("testdata/optimizer/run_B"),
    );
    let (code, stderr, s, _dir) = compare(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, 1, "{stderr}");
    let s = s.unwrap();
    let rc = &s["ranks"][0]["root_causes"];
    assert!(rc["first_divergence_forward"].is_null(), "{rc}");
    assert!(rc["first_divergence_backward"].is_null(), "{rc}");
    let opt = &rc["first_divergence_optimizer"];
    assert_eq!(key1(opt), Some("<none>/op_6_mul_"), "{rc}");
    assert_eq!(opt["phase"], "optimizer");
}

/// `testdata/multirank_fsdp`: `<none>/op_6_lerp_` (AdamW, no Phase line,
/// after backward) was reported as the "first divergence (forward)".
#[test]
fn multirank_lerp_is_an_optimizer_op() {
    let (a, b) = (
        repo("testdata/multirank_fsdp/run_A"),
        repo("testdata/multirank_fsdp/run_B"),
    );
    let (code, stderr, s, _dir) = compare(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, 1, "{stderr}");
    let s = s.unwrap();
    let ranks = s["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 4);
    for r in ranks {
        let rc = &r["root_causes"];
        assert_eq!(
            key1(&rc["first_divergence_optimizer"]),
            Some("<none>/op_6_lerp_"),
            "{rc}"
        );
        assert_ne!(
            key1(&rc["first_divergence_forward"]),
            Some("<none>/op_6_lerp_"),
            "{rc}"
        );
    }
    // Rank 1's own change is in the forward pass.
    assert_eq!(
        key1(&ranks[1]["root_causes"]["first_divergence_forward"]),
        Some("tok_embeddings/op_2_embedding")
    );
}

/// A log without backward ops keeps the reference's forward for every op.
#[test]
fn no_backward_ops_means_forward() {
    let t = parse_path(&repo("testdata/bug_layer2/run_A/rank_0_activations.log")).unwrap();
    if (0..t.len()).any(|r| t.is_backward(r)) {
        // bug_layer2 has backward ops: cut the log before the first one.
        let first = (0..t.len()).find(|r| t.is_backward(*r)).unwrap();
        let bytes = t.bytes()[..t.block_offset(first) as usize].to_vec();
        let cut = parse_bytes(bytes, "cut.log");
        assert!(cut.len() > 10);
        assert!((0..cut.len()).all(|r| cut.phase_kind(r) == Phase::Forward));
        assert!((0..cut.len()).all(|r| cut.phase(r) == "forward"));
    }
}

/// Replaces the first `Output hash:` value of `key`'s block in `log`.
fn with_output_hash(log: &str, key: &str, value: &str) -> (String, usize) {
    let at = log.find(&format!("[{key}]")).unwrap();
    let h = at + log[at..].find("  Output hash: ").unwrap() + "  Output hash: ".len();
    let end = h + log[h..].find('\n').unwrap();
    let line = log[..h].matches('\n').count() + 1;
    (format!("{}{value}{}", &log[..h], &log[end..]), line)
}

/// Issue 15: `Output hash: 2.55.3141e+04`, two dots, stray letters, an
/// empty value: a warning with file:line:column, and the value is not
/// compared (never a 1.0 difference, never an origin).
#[test]
fn malformed_numbers_warn_and_are_not_compared() {
    let a =
        std::fs::read_to_string(repo("testdata/bug_layer2/run_A/rank_0_activations.log")).unwrap();
    // The first row with a single Output hash value.
    let t = parse_bytes(a.clone().into_bytes(), "a.log");
    let row = (0..t.len())
        .find(|r| t.has(*r, Field::OutputHash) && !t.field(*r, Field::OutputHash).contains(&b','))
        .unwrap();
    let key = t.key_str(row).into_owned();
    let good = t.text(row, Field::OutputHash).into_owned();
    let three = format!("{good}, {good}, {good}");
    let empty = format!("{good}, , {good}");
    for (ok, bad) in [
        (good.as_str(), "2.55.3141e+04"),
        (&good, "1.2x34e+03"),
        (&good, "1.0e+0z"),
        // An empty position in a list (both sides have three values).
        (&three, &empty),
    ] {
        let (a, _) = with_output_hash(&a, &key, ok);
        let (b, line) = with_output_hash(&a, &key, bad);
        let dir = TempDir::new().unwrap();
        let (pa, pb) = (dir.path().join("a.log"), dir.path().join("b.log"));
        std::fs::write(&pa, &a).unwrap();
        std::fs::write(&pb, &b).unwrap();
        // The parser: a warning at the value's line and column.
        let tb = parse_path(&pb).unwrap();
        let w = tb
            .warnings()
            .iter()
            .find(|w| w.kind == WarningKind::MalformedNumber)
            .unwrap_or_else(|| panic!("{bad}: no warning in {:?}", tb.warnings()));
        let col = if bad.contains(", ,") {
            16 + good.len() + 2
        } else {
            16
        };
        assert_eq!((w.line, w.column), (line as u64, col as u64), "{bad}");
        // The comparison: warned with file:line:column, the row is not a
        // difference, and it is no cause; the log is incomplete input.
        let (code, stderr, s, _out) = compare(&[pa.as_os_str(), pb.as_os_str()]);
        let at = format!("{}:{line}:{col}:", pb.display());
        assert!(
            stderr.contains(&at) && stderr.contains("not a number"),
            "{bad}: {stderr}"
        );
        let s = s.unwrap();
        let rc = &s["ranks"][0]["root_causes"];
        let causes: Vec<&str> = rc["causes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["row"]["key1"].as_str())
            .collect();
        assert!(
            !causes.contains(&key.as_str()),
            "{bad}: {key} is a cause: {causes:?}"
        );
        assert_ne!(key1(&rc["largest_diff"]), Some(key.as_str()), "{bad}");
        // Identical logs but for the unreadable value: nothing diverges, but
        // a value was not compared, so the run is incomplete input (3).
        assert_eq!(s["ranks"][0]["counts"]["gating"], 0, "{bad}");
        assert_eq!(code, 3, "{bad}: {stderr}");
    }
}

/// A valid number in a hash list never warns: every value of the bundled
/// real logs reads.
#[test]
fn real_logs_have_no_malformed_numbers() {
    for rel in [
        "testdata/bug_layer2/run_A/rank_0_activations.log",
        "testdata/bug_layer2/run_B/rank_0_activations.log",
        "testdata/multirank_fsdp/run_A/rank_1_activations.log",
    ] {
        let t = parse_path(&repo(rel)).unwrap();
        assert!(
            t.warnings()
                .iter()
                .all(|w| w.kind != WarningKind::MalformedNumber),
            "{rel}: {:?}",
            t.warnings()
        );
    }
}

/// Rule predicates joined by `and` (issue 15): `abs <= X and rel <= Y`
/// needs both; a bad predicate is exit 2 at file:line:column.
#[test]
fn rules_with_and() {
    let dir = TempDir::new().unwrap();
    let (a, b) = (
        repo("testdata/bug_layer2/run_A/rank_0_activations.log"),
        repo("testdata/bug_layer2/run_B/rank_0_activations.log"),
    );
    let rules = dir.path().join("rules.txt");
    let diffs = |s: &Value| s["ranks"][0]["counts"]["diff"].as_u64().unwrap();
    // A relative difference is at most 2: `rel <= 3 or ...` accepts every
    // difference, `rel <= 3 and abs <= 0` none (as --bitwise).
    std::fs::write(&rules, ".*  rel <= 3 or abs <= 0\n").unwrap();
    let (code, stderr, s, _o) = compare(&[
        a.as_os_str(),
        b.as_os_str(),
        "--rules".as_ref(),
        rules.as_os_str(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(diffs(&s.unwrap()), 0);
    std::fs::write(&rules, ".*  rel <= 3 and abs <= 0\n").unwrap();
    let (code, stderr, s, _o) = compare(&[
        a.as_os_str(),
        b.as_os_str(),
        "--rules".as_ref(),
        rules.as_os_str(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    let (_, _, bitwise, _o) = compare(&[a.as_os_str(), b.as_os_str(), "--bitwise".as_ref()]);
    let n = diffs(&s.unwrap());
    assert!(n > 0);
    assert_eq!(n, diffs(&bitwise.unwrap()));
    std::fs::write(&rules, "# rules\n.*  rel <= 1e-3 and (abs <= 1e-8 xor\n").unwrap();
    let (code, stderr, _, _o) = compare(&[
        a.as_os_str(),
        b.as_os_str(),
        "--rules".as_ref(),
        rules.as_os_str(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    let at = format!("{}:2:34: malformed predicate", rules.display());
    assert!(stderr.contains(&at), "{stderr}");
}

/// The capture agent's full-precision header and digest lines are read;
/// the reference's logs keep its 7 printed digits and have no digests.
#[test]
fn full_precision_and_digest_lines() {
    let t = parse_path(&repo("testdata/bug_layer2/run_A/rank_0_activations.log")).unwrap();
    assert_eq!(
        t.precision(),
        Precision::Printed {
            significant_digits: 7
        }
    );
    assert!(!t.has_digests());
    let text =
        std::fs::read_to_string(repo("testdata/bug_layer2/run_A/rank_0_activations.log")).unwrap();
    // Make it a full-precision log with digests: a header line, and digest
    // lines after every Input hashes line.
    let full = text
        .replacen("================", "Precision: full\n================", 1)
        .replace(
            "\n  Input producers:",
            "\n  Output digest: 00000000000000aa\n  Input digests: 00000000000000bb, 00000000000000cc\n  Input producers:",
        );
    let f = parse_bytes(full.into_bytes(), "full.log");
    assert_eq!(f.precision(), Precision::Full);
    assert!(f.has_digests());
    assert_eq!(f.len(), t.len());
    assert!(f.warnings().is_empty(), "{:?}", f.warnings());
    let with: Vec<usize> = (0..f.len())
        .filter(|r| f.has(*r, Field::OutputDigest))
        .collect();
    assert!(!with.is_empty());
    for r in with {
        assert_eq!(
            f.digests(r, Field::OutputDigest).collect::<Vec<_>>(),
            vec![Some(0xaa)]
        );
        assert_eq!(
            f.digests(r, Field::InputDigests).collect::<Vec<_>>(),
            vec![Some(0xbb), Some(0xcc)]
        );
        // The other fields read as in the original.
        for field in [
            Field::OutputHash,
            Field::InputHashes,
            Field::InputProducers,
            Field::Location,
        ] {
            assert_eq!(f.field(r, field), t.field(r, field), "row {r} {field:?}");
        }
    }
}
