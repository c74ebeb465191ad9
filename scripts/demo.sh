#!/usr/bin/env bash
# Sets up and installs OCX (in /usr/local/bin), and shows its whole loop on
# a demo repository made fresh in /tmp/ocx-demo (or $OCX_DEMO_DIR, which
# every account must be able to reach, since each run is a host uid of its
# own when the node runs as root): the repository served on 127.0.0.1, made a
# node, OCX's demo agent offered as a runner with the example patterns, a
# run started from the pattern `helper`, a post the run hears and answers
# in the forum, a question for pat with its decision, then a stop and the
# node's response.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install.sh /usr/local >/dev/null
ocx=/usr/local/bin/ocx
fossil=$(command -v /usr/local/bin/fossil || command -v fossil)
demo="${OCX_DEMO_DIR:-/tmp/ocx-demo}"
port="${OCX_DEMO_PORT:-8089}"
rm -rf "$demo"; mkdir -p "$demo"; chmod 755 "$demo"
repo="$demo/demo.fossil"
export USER="${USER:-maintainer}"
say() { printf '\n$ %s\n' "$*" | sed "s#$ocx#ocx#g"; "$@"; }
"$fossil" new --admin-user maintainer "$repo" >/dev/null
"$fossil" user default maintainer -R "$repo"
"$fossil" user new pat pat@example.org pat-password -R "$repo" >/dev/null
"$fossil" user capabilities pat v24 -R "$repo" >/dev/null
# OCX's own agent for a local model: a record naming --runner local runs it
# against the Ollama on this host (not started here; the demo needs none).
printf '# A local model\n\nQwen3 4B on this host'"'"'s Ollama.\n\n```json\n{"command": ["%s", "--mcp-ollama", "http://127.0.0.1:11434", "--model", "qwen3:4b", "--steps", "30", "--system", "You work on this repository through your tools. Read before you edit, run the tests, save, then say in a few lines what you did."], "input": "lines"}\n```\n' "$ocx" > "$demo/sandbox-local.md"
"$fossil" wiki create sandbox/local "$demo/sandbox-local.md" --mimetype text/x-markdown -R "$repo" >/dev/null
# OCX's page beside the repository: runs that hold their password ask it
# who sent what (as root, Fossil serves an extroot only with --nojail).
mkdir -p "$demo/ext"; ln -s /usr/local/bin/ocx-cgi "$demo/ext/ocx-cgi"
"$fossil" server --port "$port" --localhost --nojail --extroot "$demo/ext" "$repo" >"$demo/server.log" 2>&1 &
server=$!
cleanup() { "$ocx" node stop -R "$repo" >/dev/null 2>&1 || true; kill "$server" 2>/dev/null || true; }
trap cleanup EXIT
sleep 0.5
say "$ocx" hook install --url "http://127.0.0.1:$port/" -R "$repo"
say "$ocx" node start -R "$repo"
say "$ocx" runner --name demo --patterns -R "$repo"
say "$ocx" patterns -R "$repo"
record=$("$ocx" create -R "$repo" --pattern helper --wall 10m --json \
  | sed -n 's/^    "record": "\([0-9a-f]*\)",$/\1/p')
printf '\n$ ocx create --pattern helper --wall 10m\nrecord: %s\n' "$record"
sleep 2
say "$ocx" post -R "$repo" --to "${record:0:12}" --text "Hello, agent."
for _ in $(seq 1 50); do
  "$ocx" thread -R "$repo" --of "${record:0:12}" | grep -q "I heard you say" && break
  sleep 0.2
done
say "$ocx" thread -R "$repo" --of "${record:0:12}"
question=$("$ocx" post -R "$repo" --title "Release 1.0" --text "Tag release 1.0 today?" --for pat \
  --options '["Tag it today", "Wait for the docs"]' --stakes "what users download this week" \
  --references "${record:0:12}" --json | sed -n 's/^    "hash": "\([0-9a-f]*\)",$/\1/p')
printf '\n$ ocx post --title "Release 1.0" --text "Tag release 1.0 today?" --for pat --options '"'"'["Tag it today", "Wait for the docs"]'"'"' --stakes "what users download this week" --references %s\nquestion: %s\n' "${record:0:12}" "$question"
say "$ocx" console -R "$repo" --user pat
say "$ocx" decide -R "$repo" "${question:0:10}" --option 1 --note "the docs can follow" --user pat
say "$ocx" thread -R "$repo" --of "${question:0:10}"
say "$ocx" stop -R "$repo" --record "${record:0:12}"
for _ in $(seq 1 50); do
  "$ocx" thread -R "$repo" --of "${record:0:12}" | grep -q '"kind": "response"' && break
  sleep 0.2
done
say "$ocx" thread -R "$repo" --of "${record:0:12}"
printf '\nThe demo repository is %s (served at http://127.0.0.1:%s/ while this ran).\n' "$repo" "$port"
printf 'Its runner page sandbox/local runs OCX'"'"'s agent on a local model (ocx --mcp-ollama), once an Ollama serves qwen3:4b on 127.0.0.1:11434.\n'
