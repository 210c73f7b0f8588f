#!/usr/bin/env bash
# Starts (up) or stops (down) an N-node swarmkv cluster on loopback, the one
# docs/performance.md measures against. Ports: node i uses 127.0.0.1:<i>7100
# (gRPC), <i>7101 (Raft), <i>7102 (HTTP), <i>7103 (gossip), <i>7104 (Redis
# protocol front). With PORT_BASE=B node i uses B+10*(i-1)+0..4 for the
# same five instead (B+0 gRPC, B+1 Raft, B+2 HTTP, B+3 gossip, B+4 Redis).
#   scripts/loopback-cluster.sh up [nodes] [shards] [data-dir]
#   scripts/loopback-cluster.sh add <i> [data-dir]   start node i, which waits
#       to be admitted: then run `swarmnode join n<i> --admin 127.0.0.1:17102`
#   scripts/loopback-cluster.sh down [data-dir]
# PORT_BASE=19800 moves every port to PORT_BASE + 10*i + j (j = 0 gRPC,
# 1 Raft, 2 HTTP, 3 gossip, 4 Redis): node 1's gRPC is then 19810.
set -euo pipefail
port() { # port <node> <j>
  if [ -n "${PORT_BASE:-}" ]; then echo $((PORT_BASE + 10 * $1 + $2)); else echo "$1710$2"; fi
}
cmd=${1:-up}
bin=${SWARMNODE:-./bin/swarmnode}
# port I K: node I's port K (0 gRPC, 1 Raft, 2 HTTP, 3 gossip, 4 Redis).
port() {
  if [ -n "${PORT_BASE:-}" ]; then echo $((PORT_BASE + 10 * ($1 - 1) + $2)); else echo "${1}710$2"; fi
}
case $cmd in
up)
  n=${2:-3}; shards=${3:-8}; dir=${4:-/tmp/swarmkv-loopback}
  mkdir -p "$dir"
  join=$(for i in $(seq 1 "$n"); do printf '127.0.0.1:%d,' "$(port "$i" 3)"; done); join=${join%,}
  for i in $(seq 1 "$n"); do
    "$bin" serve --id "n$i" --data-dir "$dir/n$i" \
      --grpc-addr "127.0.0.1:$(port "$i" 0)" --raft-addr "127.0.0.1:$(port "$i" 1)" \
      --http-addr "127.0.0.1:$(port "$i" 2)" --gossip-addr "127.0.0.1:$(port "$i" 3)" \
      --redis-addr "127.0.0.1:$(port "$i" 4)" \
      --join "$join" --bootstrap-expect "$n" --shards "$shards" ${SWARM_EXTRA_FLAGS:-} >"$dir/n$i.log" 2>&1 &
    echo $! >>"$dir/pids"
  done
  for _ in $(seq 1 120); do
    ok=1
    for i in $(seq 1 "$n"); do curl -sf "127.0.0.1:$(port "$i" 2)/readyz" >/dev/null || ok=0; done
    [ $ok = 1 ] && { echo "cluster of $n nodes ready (data in $dir)"; exit 0; }
    sleep 0.25
  done
  echo "cluster not ready after 30s; see $dir/n*.log" >&2; exit 1 ;;
add)
  i=${2:?node number}; dir=${3:-/tmp/swarmkv-loopback}
  "$bin" serve --id "n$i" --data-dir "$dir/n$i" \
    --grpc-addr "127.0.0.1:$(port "$i" 0)" --raft-addr "127.0.0.1:$(port "$i" 1)" \
    --http-addr "127.0.0.1:$(port "$i" 2)" --gossip-addr "127.0.0.1:$(port "$i" 3)" \
    --join "127.0.0.1:$(port 1 3),127.0.0.1:$(port 2 3),127.0.0.1:$(port 3 3)" ${SWARM_EXTRA_FLAGS:-} >>"$dir/n$i.log" 2>&1 &
  echo $! >>"$dir/pids"
  for _ in $(seq 1 40); do curl -sf "127.0.0.1:$(port "$i" 2)/healthz" >/dev/null && { echo "n$i started; admit it with: swarmnode join n$i --admin 127.0.0.1:$(port 1 2)"; exit 0; }; sleep 0.25; done
  echo "n$i did not start; see $dir/n$i.log" >&2; exit 1 ;;
down)
  dir=${2:-/tmp/swarmkv-loopback}
  [ -f "$dir/pids" ] && kill $(cat "$dir/pids") 2>/dev/null || true
  for _ in $(seq 1 40); do
    alive=0; for p in $(cat "$dir/pids" 2>/dev/null); do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.25
  done
  rm -rf "$dir" ;;
*) echo "usage: $0 up [nodes] [shards] [data-dir] | add <i> [data-dir] | down [data-dir]" >&2; exit 2 ;;
esac
