#!/usr/bin/env bash
# Runs every test of the project on a fresh Debian machine: installs what the
# tests need (Chromium and nginx from Debian, the npm packages of the
# TypeScript client and the web demo),
# checks formatting and lints, runs the Rust tests, the browser tests, and
# the benchmark harness once in quick mode. Fails when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "system packages (chromium, nginx, tmux)"
need=()
for pkg in chromium nginx tmux; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

step "npm packages (typescript client, web demo)"
(cd typescript && npm ci --no-audit --no-fund)
(cd web-demo && npm ci --no-audit --no-fund)

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

step "cargo build"
cargo build --workspace --bins

step "cargo test"
cargo test --workspace

step "typescript client: build, protocol vectors, tests against tetherd"
(cd typescript && TETHERD_BIN="$PWD/../target/debug/tetherd" npm test)

step "web demo: typecheck and browser tests (Chromium)"
(cd web-demo && TETHERD_BIN="$PWD/../target/debug/tetherd" npm test)

if [[ -d bench ]]; then
  step "benchmark harness, quick mode (proves it runs; no timed assertions)"
  cargo run --release -p tether-bench -- all --quick --json target/bench-quick.json --svg-dir target/bench-quick
fi

step "all tests passed"
