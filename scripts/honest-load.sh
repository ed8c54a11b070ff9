#!/usr/bin/env bash
# 100,000 honest CustomerInfo fetches through `countersign proxy --attack none`, verified by the
# SDK (enforced mode): any result other than `verified` is a false failure and fails the script.
#
#   scripts/honest-load.sh [COUNT] [MAX_SECONDS]      (defaults: 100000, 900)
#
# Uses the countersign binary from `swift build` (debug) unless COUNTERSIGN is set.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-100000}
max_seconds=${2:-900}
binary=${COUNTERSIGN:-$(swift build --show-bin-path)/countersign}
work=$(mktemp -d)
cleanup() { kill "${proxy_pid:-}" "${server_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# Starts a command in the background and waits for its "... http://HOST:PORT ..." line.
wait_for_port() {
    local file=$1
    for _ in $(seq 1 600); do
        if grep -qo 'http://127.0.0.1:[0-9]*' "$file"; then grep -o 'http://127.0.0.1:[0-9]*' "$file" | head -1 | sed 's/.*://'; return; fi
        sleep 0.1
    done
    echo "error: nothing listening; see $file" >&2
    exit 1
}

"$binary" serve --data-dir "$work/data" --port 0 --log-level error --rate-limits off >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
server_port=$(wait_for_port "$work/server.out")
"$binary" proxy --listen 127.0.0.1:0 --upstream "http://127.0.0.1:$server_port" --attack none >"$work/proxy.out" 2>&1 &
proxy_pid=$!
proxy_port=$(wait_for_port "$work/proxy.out")

api_key=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['apps'][0]['publicApiKeys'][0])" "$work/data/countersign.json")
root_key=$(cat "$work/data/keys/root.pub")

echo "== $count honest fetches through the proxy (limit ${max_seconds}s)"
timeout "$max_seconds" "$binary" client load --server "http://127.0.0.1:$proxy_port" --api-key "$api_key" \
    --app-user-id load-user --root-key "$root_key" --mode enforced --storage "$work/sdk" --count "$count" --concurrency 8
