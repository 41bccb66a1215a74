//! The helpers every integration test shares: running the built `actdiff`
//! ([`Run`]), reading what it wrote (`summary.json`, a `--rows` file, a
//! JUnit file: [`Junit`]) and writing inputs.
//!
//! Included by each test crate that runs the binary, with
//! `#[path = "support/mod.rs"] mod support;` (from `tests/cases/`:
//! `#[path = "../support/mod.rs"]`). Not every crate uses every helper.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use quick_xml::events::{BytesStart, Event};
use serde_json::Value;
use tempfile::TempDir;

// ------------------------------------------------------------------ inputs

/// `testdata/REL` of the repository.
pub fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

/// The bytes of `testdata/REL`.
pub fn read_testdata(rel: &str) -> Vec<u8> {
    std::fs::read(testdata(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Writes `dir/name` (creating folders) and returns its path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    p
}

/// `bytes` compressed with gzip.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

// ------------------------------------------------------------------ runs

/// The built `actdiff`, to be given its arguments and run by [`Run::of`].
pub fn actdiff() -> Command {
    Command::new(env!("CARGO_BIN_EXE_actdiff"))
}

/// What one run of the binary did: its exit status and both streams, and
/// where its outputs are.
pub struct Run {
    /// The command line, for messages (`actdiff ARGS (in DIR)`).
    pub cmd: String,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The report folder its arguments name (`-o`), written or not.
    pub out: PathBuf,
    /// The `--rows` file its arguments name, where the caller said so
    /// ([`Run::with_rows`]).
    pub rows_file: Option<PathBuf>,
    /// A temporary folder holding its outputs, removed with the run.
    pub tmp: Option<TempDir>,
}

impl Run {
    /// Runs `cmd` (an `actdiff` command line from [`actdiff`]) to the end;
    /// `out` is the report folder its arguments name. Never accepts a
    /// panic (exit status 101, or "panicked" in either stream) or a death by
    /// signal.
    pub fn of(cmd: &mut Command, out: impl Into<PathBuf>) -> Run {
        let mut shown = String::from("actdiff");
        for a in cmd.get_args() {
            shown.push(' ');
            shown.push_str(&a.to_string_lossy());
        }
        if let Some(dir) = cmd.get_current_dir() {
            shown.push_str(&format!(" (in {})", dir.display()));
        }
        let o = cmd
            .output()
            .unwrap_or_else(|e| panic!("{shown}: cannot run: {e}"));
        let run = Run {
            code: o
                .status
                .code()
                .unwrap_or_else(|| panic!("{shown}: killed by a signal")),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            cmd: shown,
            out: out.into(),
            rows_file: None,
            tmp: None,
        };
        assert!(
            !run.stderr.contains("panicked") && !run.stdout.contains("panicked") && run.code != 101,
            "actdiff panicked:\n{}",
            run.context()
        );
        run
    }

    /// Runs `actdiff ARGS` (in the current folder); `out` is the report
    /// folder the arguments name.
    pub fn args<I, S>(args: I, out: impl Into<PathBuf>) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Run::of(actdiff().args(args), out)
    }

    /// Names the `--rows` file the arguments gave ([`Run::rows`]).
    pub fn with_rows(mut self, rows: impl Into<PathBuf>) -> Run {
        self.rows_file = Some(rows.into());
        self
    }

    /// Keeps `tmp` (where the outputs are) for as long as the run.
    pub fn holding(mut self, tmp: TempDir) -> Run {
        self.tmp = Some(tmp);
        self
    }

    /// The command, its exit status and both streams, for messages.
    pub fn context(&self) -> String {
        format!(
            "{}\nexit status {}\n--- stdout\n{}\n--- stderr\n{}",
            self.cmd, self.code, self.stdout, self.stderr
        )
    }

    /// Asserts the exit status.
    pub fn expect(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "exit status of\n{}", self.context());
        self
    }

    pub fn stdout_has(&self, part: &str) -> &Run {
        assert!(
            self.stdout.contains(part),
            "stdout lacks `{part}`:\n{}",
            self.context()
        );
        self
    }

    pub fn stderr_has(&self, part: &str) -> &Run {
        assert!(
            self.stderr.contains(part),
            "stderr lacks `{part}`:\n{}",
            self.context()
        );
        self
    }

    /// Asserts that stdout or stderr says `part`.
    pub fn says(&self, part: &str) -> &Run {
        assert!(
            self.stdout.contains(part) || self.stderr.contains(part),
            "neither stdout nor stderr says `{part}`:\n{}",
            self.context()
        );
        self
    }

    /// `summary.json` of the report folder; never holds a CR.
    pub fn summary(&self) -> Value {
        let p = self.out.join("summary.json");
        let text = std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", p.display(), self.context()));
        assert!(!text.contains('\r'), "summary.json holds a CR");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// `index.html` of the report folder.
    pub fn index(&self) -> String {
        let p = self.out.join("index.html");
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", p.display(), self.context()))
    }

    /// The `--rows` file ([`Run::with_rows`]), one object per line.
    pub fn rows(&self) -> Vec<Value> {
        let p = self
            .rows_file
            .as_ref()
            .unwrap_or_else(|| panic!("no --rows file named for\n{}", self.cmd));
        read_rows(p)
    }
}

/// Reads a `--rows` file (JSON Lines): one JSON value per line; the file
/// never holds a CR.
pub fn read_rows(p: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(!text.contains('\r'), "{}: holds a CR", p.display());
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{} line {}: {e}: {l}", p.display(), i + 1))
        })
        .collect()
}

