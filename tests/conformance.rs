//! Conformance against the reference comparator: for every scenario and rank
//! in `../shared/testdata/*/golden.json`, actdiff's default mode must give
//! exactly the reference's rows: same pairs, order, status, strategy and
//! per-stat differences (relative error ≤ 1e-12).
//!
//! Without `../shared` these tests are reported as *ignored* (see build.rs),
//! never as passed.

use std::path::{Path, PathBuf};

use actdiff::matcher::{self, compare::stat_diffs, MatchOptions, Overrides};
use actdiff::parser::{self, Field};
use serde_json::Value;

fn shared() -> PathBuf {
    PathBuf::from(env!("ACTDIFF_SHARED_DIR"))
}

/// Checks one golden comparison; returns the number of rows checked.
fn check_comparison(scenario: &Path, c: &Value, shape_tie_break: bool) -> usize {
    let run1 = scenario.join(c["run1"].as_str().unwrap());
    let run2 = scenario.join(c["run2"].as_str().unwrap());
    let t1 = parser::parse_path(&run1).unwrap();
    let t2 = parser::parse_path(&run2).unwrap();
    let ctx = format!(
        "{} rank {} (shape tie-break {shape_tie_break})",
        scenario.display(),
        c["rank"]
    );
    assert_eq!(
        t1.len() as u64,
        c["entries1"].as_u64().unwrap(),
        "{ctx} entries1"
    );
    assert_eq!(
        t2.len() as u64,
        c["entries2"].as_u64().unwrap(),
        "{ctx} entries2"
    );
    for (t, k) in [(&t1, "skipped1"), (&t2, "skipped2")] {
        let want: Vec<String> = c[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            t.header().excluded.clone().unwrap_or_default(),
            want,
            "{ctx} {k}"
        );
        assert!(
            t.warnings().is_empty(),
            "{ctx}: real logs parse without warnings: {:?}",
            t.warnings()
        );
    }
    let mut opts = MatchOptions {
        shape_tie_break,
        ..Default::default()
    };
    if let Some(f) = c["override_file"].as_str() {
        opts.overrides = Overrides::read(&scenario.join(f)).unwrap();
        let want = c["overrides"].as_object().unwrap();
        assert_eq!(
            opts.overrides.len(),
            want.len(),
            "{ctx} overrides parsed as the reference CLI"
        );
        for (k, v) in want {
            assert_eq!(
                opts.overrides.get(k.as_bytes()),
                Some(v.as_str().unwrap().as_bytes())
            );
        }
    }
    let m = matcher::match_tables(&t1, &t2, &opts);
    let golden = c["results"].as_array().unwrap();
    assert_eq!(m.rows.len(), golden.len(), "{ctx} row count");
    for (i, (row, g)) in m.rows.iter().zip(golden).enumerate() {
        let key1 = row.r1().map(|r| t1.key_str(r).into_owned());
        let key2 = row.r2().map(|r| t2.key_str(r).into_owned());
        assert_eq!(key1.as_deref(), g["e_key"].as_str(), "{ctx} row {i} e_key");
        assert_eq!(key2.as_deref(), g["t_key"].as_str(), "{ctx} row {i} t_key");
        assert_eq!(
            row.status.reference_name(),
            g["status"].as_str().unwrap(),
            "{ctx} row {i} ({key1:?}) status"
        );
        assert_eq!(
            row.strategy.as_str().unwrap_or(""),
            g["strategy"].as_str().unwrap(),
            "{ctx} row {i} strategy"
        );
        let want = g["diffs"].as_object().unwrap();
        let got: Vec<(&str, f64)> = match (row.r1(), row.r2()) {
            (Some(a), Some(b)) => Field::DIFF_STATS
                .iter()
                .zip(stat_diffs(&t1, a, &t2, b))
                .filter_map(|(f, d)| d.map(|d| (f.label(), d)))
                .collect(),
            _ => vec![],
        };
        assert_eq!(
            got.len(),
            want.len(),
            "{ctx} row {i} ({key1:?}) diff keys {got:?} vs {want:?}"
        );
        for (name, d) in got {
            let w = &want[name];
            if w.as_str() == Some("nan") {
                // Reference defect (inf on one side gives NaN); actdiff reports a full difference.
                assert_eq!(d, 1.0, "{ctx} row {i} {name}: fixed inf defect");
            } else {
                let w = w.as_f64().unwrap();
                let err = if w == 0.0 {
                    d.abs()
                } else {
                    ((d - w) / w).abs()
                };
                assert!(err <= 1e-12, "{ctx} row {i} {name}: {d} vs golden {w}");
            }
        }
    }
    let counts = m.counts();
    let gc = &c["counts"];
    assert_eq!(counts.matched, gc["match"].as_u64().unwrap(), "{ctx}");
    assert_eq!(counts.diff, gc["diff"].as_u64().unwrap(), "{ctx}");
    assert_eq!(counts.only1, gc["eager_only"].as_u64().unwrap(), "{ctx}");
    assert_eq!(counts.only2, gc["traced_only"].as_u64().unwrap(), "{ctx}");
    golden.len()
}

fn check_scenario(name: &str) {
    let dir = shared().join("testdata").join(name);
    let golden: Value =
        serde_json::from_slice(&std::fs::read(dir.join("golden.json")).unwrap()).unwrap();
    let comps = golden["comparisons"].as_array().unwrap();
    assert!(!comps.is_empty());
    // Both the reference's first-candidate fuzzy pass and actdiff's default
    // Shape tie-break must reproduce every golden.
    let rows: usize = comps
        .iter()
        .map(|c| check_comparison(&dir, c, false) + check_comparison(&dir, c, true))
        .sum();
    eprintln!(
        "{name}: {} comparisons, {rows} rows identical to the reference",
        comps.len()
    );
}

macro_rules! scenario {
    ($($name:ident),*) => {$(
        #[test]
        #[cfg_attr(not(has_shared), ignore = "../shared/testdata absent: conformance not checked")]
        fn $name() {
            check_scenario(stringify!($name));
        }
    )*};
}

scenario!(
    identical,
    ac_vs_noac,
    bug_layer2,
    optimizer,
    multirank_fsdp,
    dtype_shape_variety
);

#[test]
#[cfg_attr(
    not(has_shared),
    ignore = "../shared/testdata absent: conformance not checked"
)]
fn every_scenario_is_covered() {
    let mut names: Vec<String> = std::fs::read_dir(shared().join("testdata"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("golden.json").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ac_vs_noac",
            "bug_layer2",
            "dtype_shape_variety",
            "identical",
            "multirank_fsdp",
            "optimizer"
        ]
    );
}
