//! A full-precision log against a printed one (`precision="full"` in one
//! run, the default in the other): values agree when print rounding
//! explains their difference, with a warning; a real difference still
//! diverges, and `--bitwise` is an input error (it cannot judge a printed
//! log).

#[path = "support/mod.rs"]
mod support;

use support::Run;
use tempfile::TempDir;

fn log(header: &str, l2: &str, hash: &str) -> String {
    format!(
        "Total captured activations: 1\n{header}{}\n\n[layers.0/op_0_mm]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  L2 norm: {l2}\n  Min: -1e+00\n  Max: 1e+00\n  Mean: 0e+00\n  Output hash: {hash}\n\n",
        "=".repeat(80)
    )
}

fn compare(full_hash: &str, extra: &[&str]) -> (i32, String) {
    let d = TempDir::new().unwrap();
    let a = d.path().join("a.log");
    let b = d.path().join("b.log");
    std::fs::write(
        &a,
        log("Precision: full\n", "1.9582718579915818e+03", full_hash),
    )
    .unwrap();
    std::fs::write(&b, log("", "1.958272e+03", "2.553141e+04")).unwrap();
    let rep = d.path().join("rep");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .arg("-o")
            .arg(&rep)
            .arg("-q")
            .args(extra),
        &rep,
    );
    (r.code, r.stderr)
}

#[test]
fn print_rounding_is_not_a_divergence_across_precisions() {
    let (code, stderr) = compare("2.5531412345678e+04", &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("run1 is a full-precision log and the other is printed with 7 digits"),
        "{stderr}"
    );
}

#[test]
fn a_real_difference_still_diverges_and_bitwise_stays_exact() {
    let (code, stderr) = compare("2.5531512345678e+04", &[]);
    assert_eq!(code, 1, "a difference in the 6th digit: {stderr}");
}

/// `--bitwise` cannot judge a printed log: an input error naming the fix,
/// not a divergence (a new user's full-precision and default series were
/// "diverging" on every row under a warning that said print precision).
#[test]
fn bitwise_across_precisions_is_an_input_error() {
    for hash in ["2.5531412345678e+04", "2.5531512345678e+04"] {
        let (code, stderr) = compare(hash, &["--bitwise"]);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("--bitwise needs both logs at full precision, and only run1 is"),
            "{stderr}"
        );
    }
}
