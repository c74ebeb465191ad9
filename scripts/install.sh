#!/usr/bin/env bash
# Builds OCX and installs it as PREFIX/bin/ocx (PREFIX: /usr/local unless
# given), with the page's hand-off program ocx-cgi beside it, and ocx-mcp as a link to
# the same binary.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-/usr/local}"
cargo build --locked --release -q
install -d "$prefix/bin"
install -m755 target/release/ocx "$prefix/bin/ocx"
rm -f "$prefix/bin/ocx-cgi"
install -m755 target/release/ocx-cgi "$prefix/bin/ocx-cgi"
ln -sf ocx "$prefix/bin/ocx-mcp"
echo "installed $prefix/bin/ocx, with ocx-cgi and ocx-mcp beside it"
