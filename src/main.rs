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
    // Allocations of 1 MiB or more (a large log's columns, a chunk's
    // partial columns) are their own maps, returned when freed. glibc
    // otherwise raises that threshold to the largest block freed so far
    // (up to 32 MiB), after which the parse's partial columns stay in its
    // arenas once joined: run 2's parse against run 1's peaked at 650 MB
    // of heap on the 1 GiB pair instead of 464 MB (docs/performance.md).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called before any thread exists; mallopt only sets a tunable.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
    std::process::exit(actdiff::cli::main());
}
