#!/usr/bin/env bash
# The README's second command: every test, on a fresh machine too. Does its
# own set-up first, each part only when it is missing:
#   - Debian's chromium, for the browser tests (tests/browser.rs,
#     tests/browser_layout.rs drive it through the headless_chrome crate, no
#     chromedriver; needs root and apt);
#   - util-linux's `script` (bsdutils), which gives the progress-bar test a
#     terminal;
#   - python3 with its venv module (Debian's python3-venv), then the
#     DuckDB/PyYAML venv of tests/shard.rs (scripts/py-venv.sh, under
#     ~/.cache/actdiff-py-venv; it takes a lock, so the tests that also call
#     it cannot race);
# then runs `cargo test --release` with any arguments given here appended
# (scripts/test.sh -- --nocapture). The conformance tests need ../shared
# beside the checkout (or ACTDIFF_SHARED); without it they are reported as
# ignored. .ci/run calls this script for its test step.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts/test.sh: cargo not found: install Rust first (https://rustup.rs)" >&2
    exit 1
fi

apt_packages=()
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
command -v script >/dev/null 2>&1 || apt_packages+=(bsdutils)
if ! command -v python3 >/dev/null 2>&1; then
    apt_packages+=(python3 python3-venv)
elif [[ ! -x "${ACTDIFF_PY_VENV:-$HOME/.cache/actdiff-py-venv}/bin/python" ]] \
    && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    apt_packages+=(python3-venv)
fi
if [[ ${#apt_packages[@]} -gt 0 ]]; then
    echo "==> apt-get install ${apt_packages[*]}"
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: ${apt_packages[*]} missing, and installing them needs root and apt-get (Debian)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi

echo "==> scripts/py-venv.sh"
scripts/py-venv.sh

echo "==> cargo test --release $*"
exec cargo test --release "$@"
