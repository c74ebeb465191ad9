#!/usr/bin/env bash
# Builds OCX and installs it as PREFIX/bin/ocx (PREFIX: /usr/local unless
# given), with ocx-cgi and ocx-mcp beside it as links to the same binary.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-/usr/local}"
cargo build --locked --release -q
install -d "$prefix/bin"
install -m755 target/release/ocx "$prefix/bin/ocx"
ln -sf ocx "$prefix/bin/ocx-cgi"
ln -sf ocx "$prefix/bin/ocx-mcp"
echo "installed $prefix/bin/ocx, with ocx-cgi and ocx-mcp beside it"
