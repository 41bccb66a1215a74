//! Build script.
//!
//! - Sets `cfg(has_shared)` when the shared conformance data (`../shared/testdata`)
//!   sits beside the checkout, so tests that need it are reported as ignored
//!   (not passed) on a clone without it. `ACTDIFF_SHARED` overrides the path.
//! - With feature `capture`: compiles the capture agent's libtorch shim
//!   (`src/capture/shim/*.cpp`) against the torch installed in the build's
//!   Python environment, the way a torch C++ extension is built (torch's
//!   include folders, `_GLIBCXX_USE_CXX11_ABI` as torch was built, C++20), and
//!   links it to `torch/lib` with an rpath, so nothing needs `LD_LIBRARY_PATH`.
//!   The Python is, in order: `PYO3_PYTHON` (maturin sets it to the
//!   interpreter it builds for), `$VIRTUAL_ENV/bin/python`,
//!   `$CONDA_PREFIX/bin/python`, `python3`, `python`. A torch outside
//!   [`TORCH_MIN`]..=[`TORCH_MAX`] (or none) stops the build with one error.
//!   With feature `python` the shim's Python half (`shim_python.cpp`) is added
//!   and libtorch_python is linked.

use std::path::PathBuf;

fn main() {
    shared_data_cfg();
    #[cfg(feature = "capture")]
    if let Err(msg) = shim::build() {
        // One error line, as cargo prints it, then stop.
        println!("cargo::error={msg}");
    }
}

#[cfg(feature = "capture")]
mod shim {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The oldest torch release (major, minor) the shim is built and tested with.
    const TORCH_MIN: (u32, u32) = (2, 13);
    /// The newest torch release (major, minor) the shim is built and tested with.
    const TORCH_MAX: (u32, u32) = (2, 15);

    /// What the build's Python says about its torch.
    struct Torch {
        python: String,
        version: String,
        dir: PathBuf,
        cxx11_abi: bool,
        python_include: PathBuf,
    }

    const PROBE: &str = r#"
import os, sys, sysconfig
print("python=" + sys.executable)
print("pyinclude=" + sysconfig.get_paths()["include"])
try:
    import torch
except Exception as e:
    print("error=" + type(e).__name__ + ": " + str(e).replace("\n", " "))
    sys.exit(0)
print("version=" + torch.__version__)
print("dir=" + os.path.dirname(torch.__file__))
print("abi=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)))
"#;

    fn candidates() -> Vec<String> {
        for v in ["PYO3_PYTHON", "VIRTUAL_ENV", "CONDA_PREFIX"] {
            println!("cargo::rerun-if-env-changed={v}");
        }
        let mut c = Vec::new();
        if let Ok(p) = std::env::var("PYO3_PYTHON") {
            c.push(p);
        }
        for v in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
            if let Ok(d) = std::env::var(v) {
                c.push(Path::new(&d).join("bin/python").display().to_string());
            }
        }
        c.push("python3".into());
        c.push("python".into());
        c
    }

    fn probe() -> Result<Torch, String> {
        let mut tried = Vec::new();
        for py in candidates() {
            let out = match Command::new(&py).arg("-c").arg(PROBE).output() {
                Ok(o) if o.status.success() => o,
                Ok(o) => {
                    tried.push(format!(
                        "{py}: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ));
                    continue;
                }
                Err(e) => {
                    tried.push(format!("{py}: {e}"));
                    continue;
                }
            };
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let get = |k: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("{k}=")))
                    .map(str::to_string)
            };
            let python = get("python").unwrap_or(py.clone());
            if let Some(e) = get("error") {
                // The first Python found is the environment's: do not look further
                // (another Python's torch would not be the one the extension loads).
                return Err(format!(
                "actdiff capture agent: the build's Python ({python}) cannot import torch ({e}). \
                 Install torch {}.{}..{}.{} in that environment, or point PYO3_PYTHON at a Python that has it.",
                TORCH_MIN.0, TORCH_MIN.1, TORCH_MAX.0, TORCH_MAX.1
            ));
            }
            return Ok(Torch {
                python,
                version: get("version").ok_or("the torch probe printed no version")?,
                dir: PathBuf::from(get("dir").ok_or("the torch probe printed no folder")?),
                cxx11_abi: get("abi").as_deref() == Some("1"),
                python_include: PathBuf::from(get("pyinclude").unwrap_or_default()),
            });
        }
        Err(format!(
            "actdiff capture agent: no Python found to locate torch (tried {})",
            tried.join("; ")
        ))
    }

    /// `2.15.0+cu132` → (2, 15).
    fn major_minor(v: &str) -> Option<(u32, u32)> {
        let mut it = v.split(['.', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }

    pub fn build() -> Result<(), String> {
        let t = probe()?;
        let mm = major_minor(&t.version);
        if !mm.is_some_and(|mm| (TORCH_MIN..=TORCH_MAX).contains(&mm)) {
            return Err(format!(
            "actdiff capture agent: torch {} ({}) is not supported: it builds against torch {}.{} to {}.{} \
             (the releases it is tested with). Install one of them in the environment of {}, e.g. \
             pip install 'torch>={}.{},<{}.{}'.",
            t.version,
            t.dir.display(),
            TORCH_MIN.0,
            TORCH_MIN.1,
            TORCH_MAX.0,
            TORCH_MAX.1,
            t.python,
            TORCH_MIN.0,
            TORCH_MIN.1,
            TORCH_MAX.0,
            TORCH_MAX.1 + 1
        ));
        }
        // A torch upgraded in place rebuilds the shim.
        println!(
            "cargo::rerun-if-changed={}",
            t.dir.join("version.py").display()
        );
        let shim = Path::new("src/capture/shim");
        println!("cargo::rerun-if-changed={}", shim.display());
        let python = std::env::var_os("CARGO_FEATURE_PYTHON").is_some();

        let mut b = cc::Build::new();
        b.cpp(true)
            .std("c++20")
            .file(shim.join("shim.cpp"))
            .include(t.dir.join("include"))
            .include(t.dir.join("include/torch/csrc/api/include"))
            .define(
                "_GLIBCXX_USE_CXX11_ABI",
                if t.cxx11_abi { "1" } else { "0" },
            )
            // The shim only calls into libtorch: -O1 is as fast at run time and
            // compiles torch's headers faster than -O3.
            .opt_level(1)
            .warnings(false)
            .extra_warnings(false)
            .flag_if_supported("-Wno-unused-parameter");
        if python {
            b.file(shim.join("shim_python.cpp"))
                .include(&t.python_include);
        }
        b.try_compile("actdiff_torch_shim").map_err(|e| {
            format!("actdiff capture agent: compiling the libtorch shim failed: {e}")
        })?;

        let lib = t.dir.join("lib");
        println!("cargo::rustc-link-search=native={}", lib.display());
        if python {
            println!("cargo::rustc-link-lib=dylib=torch_python");
        }
        println!("cargo::rustc-link-lib=dylib=torch_cpu");
        println!("cargo::rustc-link-lib=dylib=c10");
        println!("cargo::rustc-link-arg=-Wl,-rpath,{}", lib.display());
        println!("cargo::rustc-env=ACTDIFF_TORCH_VERSION={}", t.version);
        Ok(())
    }
}

fn shared_data_cfg() {
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
