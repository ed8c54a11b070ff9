#!/usr/bin/env bash
# Runs the sample app (Examples/SampleApp, written as RevenueCat's documentation writes one)
# against a live server with the test store; fails unless every step goes as documented.
#
#   scripts/sample-app.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(swift build --show-bin-path)
swift build --product countersign >/dev/null
swift build --product countersign-sample >/dev/null
work=$(mktemp -d)
cleanup() { kill "${server_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$bin/countersign" serve --data-dir "$work/data" --port 0 --log-level error >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
port=""
for _ in $(seq 1 600); do
    port=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/server.out" 2>/dev/null | head -1 | sed 's/.*://') || true
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "error: the server did not start; see $work/server.err" >&2; exit 1; }

export COUNTERSIGN_SERVER_URL="http://127.0.0.1:$port"
export COUNTERSIGN_API_KEY=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['apps'][0]['publicApiKeys'][0])" "$work/data/countersign.json")
export COUNTERSIGN_ROOT_KEY=$(cat "$work/data/keys/root.pub")
export HOME="$work/home"   # the SDK's caches go under the home directory
"$bin/countersign-sample"
