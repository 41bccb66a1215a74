//! Manual pairs (`--override FILE`): side-1 key → side-2 key.
//!
//! Text format, as the reference CLI reads it: one pair per line,
//! `<side1 key>, <side2 key>`, split at the first comma, both parts trimmed;
//! blank lines and lines starting with `#` are skipped; a later line for the
//! same side-1 key wins. actdiff also reads a JSON object
//! `{"side1 key": "side2 key", ...}` (detected by a leading `{`), and warns
//! about lines without a comma (which the reference skips silently).

use std::path::{Path, PathBuf};

use indexmap::IndexMap;

/// Errors reading an override file.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// The file could not be read.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// A JSON override file that is not an object of strings.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was expected.
        message: String,
    },
}

/// Parsed overrides, in the order their side-1 keys first appeared (an
/// [`IndexMap`]: inserting a key again replaces its target and keeps its
/// place).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    map: IndexMap<Vec<u8>, Vec<u8>, ahash::RandomState>,
    /// Lines skipped for lacking a comma: (1-based line, text).
    pub skipped: Vec<(usize, String)>,
}

impl Overrides {
    /// No overrides.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Number of side-1 keys with an override.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// The side-2 target of side-1 key `k`.
    pub fn get(&self, k: &[u8]) -> Option<&[u8]> {
        self.map.get(k).map(|v| v.as_slice())
    }
    /// Adds or replaces a pair (a later pair for the same side-1 key wins).
    pub fn insert(&mut self, k: &str, v: &str) {
        self.map
            .insert(k.as_bytes().to_vec(), v.as_bytes().to_vec());
    }
    /// Pairs in first-appearance order of their side-1 keys.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.map.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// Parses override text (see the module doc); `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Overrides, OverrideError> {
        let mut o = Overrides::default();
        if text.trim_start().starts_with('[') {
            return Err(OverrideError::Syntax {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                message: "expected `run1 key, run2 key` lines or a JSON object, not a JSON array"
                    .into(),
            });
        }
        if text.trim_start().starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(|e| OverrideError::Syntax {
                    path: path.to_path_buf(),
                    line: e.line(),
                    column: e.column().max(1),
                    message: format!("invalid JSON override file: {e}"),
                })?;
            let obj = v.as_object().ok_or_else(|| OverrideError::Syntax {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                message: "expected a JSON object of \"run1 key\": \"run2 key\" pairs".into(),
            })?;
            for (k, v) in obj {
                let v = v.as_str().ok_or_else(|| OverrideError::Syntax {
                    path: path.to_path_buf(),
                    line: 1,
                    column: 1,
                    message: format!("override for `{k}` is not a string"),
                })?;
                o.insert(k.trim(), v.trim());
            }
            return Ok(o);
        }
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            match t.split_once(',') {
                Some((a, b)) => o.insert(a.trim(), b.trim()),
                None => o.skipped.push((i + 1, t.to_string())),
            }
        }
        Ok(o)
    }

    /// Reads and parses an override file.
    pub fn read(path: &Path) -> Result<Overrides, OverrideError> {
        let bytes = std::fs::read(path).map_err(|e| OverrideError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let text = String::from_utf8_lossy(&bytes);
        Overrides::parse(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_as_reference() {
        let o = Overrides::parse(
            "# c\n\na/op_1_mm, b/op_3_mm\nx,y , z\nnocomma\na/op_1_mm,b/op_4_mm\n",
            Path::new("o.txt"),
        )
        .unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!(o.get(b"a/op_1_mm"), Some(&b"b/op_4_mm"[..]));
        assert_eq!(o.get(b"x"), Some(&b"y , z"[..]));
        assert_eq!(o.skipped, vec![(5, "nocomma".to_string())]);
        // A later line replaces the target and keeps the key's first place.
        let pairs: Vec<_> = o.pairs().collect();
        assert_eq!(
            pairs,
            vec![
                (&b"a/op_1_mm"[..], &b"b/op_4_mm"[..]),
                (&b"x"[..], &b"y , z"[..])
            ]
        );
    }

    #[test]
    fn json_object_and_errors() {
        let o = Overrides::parse("{\"a\": \"b\"}", Path::new("o.json")).unwrap();
        assert_eq!(o.get(b"a"), Some(&b"b"[..]));
        let e = Overrides::parse("{\"a\": 1}", Path::new("o.json")).unwrap_err();
        assert!(e.to_string().contains("o.json"));
        let e = Overrides::parse("{\"a\" \"b\"}", Path::new("o.json")).unwrap_err();
        assert!(e.to_string().starts_with("o.json:1:"), "{e}");
    }
}
