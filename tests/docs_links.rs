//! Every relative link in `README.md` and `docs/*.md` resolves: the file or
//! folder it names exists, and a `#anchor` into a Markdown file names one of
//! its headings (GitHub's anchors: the heading text lower-cased, punctuation
//! other than `-` and `_` dropped, spaces as `-`, a repeated heading
//! suffixed `-1`, `-2`, …). Links with a scheme (`https:`, `mailto:`) are not
//! checked; neither is anything inside code (fenced blocks, `code spans`).
//! Also: the README stays within 300 lines (issue 25).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files whose links are checked.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "no docs/*.md");
    pages.extend(docs);
    pages
}

/// The lines of `text` outside fenced code blocks, with their 1-based
/// numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` with its code spans removed (a run of N backticks up to the next
/// run of exactly N).
fn without_code(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'`' {
            let n = b[i..].iter().take_while(|&&c| c == b'`').count();
            let mut j = i + n;
            let mut close = None;
            while j < b.len() {
                if b[j] == b'`' {
                    let m = b[j..].iter().take_while(|&&c| c == b'`').count();
                    if m == n {
                        close = Some(j + m);
                        break;
                    }
                    j += m;
                } else {
                    j += 1;
                }
            }
            match close {
                Some(end) => {
                    out.push(' ');
                    i = end;
                }
                None => {
                    out.push_str(&line[i..i + n]);
                    i += n;
                }
            }
        } else {
            let c = line[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The link targets of one line of prose: inline `[text](target)` and
/// `![alt](target)`, and reference definitions `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut targets = Vec::new();
    let t = line.trim_start();
    if t.starts_with('[') {
        if let Some(close) = t.find("]:") {
            if !t[..close].contains("](") {
                if let Some(target) = t[close + 2..].split_whitespace().next() {
                    targets.push(target.trim_matches(['<', '>']).to_string());
                }
            }
        }
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        // The target runs to the `)` that balances the `(`.
        let mut depth = 0usize;
        let mut end = None;
        for (k, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(k);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let inner = after[..end].trim();
        // An optional title: `(target "title")`.
        let target = inner.split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    // Rendered text: links keep their text, emphasis and code marks go.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](") {
            Some(mid) => {
                let after = &rest[open + mid + 2..];
                let Some(close) = after.find(')') else { break };
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..open + mid]);
                rest = &after[close + 1..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's ATX headings (outside code blocks).
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashSet<String> = HashSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        let level = t.chars().take_while(|&c| c == '#').count();
        if level == 0 || level > 6 || !(t[level..].is_empty() || t[level..].starts_with(' ')) {
            continue;
        }
        let heading = t[level..].trim().trim_end_matches('#').trim();
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// Every broken relative link of `page`, as `page:line: target (why)`.
fn broken_links(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).expect("a page");
    let dir = page.parent().expect("a folder");
    let name = page
        .strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string();
    let mut broken = Vec::new();
    for (n, line) in prose_lines(&text) {
        for target in link_targets(line) {
            if target.is_empty() {
                broken.push(format!("{name}:{n}: an empty link"));
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.to_path_buf()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{name}:{n}: {target} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor {
                if file.extension().is_some_and(|e| e == "md") {
                    let headings = anchors(&std::fs::read_to_string(&file).expect("a page"));
                    if !headings.contains(anchor) {
                        broken.push(format!("{name}:{n}: {target} (no such heading)"));
                    }
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_readme_and_docs_resolves() {
    let broken: Vec<String> = pages().iter().flat_map(|p| broken_links(p)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn readme_is_at_most_300_lines() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(
        n <= 300,
        "README.md has {n} lines (at most 300; the guide is docs/)"
    );
}

#[test]
fn the_checker_finds_links_and_anchors_as_github_does() {
    assert_eq!(
        link_targets("see [a](x.md#y), ![img](p.png \"t\") and `[no](code.md)`"),
        ["x.md#y", "p.png"]
    );
    assert_eq!(link_targets("[ref]: docs/a.md"), ["docs/a.md"]);
    assert_eq!(link_targets("[a (b)](c_(d).md)"), ["c_(d).md"]);
    assert_eq!(slug("Rules and actdiff.toml"), "rules-and-actdifftoml");
    assert_eq!(
        slug("What differs from TorchTitan's tracer"),
        "what-differs-from-torchtitans-tracer"
    );
    assert_eq!(
        slug("Capturing a step (actdiff_capture)"),
        "capturing-a-step-actdiff_capture"
    );
    assert_eq!(slug("`--rows` (JSON Lines)"), "--rows-json-lines");
    assert_eq!(slug("See [the page](x.md)"), "see-the-page");
    let a = anchors("# A\n## A\n```\n# not a heading\n```\n### B: c\n");
    assert!(a.contains("a") && a.contains("a-1") && a.contains("b-c"));
    assert!(!a.contains("not-a-heading"));
    assert_eq!(prose_lines("x\n```\n[a](b)\n```\ny").len(), 2);
}
