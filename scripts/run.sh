#!/usr/bin/env bash
# Builds the web terminal and tetherd, then starts the server on
# http://127.0.0.1:7420 (extra arguments go to tetherd, e.g. --listen).
set -euo pipefail
cd "$(dirname "$0")/.."
(cd web-demo && npm ci --no-audit --no-fund && npm run build)
cargo build --release -p tether-server
exec target/release/tetherd --web-root web-demo/dist "$@"
