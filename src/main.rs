//! The `actdiff` binary: see [`actdiff::cli`].

fn main() {
    // Like other Unix filters: when the reader of stdout goes away
    // (`actdiff compare ... --format json | head`), end quietly instead of
    // failing on a write to a closed pipe.
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; SIG_DFL is
    // the default action of SIGPIPE, which Rust's runtime set to ignore.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(actdiff::cli::main());
}
