#!/usr/bin/env bash
# Runs the watch and keep-alive attacks of issue 37 (scripts/watchattack)
# against a fresh one-node, one-shard cluster of each binary given, one
# node per phase, on loopback, and prints the node's peak RSS and CPU for
# each (docs/security.md, "What a read-only client can do"). Bounded: each
# phase ends within 3 minutes, and the node is killed if its RSS passes
# RSS_CAP_MIB (4096).
#
#   scripts/watch-attack.sh /tmp/base/swarmnode ./swarmnode
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 SWARMNODE_BINARY..." >&2; exit 2; }
go build -o /tmp/watchattack ./scripts/watchattack
port=${PORT_BASE:-17100}
for bin in "$@"; do
  for phase in ${PHASES:-list catchup streams}; do
    dir=$(mktemp -d /tmp/watch-attack.XXXXXX)
    "$bin" serve --id n1 --data-dir "$dir/n1" --shards 1 --bootstrap-expect 1 \
      --grpc-addr "127.0.0.1:$port" --raft-addr "127.0.0.1:$((port + 1))" \
      --http-addr "127.0.0.1:$((port + 2))" --gossip-addr "127.0.0.1:$((port + 3))" \
      ${SWARM_EXTRA_FLAGS:-} >"$dir/n1.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do
      kill -0 "$pid" 2>/dev/null || { echo "node did not start:" >&2; tail -3 "$dir/n1.log" >&2; exit 1; }
      curl -sf "127.0.0.1:$((port + 2))/readyz" >/dev/null && break
      sleep 0.25
    done
    echo "== $bin"
    /tmp/watchattack -addr "127.0.0.1:$port" -pid "$pid" -phase "$phase" -rss-cap-mib "${RSS_CAP_MIB:-4096}" || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
  done
done
