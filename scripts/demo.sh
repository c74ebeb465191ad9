#!/usr/bin/env bash
# Sets up OCX and shows it on a demo repository made fresh in ./demo (or
# $OCX_DEMO_DIR): a maintainer and a contributor, a first thread, a reply,
# then `ocx status` and `ocx thread` as each of them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --locked --release -q
ocx="$PWD/target/release/ocx"
fossil=$(command -v /usr/local/bin/fossil || command -v fossil)
demo="${OCX_DEMO_DIR:-$PWD/demo}"
rm -rf "$demo"; mkdir -p "$demo"
repo="$demo/demo.fossil"
export USER="${USER:-maintainer}"
"$fossil" new --admin-user maintainer "$repo" >/dev/null
"$fossil" user default maintainer -R "$repo"
"$fossil" user new pat pat@example.org pat-password -R "$repo" >/dev/null
"$fossil" user capabilities pat v4 -R "$repo" >/dev/null
say() { printf '\n$ %s\n' "$*"; "$@"; }
root=$("$ocx" post -R "$repo" --title "Welcome to the demo" --text "Say hello in this thread." --json \
  | sed -n 's/^    "hash": "\([0-9a-f]*\)",$/\1/p')
say "$ocx" post -R "$repo" --user pat --to "${root:0:12}" --text "Hello from pat."
say "$ocx" status -R "$repo" --user pat
say "$ocx" thread -R "$repo" --of "${root:0:12}"
printf '\nThe demo repository is %s; try: %s list\n' "$repo" "$ocx"
