#!/usr/bin/env bash
# A Countersign cluster on one machine: PostgreSQL, two `countersign serve` instances sharing
# that database and one set of offline signing keys, and nginx in front of both.
#
#   scripts/cluster.sh start     # PostgreSQL, keys, instances 1 and 2, nginx; prints the address
#   scripts/cluster.sh restart N # graceful restart of instance N (SIGTERM, wait, start again)
#   scripts/cluster.sh status
#   scripts/cluster.sh stop      # instances and nginx (PostgreSQL keeps running)
#
# Environment: CLUSTER_DIR (state, logs, keys; default /tmp/countersign-cluster), CLUSTER_PORT
# (nginx; the instances take the next two ports; default 8090), COUNTERSIGN_BIN (default: the
# debug build, built if missing), CLUSTER_DATABASE (default: database countersign_cluster on the
# local PostgreSQL, created on start).
#
# What the instances share: the database (every purchase, customer and notification), the
# intermediates directory (offline key mode: any instance signs with the newest valid
# intermediate, so a new one dropped there is picked up by all), and the data directory's
# countersign.json and test-store CA. Nothing else is kept between requests (rate limits are per
# instance), so nginx may send any request to either instance and retry one an instance could
# not take on the other.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"

DIR="${CLUSTER_DIR:-/tmp/countersign-cluster}"
PORT="${CLUSTER_PORT:-8090}"
DATABASE="${CLUSTER_DATABASE:-postgres://countersign:countersign@127.0.0.1:5432/countersign_cluster?sslmode=disable}"

binary() {
    if [ -n "${COUNTERSIGN_BIN:-}" ]; then echo "$COUNTERSIGN_BIN"; return; fi
    local path
    path="$(swift build --show-bin-path)/countersign"
    [ -x "$path" ] || swift build --product countersign >&2
    echo "$path"
}

start_postgres() {
    if ! command -v pg_ctlcluster >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    local version
    version=$(ls /usr/lib/postgresql | sort -n | tail -1)
    pg_ctlcluster "$version" main start >/dev/null 2>&1 || true
    for _ in $(seq 1 600); do
        runuser -u postgres -- pg_isready -q && break
        sleep 1
    done
    local psql=(runuser -u postgres -- env PGOPTIONS=--client-min-messages=warning psql -q)
    if [ "$("${psql[@]}" -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'countersign'")" != 1 ]; then
        "${psql[@]}" -c "CREATE ROLE countersign LOGIN PASSWORD 'countersign'" >/dev/null
    fi
    if [ -z "${CLUSTER_DATABASE:-}" ]; then
        "${psql[@]}" -c "DROP DATABASE IF EXISTS countersign_cluster" >/dev/null
        "${psql[@]}" -c "CREATE DATABASE countersign_cluster OWNER countersign" >/dev/null
    fi
}

# Waits until GET /v1/health on PORT answers 200 (60 s at most).
wait_healthy() {
    for _ in $(seq 1 600); do
        curl -fsS -o /dev/null "http://127.0.0.1:$1/v1/health" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "instance on port $1 did not become healthy; see $DIR/instance-*.log" >&2
    return 1
}

start_instance() {
    local n=$1 port=$((PORT + $1))
    COUNTERSIGN_DATABASE_URL="$DATABASE" nohup "$(binary)" serve --port "$port" --data-dir "$DIR/data" \
        --intermediates "$DIR/intermediates" --log-level notice --rate-limits off >>"$DIR/instance-$n.log" 2>&1 &
    echo $! >"$DIR/instance-$n.pid"
    wait_healthy "$port"
}

stop_instance() {
    local file="$DIR/instance-$1.pid"
    [ -f "$file" ] || return 0
    local pid
    pid=$(cat "$file")
    if kill -TERM "$pid" 2>/dev/null; then
        # Graceful: the instance stops accepting, finishes the requests it has, then exits.
        for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

write_nginx_conf() {
    mkdir -p "$DIR/nginx"
    cat >"$DIR/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $DIR/nginx/nginx.pid;
error_log $DIR/nginx/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $DIR/nginx/body;
    proxy_temp_path $DIR/nginx/proxy;
    fastcgi_temp_path $DIR/nginx/fastcgi;
    uwsgi_temp_path $DIR/nginx/uwsgi;
    scgi_temp_path $DIR/nginx/scgi;
    # max_fails=0: nginx never takes an instance out of rotation for a failed attempt, it just
    # retries on the other (below). Marking it down would outlast a restart: restart the other
    # instance while nginx still holds the first one down and nothing is left to answer. On
    # loopback a refused connection costs nothing; across machines, add active health checks.
    upstream countersign {
        server 127.0.0.1:$((PORT + 1)) max_fails=0;
        server 127.0.0.1:$((PORT + 2)) max_fails=0;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$PORT;
        location / {
            proxy_pass http://countersign;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            # A request an instance could not take (connection refused, or a kept-alive
            # connection it closed as it shut down) goes to the other. POSTs too: an instance
            # shutting down finishes what it has read, so what is retried was never handled,
            # and the writes apps depend on (receipts, notifications) are idempotent by
            # transaction id anyway. (Test-store admin changes are not: a crash after handling
            # one and before answering could apply it twice; they exist for tests only.)
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 2;
            proxy_connect_timeout 2s;
        }
    }
}
EOF
}

start() {
    command -v nginx >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; }
    stop
    rm -rf "$DIR"
    mkdir -p "$DIR/data" "$DIR/intermediates"
    start_postgres
    local bin
    bin=$(binary)
    # Offline keys: the root stays here (in production: off the servers); both instances read
    # the intermediates directory.
    "$bin" keys root --out "$DIR/root" | tail -1 >"$DIR/root.pub"
    "$bin" keys intermediate --root "$DIR/root/root.key" --days 30 --out "$DIR/intermediates/current.key" >/dev/null
    # Instance 1 first: on a fresh data directory it writes countersign.json and the test-store CA.
    start_instance 1
    start_instance 2
    write_nginx_conf
    nginx -p "$DIR/nginx" -c "$DIR/nginx/nginx.conf"
    wait_healthy "$PORT"
    echo "cluster on http://127.0.0.1:$PORT (instances on $((PORT + 1)) and $((PORT + 2)))"
    echo "root public key: $(cat "$DIR/root.pub")"
    echo "api keys: $DIR/data/countersign.json"
}

stop() {
    if [ -f "$DIR/nginx/nginx.pid" ]; then
        nginx -p "$DIR/nginx" -c "$DIR/nginx/nginx.conf" -s quit 2>/dev/null || true
        for _ in $(seq 1 50); do [ -f "$DIR/nginx/nginx.pid" ] || break; sleep 0.1; done
    fi
    stop_instance 1
    stop_instance 2
}

status() {
    for n in 1 2; do
        if [ -f "$DIR/instance-$n.pid" ] && kill -0 "$(cat "$DIR/instance-$n.pid")" 2>/dev/null; then
            echo "instance $n: running (pid $(cat "$DIR/instance-$n.pid"), port $((PORT + n)))"
        else
            echo "instance $n: stopped"
        fi
    done
    if [ -f "$DIR/nginx/nginx.pid" ]; then echo "nginx: running on port $PORT"; else echo "nginx: stopped"; fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    restart)
        case "${2:-}" in 1 | 2) ;; *) echo "usage: $0 restart 1|2" >&2; exit 2 ;; esac
        stop_instance "$2"
        start_instance "$2"
        echo "instance $2 restarted"
        ;;
    *) echo "usage: $0 start|stop|status|restart N" >&2; exit 2 ;;
esac
