//! Case 22-gzip-input (`../shared/cases/22-gzip-input/README.md`).

use super::common::*;

/// Checks a gzip input compared with the plain log. The case allows either
/// exit 0 with the result of `actdiff compare run1.log run1.log`, or exit 2
/// "gzip input not supported" naming the file. actdiff reads gzip, so only
/// the first passes here: exit 0, 3 matching pairs, no warning about the
/// file, and the same rows, summary, stdout and stderr as the plain log
/// compared with itself (file names aside).
fn case22_check(r: &Run, file: &str) {
    r.expect(0);
    assert!(
        !r.stderr.contains(file),
        "no warning names {file}: {}",
        r.stderr
    );
    let rk = r.rank(0);
    assert_eq!(rk["run1"]["entries"], 3);
    assert_eq!(counts(&rk["counts"]), (3, 0, 0, 0));
    for row in r.rows() {
        assert_eq!(row["strategy"], "exact", "{row}");
    }
    // Exactly as the plain log compared with itself.
    let plain = in_case("22-gzip-input", &["compare", "run1.log", "run1.log"]);
    plain.expect(0);
    assert_eq!(r.rows(), plain.rows(), "rows differ from the plain log's");
    let renamed = |text: &str, run: &Run| {
        text.replace(file, "run1.log")
            .replace(&run.out.display().to_string(), "OUT")
    };
    // The plain log compared with itself is warned about (one file given
    // twice); the gzip input is another file. All else is the same.
    let same = "run1 and run2 are the same: run1.log; every row matches itself, so this compare shows nothing about two runs";
    let mut plain_summary = plain.summary();
    let w = plain_summary["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0], same);
    // (summary.json has no `warnings` key when there are none.)
    plain_summary.as_object_mut().unwrap().remove("warnings");
    assert_eq!(
        renamed(&r.summary().to_string(), r),
        renamed(&plain_summary.to_string(), &plain),
        "summary.json differs from the plain log's"
    );
    assert_eq!(renamed(&r.stdout, r), renamed(&plain.stdout, &plain));
    assert_eq!(
        renamed(&r.stderr, r),
        renamed(
            &plain.stderr.replace(&format!("warning: {same}\n"), ""),
            &plain
        )
    );
}

/// Case 22-gzip-input: `actdiff compare run1.log.gz run1.log -o out`.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case22_gzip_named_gz() {
    let r = in_case("22-gzip-input", &["compare", "run1.log.gz", "run1.log"]);
    case22_check(&r, "run1.log.gz");
}

/// Case 22-gzip-input: `actdiff compare run1_disguised.log run1.log -o out`:
/// gzip bytes under a `.log` name.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case22_gzip_disguised_as_log() {
    let r = in_case(
        "22-gzip-input",
        &["compare", "run1_disguised.log", "run1.log"],
    );
    case22_check(&r, "run1_disguised.log");
}

/// Case 22-gzip-input (variants): corrupt gzip data (bytes flipped in the
/// deflate stream, a wrong checksum) and gzip files cut before any log
/// byte (the magic bytes alone, the header alone), named `.gz` or `.log`,
/// on either side: exit 2 naming the file. A file cut later is read to the
/// cut: incomplete input, exit 3, naming the file.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case22_corrupt_gzip_is_an_input_error() {
    let case = "22-gzip-input";
    let gz = case_file(case, "run1.log.gz");
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "run1.log", &case_file(case, "run1.log"));
    let mut flipped = gz.clone();
    for b in &mut flipped[30..60] {
        *b ^= 0xa5;
    }
    let mut bad_crc = gz.clone();
    let n = bad_crc.len();
    bad_crc[n - 8] ^= 0xff;
    let variants: [(&str, Vec<u8>); 4] = [
        ("flipped", flipped),
        ("crc", bad_crc),
        ("magic", vec![0x1f, 0x8b]),
        ("header", gz[..10].to_vec()),
    ];
    for (what, bytes) in &variants {
        for name in [format!("{what}.log.gz"), format!("{what}.log")] {
            write(tmp.path(), &name, bytes);
            actdiff(tmp.path(), &["compare", &name, "run1.log"])
                .expect(2)
                .stderr_has(&name);
            actdiff(tmp.path(), &["compare", "run1.log", &name])
                .expect(2)
                .stderr_has(&name);
        }
    }
    for name in ["half.log.gz", "half.log"] {
        write(tmp.path(), name, &gz[..gz.len() / 2]);
        for args in [[name, "run1.log"], ["run1.log", name]] {
            let r = actdiff(tmp.path(), &["compare", args[0], args[1]]);
            r.expect(3).says(name).says("gzip data cut short");
        }
    }
}
