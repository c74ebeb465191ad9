#!/usr/bin/env bash
# Installs what OCX and its tests need on a Debian machine: bubblewrap,
# Fossil at 2.23 or later (building 2.28 from Debian's own source package
# when the installed one is older), git and chattr for the git export,
# mkfs.ext4 and mount for each run's own filesystem, the Python MCP client for the
# client tests, and Chromium with playwright-core (installed under
# tests/browser/node_modules) for the web page's browser test, and the
# real agents the runner tests start: Claude Code and the Codex CLI from
# the npm registry at pinned versions (their native programs ship in the
# packages), tmux, which stands for a person's terminal in the tests that
# attach to a run's, curl, which the startup benchmark posts Fossil's
# own forum form with, and Prometheus, which the metrics test scrapes a
# node with. Safe to run again: each step is skipped when already done.
set -euo pipefail

FOSSIL_FLOOR="2.23"
need_root() { if [ "$(id -u)" -ne 0 ]; then echo "setup: run as root (or with sudo)" >&2; exit 1; fi; }

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  need_root
  if [ $apt_updated -eq 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

fossil_version() {
  "$1" version 2>/dev/null | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p'
}

ensure_fossil() {
  local f
  for f in /usr/local/bin/fossil /usr/bin/fossil; do
    if [ -x "$f" ]; then
      local v; v=$(fossil_version "$f")
      if [ -n "$v" ] && version_ge "$v" "$FOSSIL_FLOOR"; then echo "setup: fossil $v at $f"; return 0; fi
    fi
  done
  need_root
  apt_install build-essential zlib1g-dev libssl-dev tcl dpkg-dev
  echo "setup: building fossil 2.28 from Debian's source package (about two minutes)"
  local uri work
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1=="deb" {print $2; exit}' /etc/apt/sources.list)
  work=$(mktemp -d); mkdir -p "$work/lists/partial"
  echo "deb-src $uri sid main" > "$work/sources.list"
  local opts=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=/dev/null -o Dir::State::Lists="$work/lists")
  apt-get "${opts[@]}" update -qq
  (cd "$work" && apt-get "${opts[@]}" source --download-only -qq fossil)
  (cd "$work" && tar xf fossil_*.orig.tar.* && cd fossil-src-* \
     && ./configure --prefix=/usr/local >/dev/null && make -j"$(nproc)" >/dev/null \
     && install -m755 fossil /usr/local/bin/fossil)
  rm -rf "$work"
  echo "setup: $(/usr/local/bin/fossil version)"
}

ensure_python_mcp() {
  if python3 -c 'import mcp' 2>/dev/null; then return 0; fi
  python3 -m pip install -q 'mcp>=2,<3' >/dev/null
}

ensure_browser() {
  apt_install chromium
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then apt_install nodejs npm; fi
  local dir; dir="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
  if [ ! -d "$dir/node_modules/playwright-core" ]; then
    (cd "$dir" && npm install --no-audit --no-fund --silent >/dev/null)
  fi
}

CLAUDE_CODE_VERSION="2.1.197"
CODEX_VERSION="0.171.0"

ensure_agents() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then apt_install nodejs npm; fi
  local want=()
  case "$(claude --version 2>/dev/null)" in "$CLAUDE_CODE_VERSION "*) ;; *) want+=("@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION");; esac
  case "$(codex --version 2>/dev/null)" in *" $CODEX_VERSION") ;; *) want+=("@openai/codex@$CODEX_VERSION");; esac
  [ ${#want[@]} -eq 0 ] && return 0
  need_root
  echo "setup: installing ${want[*]} from the npm registry"
  npm install -g --no-audit --no-fund --silent "${want[@]}" >/dev/null
}

# Prometheus scrapes a node in the metrics test, which starts its own
# binary with its own configuration; the package's service is kept from
# starting (policy-rc.d) and, where systemd runs, disabled.
ensure_prometheus() {
  command -v prometheus >/dev/null && return 0
  need_root
  if [ $apt_updated -eq 0 ]; then apt-get update -qq; apt_updated=1; fi
  local policy=/usr/sbin/policy-rc.d kept=0
  if [ -e "$policy" ]; then kept=1; else printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  [ $kept -eq 1 ] || rm -f "$policy"
  if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
}

apt_install bubblewrap ca-certificates python3 curl
ensure_prometheus
# tmux stands where a person's terminal would in the tests that attach to
# a run's terminal.
command -v tmux >/dev/null || apt_install tmux
# git serves and makes the git export (git upload-pack, fossil git export);
# e2fsprogs' chattr makes an export immutable in its tests.
if [ ! -x /usr/local/bin/git ] && [ ! -x /usr/bin/git ]; then apt_install git; fi
# e2fsprogs' mkfs.ext4 and util-linux's mount make each run's own
# filesystem, which holds its disk budget.
if [ ! -x /usr/sbin/mkfs.ext4 ] && [ ! -x /sbin/mkfs.ext4 ]; then apt_install e2fsprogs; fi
command -v chattr >/dev/null || apt_install e2fsprogs
if [ ! -x /usr/bin/mount ] && [ ! -x /bin/mount ]; then apt_install mount; fi
ensure_fossil
if [ "${OCX_SETUP_CLIENTS:-1}" = "1" ]; then ensure_python_mcp || echo "setup: python mcp client not installed; MCP client tests will say so" >&2; fi
ensure_browser
if [ "${OCX_SETUP_AGENTS:-1}" = "1" ]; then ensure_agents; fi
