//! The `actdiff` binary: see [`actdiff::cli`].

fn main() {
    std::process::exit(actdiff::cli::main());
}
