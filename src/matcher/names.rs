//! serde's view of the result enums: [`Status`], [`Strategy`] and
//! [`CauseKind`] are written and read by their one name function
//! ([`Status::as_str`], [`Strategy::as_str`], [`CauseKind::json_name`];
//! each enum's `#[serde(into, try_from)]`), so that a name is spelled once
//! for JSON, Parquet, JUnit, the pages and the terminal.

use super::cause::CauseKind;
use super::{Status, Strategy};

/// The one of `all` named `name` by `name_of`, else an error naming `what`.
fn named<T: Copy>(
    all: &[T],
    name_of: impl Fn(T) -> Option<&'static str>,
    what: &str,
    name: &str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|x| name_of(*x) == Some(name))
        .ok_or_else(|| format!("unknown {what} `{name}`"))
}

impl From<Status> for &'static str {
    fn from(s: Status) -> &'static str {
        s.as_str()
    }
}

impl TryFrom<String> for Status {
    type Error = String;
    fn try_from(s: String) -> Result<Status, String> {
        named(&Status::ALL, |x| Some(x.as_str()), "status", &s)
    }
}

impl From<Strategy> for Option<&'static str> {
    fn from(s: Strategy) -> Option<&'static str> {
        s.as_str()
    }
}

impl TryFrom<Option<String>> for Strategy {
    type Error = String;
    fn try_from(s: Option<String>) -> Result<Strategy, String> {
        match s {
            None => Ok(Strategy::None),
            Some(s) => named(&Strategy::PASSES, Strategy::as_str, "pass", &s),
        }
    }
}

impl From<CauseKind> for &'static str {
    fn from(k: CauseKind) -> &'static str {
        k.json_name()
    }
}

impl TryFrom<String> for CauseKind {
    type Error = String;
    fn try_from(s: String) -> Result<CauseKind, String> {
        named(&CauseKind::ALL, |x| Some(x.json_name()), "cause kind", &s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_value() {
        for s in Status::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), s);
        }
        for p in Strategy::PASSES.into_iter().chain([Strategy::None]) {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, serde_json::to_string(&p.as_str()).unwrap());
            assert_eq!(serde_json::from_str::<Strategy>(&json).unwrap(), p);
        }
        for k in CauseKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(serde_json::from_str::<CauseKind>(&json).unwrap(), k);
        }
        assert!(serde_json::from_str::<Status>("\"same\"").is_err());
        assert!(serde_json::from_str::<Strategy>("\"none\"").is_err());
    }
}
