//! Sets `cfg(has_shared)` when the shared conformance data (`../shared/testdata`)
//! sits beside the checkout, so tests that need it are reported as ignored
//! (not passed) on a clone without it. `ACTDIFF_SHARED` overrides the path.
//! With feature `capture` it also adds an rpath to libtorch's folder.

use std::path::PathBuf;

fn main() {
    // Feature `capture`: torch-sys (`links = "tch"`) tells us libtorch's folder. An rpath to it
    // lets the capture tests, binaries and the Python extension load libtorch without
    // LD_LIBRARY_PATH (shared/notes/tch.md). Absent in the default build.
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
    }
    println!("cargo::rustc-check-cfg=cfg(has_shared)");
    println!("cargo::rerun-if-env-changed=ACTDIFF_SHARED");
    let dir = std::env::var_os("ACTDIFF_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../shared")
        });
    println!("cargo::rerun-if-changed={}", dir.display());
    if dir.join("testdata").is_dir() {
        println!("cargo::rustc-cfg=has_shared");
        println!("cargo::rustc-env=ACTDIFF_SHARED_DIR={}", dir.display());
    } else {
        println!("cargo::rustc-env=ACTDIFF_SHARED_DIR=");
    }
}
