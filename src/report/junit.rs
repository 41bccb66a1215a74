//! `--junit FILE`: JUnit XML with one test case per rank, so CI systems
//! (GitHub, GitLab, Jenkins) show a numeric regression natively. A rank
//! fails when it has gating divergences; its failure lists the origins and
//! entries. Ranks present on one side only are failing test cases too.

use std::io::Write;

use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;

use super::summary::{RankSummary, Summary};

fn failure_text(s: &Summary, r: &RankSummary) -> String {
    let mut t = format!(
        "{} diff, {} only in {}, {} only in {} ({} gating)\n",
        r.counts.diff, r.counts.only1, s.name1, r.counts.only2, s.name2, r.counts.gating
    );
    for c in &r.root_causes.causes {
        t.push_str(&format!(
            "{}: {} (line {}, row {})\n",
            c.kind.as_str(),
            c.row.key(),
            c.row.line1.unwrap_or(0),
            c.row.index
        ));
    }
    if let Some(f) = &r.first_divergence {
        t.push_str(&format!(
            "first divergence: {} ({})\n",
            f.key(),
            f.status.as_str()
        ));
    }
    t
}

/// Writes the JUnit XML of `s` to `w`.
pub fn write_junit(s: &Summary, w: impl Write) -> std::io::Result<()> {
    let mut x = Writer::new_with_indent(w, b' ', 2);
    let err = |e: quick_xml::Error| std::io::Error::other(e.to_string());
    x.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))
        .map_err(std::io::Error::other)?;
    let failures =
        s.ranks.iter().filter(|r| r.gates()).count() + s.ranks_only1.len() + s.ranks_only2.len();
    let tests = s.ranks.len() + s.ranks_only1.len() + s.ranks_only2.len();
    let mut suite = BytesStart::new("testsuite");
    suite.push_attribute((
        "name",
        format!("actdiff {} vs {}", s.name1, s.name2).as_str(),
    ));
    suite.push_attribute(("tests", tests.to_string().as_str()));
    suite.push_attribute(("failures", failures.to_string().as_str()));
    suite.push_attribute(("errors", "0"));
    x.write_event(Event::Start(suite))
        .map_err(std::io::Error::other)?;
    let case = |x: &mut Writer<_>,
                name: String,
                failure: Option<(String, String)>|
     -> std::io::Result<()> {
        let mut c = BytesStart::new("testcase");
        c.push_attribute(("classname", "actdiff.compare"));
        c.push_attribute(("name", name.as_str()));
        match failure {
            None => x
                .write_event(Event::Empty(c))
                .map_err(std::io::Error::other)?,
            Some((msg, body)) => {
                x.write_event(Event::Start(c))
                    .map_err(std::io::Error::other)?;
                let mut f = BytesStart::new("failure");
                f.push_attribute(("message", msg.as_str()));
                f.push_attribute(("type", "NumericDivergence"));
                x.write_event(Event::Start(f))
                    .map_err(std::io::Error::other)?;
                x.write_event(Event::Text(BytesText::new(&body)))
                    .map_err(std::io::Error::other)?;
                x.write_event(Event::End(BytesEnd::new("failure")))
                    .map_err(std::io::Error::other)?;
                x.write_event(Event::End(BytesEnd::new("testcase")))
                    .map_err(std::io::Error::other)?;
            }
        }
        Ok(())
    };
    for r in &s.ranks {
        let failure = r.gates().then(|| {
            let msg = match &r.root_causes.first_cause {
                Some(c) => format!(
                    "rank {}: numerics diverge; first {}: {}",
                    r.rank,
                    c.kind.as_str(),
                    c.row.key()
                ),
                None => format!(
                    "rank {}: numerics diverge ({} gating rows)",
                    r.rank, r.counts.gating
                ),
            };
            (msg, failure_text(s, r))
        });
        case(&mut x, format!("rank {}", r.rank), failure)?;
    }
    for (ranks, name) in [(&s.ranks_only1, &s.name1), (&s.ranks_only2, &s.name2)] {
        for rank in ranks {
            let msg = format!("rank {rank} is only in {name}");
            case(&mut x, format!("rank {rank}"), Some((msg.clone(), msg)))?;
        }
    }
    x.write_event(Event::End(BytesEnd::new("testsuite")))
        .map_err(std::io::Error::other)?;
    let _ = err;
    Ok(())
}
