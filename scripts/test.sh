#!/usr/bin/env bash
# Runs every test of the project on a fresh Debian machine: installs what the
# tests need (Chromium, nginx, tmux, python3-venv, openssl, curl, vim, less,
# procps, htop, vttest, xterm, xvfb and time from Debian, websocketd for the benchmark's peer section, the npm packages of the TypeScript client, the web demo
# and the screen judge, the Python client's test packages and the Kubernetes
# Python client in venvs; kubectl must be on the PATH), checks formatting and
# lints, runs the Rust tests,
# the TypeScript and Python clients' tests, the browser tests, every example
# of the docs (tests/docs/run_docs.py), and the benchmark harness once in
# quick mode. Fails when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's wall time is printed when the next begins, and all of them
# at the end (docs/TESTING.md says what each costs on a 2-core machine).
started=$SECONDS
step_started=$SECONDS
step_name=""
timings=()
step() {
  if [[ -n $step_name ]]; then
    timings+=("$(printf '%5ds  %s' $((SECONDS - step_started)) "$step_name")")
  fi
  step_name=$1
  step_started=$SECONDS
  printf '\n==> %s\n' "$*"
}

step "system packages (chromium, nginx, tmux, python3-venv, openssl, curl; vim, less, procps, htop, vttest, and xterm under xvfb for the screen judge; time for the usage checks; websocketd for the benchmark peers)"
need=()
# openssl makes the TLS tests' certificates; curl checks the Unix socket's mode;
# /usr/bin/time -v is what tests/tests/limits.rs compares usage with; real
# xterm on Xvfb judges the server's screen (tests/tests/screen_corpus/),
# on recordings of vim, less, top, htop, tmux and vttest.
for pkg in chromium nginx tmux python3-venv openssl curl vim less procps htop vttest xterm xvfb time websocketd; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

step "kubectl (the Kubernetes tests run the real one)"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is not on the PATH. tests/tests/kube/ runs the real kubectl against tetherd;" >&2
  echo "install it (https://kubernetes.io/docs/tasks/tools/) and run this script again." >&2
  exit 1
fi
kubectl version --client

step "Kubernetes Python client in target/kube-venv"
# tests/tests/kube/ runs tests/kube/python_client.py with this venv.
KUBE_PYTHON_CLIENT="kubernetes==37.0.2"
if ! target/kube-venv/bin/python -c 'import kubernetes, sys; sys.exit(kubernetes.__version__ != "37.0.2")' 2>/dev/null; then
  python3 -m venv target/kube-venv
  target/kube-venv/bin/pip install -q --disable-pip-version-check --root-user-action=ignore "$KUBE_PYTHON_CLIENT"
fi

step "asciinema 2.4.0 (its player reads tetherd's v2 recordings) in target/asciinema-venv"
# tests/tests/recording.rs plays a recording with the real asciinema.
if ! target/asciinema-venv/bin/asciinema --version 2>/dev/null | grep -q '2.4.0'; then
  python3 -m venv target/asciinema-venv
  target/asciinema-venv/bin/pip install -q --disable-pip-version-check --root-user-action=ignore "asciinema==2.4.0"
fi

step "asciinema 3.2.0 (crates.io; it reads tetherd's v3 recordings) in target/asciinema3"
# tests/tests/recording_players.rs converts recordings with it: about
# 3 minutes of CPU to build on a fresh machine, nothing once built.
if ! target/asciinema3/bin/asciinema --version 2>/dev/null | grep -q '3.2.0'; then
  cargo install --quiet --locked asciinema --version 3.2.0 --root target/asciinema3
fi

step "npm packages (typescript client, web demo)"
(cd typescript && npm ci --no-audit --no-fund)
(cd web-demo && npm ci --no-audit --no-fund)
(cd tests/screen && npm ci --no-audit --no-fund)

step "deploy/: nginx -t of both fleet configurations, kubectl kustomize of the manifests"
check_nginx() {
  local dir
  dir=$(mktemp -d)
  printf 'pid %s/nginx.pid;\nerror_log %s/error.log;\nevents {}\nhttp { include %s; }\n' \
    "$dir" "$dir" "$PWD/$1" >"$dir/nginx.conf"
  /usr/sbin/nginx -t -q -p "$dir" -c "$dir/nginx.conf"
  rm -rf "$dir"
}
check_nginx deploy/nginx/fleet.conf
check_nginx deploy/nginx/fleet-dns.conf
kubectl kustomize deploy/ >/dev/null

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

step "cargo build"
cargo build --workspace --bins

step "the format-1 tetherd (git archive of its commit, built apart) for the handover's real hop"
bash scripts/older-tetherd.sh

step "cargo test"
# Four tests at a time on two cores: most of them wait on processes,
# sockets and timers, not the CPU (docs/TESTING.md says what each step
# costs). The latency test is a binary of its own and runs alone.
cargo test --workspace -- --test-threads=4

step "screen judge: xterm.js replays the recordings cargo test made (target/screen-judge)"
(cd tests/screen && npm test)

step "typescript client: build, protocol vectors, tests against tetherd"
(cd typescript && TETHERD_BIN="$PWD/../target/debug/tetherd" npm test)

step "python client: venv, mypy --strict, pytest against target/debug/tetherd"
python3 -m venv target/py-venv
target/py-venv/bin/pip install --quiet --disable-pip-version-check --root-user-action=ignore './python[test]'
(cd python && ../target/py-venv/bin/mypy)
# pytest exits non-zero on any failure, and with 5 when it collected no test:
# either fails this script.
(cd python && TETHERD_BIN="$PWD/../target/debug/tetherd" ../target/py-venv/bin/pytest -q -p no:cacheprovider)

step "web demo: typecheck, browser tests (Chromium), and the mixed-client soak (docs/TESTING.md)"
# The soak attaches the CLI (target/debug/tether, beside TETHERD_BIN) and
# the Python client (target/py-venv, made above) next to the page.
(cd web-demo && TETHERD_BIN="$PWD/../target/debug/tetherd" npm test)

step "docs: every shell, Python and TypeScript example of README.md, docs/ and the client READMEs, against a real tetherd"
# Listed by file and line; needs the binaries, the TypeScript client and the
# web demo built, and ./python in target/py-venv (all done above).
target/py-venv/bin/python tests/docs/run_docs.py

if [[ -d bench ]]; then
  step "benchmark harness, quick mode (proves it runs; no timed assertions)"
  # The debug build, already made above: a quick run proves every section
  # runs and reports, and a release build of the workspace would cost CI
  # minutes for figures nobody reads (docs/BENCHMARKS.md's are release).
  # The binary `cargo build --workspace --bins` made: `cargo run -p` would
  # unify features for the harness alone and build its dependencies again.
  target/debug/tether-bench all --quick --tetherd target/debug/tetherd --json target/bench-quick.json --svg-dir target/bench-quick
  step "per-hop trace analyser (bench/hops.py): its arithmetic on a recorded sample"
  python3 bench/hops.py --self-test
  step "bench/guest.sh parses (not run here: it downloads and boots a Debian guest, docs/BENCHMARKS.md)"
  bash -n bench/guest.sh
  step "client exec throughput, quick: each client exec is one request and reaches a quarter of the server's rate (the goal is half)"
  target/py-venv/bin/python bench/clients/exec_rate.py --tetherd target/debug/tetherd --rounds 1 --serial 20 --parallel 300 --check
fi

step "all tests passed"
printf '\n==> time per step (%ds in all)\n' $((SECONDS - started))
printf '%s\n' "${timings[@]}"
