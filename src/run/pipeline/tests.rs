//! Tests of the compare pipeline's helpers.

use super::default_names;
use std::path::Path;

fn names(a: &str, b: &str) -> (String, String) {
    default_names(Path::new(a), Path::new(b))
}

#[test]
fn numerics_folders_are_named_by_the_folder_above() {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        names("baseline/numerics", "current/numerics"),
        s("baseline", "current")
    );
    assert_eq!(
        names("/ci/base/numerics/", "/ci/pr-4821/numerics"),
        s("base", "pr-4821")
    );
    assert_eq!(
        names(
            "a/numerics/rank_0_activations.log",
            "b/numerics/rank_0_activations.log"
        ),
        s("a", "b")
    );
    assert_eq!(names("x/run_A", "x/run_B"), s("run_A", "run_B"));
    assert_eq!(
        names("x/run_A", "x/run_A"),
        s("run_A", "run_A"),
        "one folder twice"
    );
    assert_eq!(
        names("j1/out/numerics", "j2/out/numerics"),
        s("j1", "j2"),
        "as far up as it takes"
    );
}
