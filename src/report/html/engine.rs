//! The tera engine: the built-in templates (embedded at build time), the
//! HTML escaping they use, and rendering a template into a file or a string.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::OnceLock;

use serde::Serialize;
use tera::{Context, Tera};

use crate::report::ReportError;

/// The built-in templates: (name, text). Names ending in `.html` are
/// autoescaped; the CSS and JS are static text included by the pages.
const TEMPLATES: [(&str, &str); 6] = [
    ("report.css", include_str!("../../../templates/report.css")),
    ("report.js", include_str!("../../../templates/report.js")),
    ("index.html", include_str!("../../../templates/index.html")),
    ("index.js", include_str!("../../../templates/index.js")),
    ("ranks.js", include_str!("../../../templates/ranks.js")),
    ("steps.html", include_str!("../../../templates/steps.html")),
];

/// The text of built-in template `name` (the stylesheet and page script
/// are written as files of their own).
pub(super) fn static_text(name: &str) -> Option<&'static str> {
    TEMPLATES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// HTML escaping for text and quoted attribute values: `& < > " '`.
/// (Tera's default also escapes `/`, which only bloats keys and paths.)
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` HTML-escaped as [`escape`] does, written straight into a
/// formatter (`write!(o, "{}", Esc(key))`), without a `String` of its own:
/// the byte writers' way to escape.
#[derive(Clone, Copy)]
pub(super) struct Esc<'a>(pub(super) &'a str);

impl std::fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0;
        let mut from = 0;
        for (i, b) in s.bytes().enumerate() {
            let rep = match b {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                b'\'' => "&#39;",
                _ => continue,
            };
            f.write_str(&s[from..i])?;
            f.write_str(rep)?;
            from = i + 1;
        }
        f.write_str(&s[from..])
    }
}

/// The error text of `e` and all its sources, `outer: inner: ...` (tera
/// puts the useful part, such as the template line, in a source).
fn error_chain(e: tera::Error) -> String {
    format!("{:#}", anyhow::Error::from(e))
}

/// The template engine with the built-in templates, built once.
pub(super) fn engine() -> Result<&'static Tera, ReportError> {
    static ENGINE: OnceLock<Result<Tera, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut t = Tera::default();
            t.autoescape_on(vec![".html"]);
            t.set_escape_fn(escape);
            t.add_raw_templates(TEMPLATES.to_vec())
                .map_err(error_chain)?;
            Ok(t)
        })
        .as_ref()
        .map_err(|m| ReportError::Template {
            name: "templates/".into(),
            message: m.clone(),
        })
}

/// Builds the template engine now (it is otherwise built on first use), so
/// that a caller can do it on a spare thread while logs are parsed. Errors
/// are kept and returned by the first report written.
pub fn prepare() {
    let _ = engine();
}

/// The tera context of template `name`'s data `data`.
fn context(name: &str, data: &impl Serialize) -> Result<Context, ReportError> {
    Context::from_serialize(data).map_err(|e| ReportError::Template {
        name: name.into(),
        message: error_chain(e),
    })
}

/// Renders template `name` with `data` into the file `path`.
pub(super) fn render_file(
    name: &str,
    data: &impl Serialize,
    path: &Path,
) -> Result<(), ReportError> {
    let ctx = context(name, data)?;
    let tera = engine()?;
    let file = File::create(path).map_err(|e| ReportError::io(path, e))?;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    if let Err(e) = tera.render_to(name, &ctx, &mut w) {
        if let tera::ErrorKind::Io(_) = e.kind {
            return Err(ReportError::Io {
                path: path.to_path_buf(),
                message: error_chain(e),
            });
        }
        return Err(ReportError::Template {
            name: name.into(),
            message: error_chain(e),
        });
    }
    w.flush().map_err(|e| ReportError::io(path, e))
}

/// Writes `parts`, in order, into the file `path`.
pub(super) fn write_parts(path: &Path, parts: &[&[u8]]) -> Result<(), ReportError> {
    let mut file = File::create(path).map_err(|e| ReportError::io(path, e))?;
    for part in parts {
        file.write_all(part).map_err(|e| ReportError::io(path, e))?;
    }
    Ok(())
}