/// `(match, diff, only1, only2)` of a `counts` object.
pub fn counts(v: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("count {k}: {v}"));
    (n("match"), n("diff"), n("only1"), n("only2"))
}

// ------------------------------------------------------------------ JUnit

/// One test case of a JUnit file: its name and, when it did not pass,
/// `("failure" | "error", type, message)`.
pub type JCase = (String, Option<(String, String, String)>);

/// A JUnit file read back: the suite's (tests, failures, errors) and its
/// cases. [`read_junit`] checks that the counts are the cases'.
#[derive(Debug)]
pub struct Junit {
    pub tests: u64,
    pub failures: u64,
    pub errors: u64,
    pub cases: Vec<JCase>,
}

impl Junit {
    /// The case named `name`.
    pub fn case(&self, name: &str) -> &JCase {
        self.cases
            .iter()
            .find(|c| c.0 == name)
            .unwrap_or_else(|| panic!("no JUnit case {name}: {:?}", self.cases))
    }
}

/// Reads a JUnit file; panics when it is missing or its counts are not
/// its cases'.
pub fn read_junit(path: &Path) -> Junit {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: no JUnit file: {e}", path.display()));
    let mut r = quick_xml::Reader::from_str(&text);
    let attr = |e: &BytesStart, name: &str| -> String {
        e.attributes()
            .filter_map(|a| a.ok())
            .find(|a| a.key.as_ref() == name.as_bytes())
            .map(|a| {
                a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                    .unwrap()
                    .into_owned()
            })
            .unwrap_or_default()
    };
    let mut j = Junit {
        tests: 0,
        failures: 0,
        errors: 0,
        cases: Vec::new(),
    };
    loop {
        match r
            .read_event()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testsuite" => {
                    j.tests = attr(&e, "tests").parse().unwrap();
                    j.failures = attr(&e, "failures").parse().unwrap();
                    j.errors = attr(&e, "errors").parse().unwrap();
                }
                b"testcase" => j.cases.push((attr(&e, "name"), None)),
                tag @ (b"failure" | b"error") => {
                    j.cases.last_mut().expect("a failure inside a case").1 = Some((
                        String::from_utf8_lossy(tag).into_owned(),
                        attr(&e, "type"),
                        attr(&e, "message"),
                    ))
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    // The counts are the cases'.
    assert_eq!(j.tests as usize, j.cases.len(), "tests=");
    let n = |k: &str| {
        j.cases
            .iter()
            .filter(|c| c.1.as_ref().is_some_and(|o| o.0 == k))
            .count() as u64
    };
    assert_eq!((j.failures, j.errors), (n("failure"), n("error")));
    j
}

/// A module-level log (`Level: modules`, then the header lines `extra`
/// such as `World size: 2\n`) of one linear module: its forward output,
/// its weight's gradient (phase backward) and its weight after the
/// optimizer step, with these Output hash texts.
#[allow(dead_code)] // not every test binary uses it
pub fn modules_log(extra: &str, output: &str, grad: &str, weight: &str) -> String {
    let block = |key: &str, hash: &str, phase: &str| {
        format!(
            "[{key}]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  L2 norm: 1.0\n  Min: -1.0\n  Max: 1.0\n  Mean: 0.0\n  Output hash: {hash}\n{phase}\n"
        )
    };
    format!(
        "Total captured activations: 3\nExcluded ops dispatched: (none)\nLevel: modules\n{extra}{}\n\n{}\n{}\n{}",
        "=".repeat(80),
        block("lin/op_0_output", output, ""),
        block("lin/op_1_weight_grad", grad, "  Phase: backward\n"),
        block("lin/op_2_weight", weight, ""),
    )
}
