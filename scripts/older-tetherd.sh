#!/usr/bin/env bash
# Builds the tetherd of an older commit, for the handover's real hop
# between formats (tests/tests/handover_hop.rs): the last commit that wrote
# handover format 1. Prints the binary's path. Built once into
# target/older/ (its own target directory: ~3 minutes on 2 cores), from the
# commit's own files (git archive), so the work tree is untouched.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
commit="${1:-a84753c0ede9db7df95b7f9e8dadf57633b0da2e}"
out="$root/target/older/$commit"
bin="$out/target/debug/tetherd"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
  # A shallow clone lacks it: fetch that one commit.
  git -C "$root" fetch --quiet --depth=1 origin "$commit" >&2 || {
    echo "older-tetherd: commit $commit is not in this clone and could not be fetched" >&2
    exit 1
  }
fi
rm -rf "$out/src"
mkdir -p "$out/src"
git -C "$root" archive "$commit" | tar -x -C "$out/src"
# Cargo's variables for the crate being tested would leak into this build.
unset $(env | grep -o '^CARGO_PKG_[A-Z_]*\|^CARGO_MANIFEST_[A-Z_]*\|^CARGO_CRATE_[A-Z_]*\|^CARGO_BIN_[A-Z_]*\|^CARGO_PRIMARY_PACKAGE' || true)
cargo build --quiet --locked --manifest-path "$out/src/Cargo.toml" \
  -p tether-server --bin tetherd --target-dir "$out/target" >&2
# Only the binary is needed: the rest of its target directory goes.
cp "$bin" "$out/tetherd.tmp"
rm -rf "$out/target" "$out/src"
mkdir -p "$(dirname "$bin")"
mv "$out/tetherd.tmp" "$bin"
echo "$bin"
