#!/usr/bin/env bash
# How long the leaders of a killed node's groups take to move (issue 38,
# item 2: a failed node's quiet groups must fail over within a bounded,
# measured time). Starts a fresh 3-node loopback cluster
# (scripts/loopback-cluster.sh) with SHARDS shards, lets it settle idle,
# kills node 1 with SIGKILL, and polls the other two nodes' /metrics
# (swarmkv_raft_state) until every group, the meta group included, has a
# leader on node 2 or 3. Prints one line: the groups node 1 led, and the
# seconds from the kill until the last of them had a new leader.
#
#   scripts/failover-time.sh
#
# Environment:
#   SHARDS=64                  shards of the cluster
#   SETTLE=15                  idle seconds between readiness and the kill
#   LIMIT=120                  give up after this many seconds
#   PORT_BASE=24300            node i uses PORT_BASE+10*(i-1)+0..4
#   SWARMNODE=./bin/swarmnode  the binary (make build)
#   SWARM_EXTRA_FLAGS=         more `swarmnode serve` flags, e.g.
#                              "--heartbeat-timeout 10s --election-timeout 10s"
#   WORK=/tmp/swarmkv-failover-time  data dir and node logs
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PORT_BASE=${PORT_BASE:-24300}
export SWARMNODE=${SWARMNODE:-./bin/swarmnode}
shards=${SHARDS:-64}
settle=${SETTLE:-15}
limit=${LIMIT:-120}
d=${WORK:-/tmp/swarmkv-failover-time}
# shellcheck source=bench-lib.sh
. "$here/bench-lib.sh"
[ -x "$SWARMNODE" ] || { echo "failover-time: $SWARMNODE is not built (make build)" >&2; exit 2; }
if curl -sf -m 1 "127.0.0.1:$(node_port 1 2)/healthz" >/dev/null 2>&1; then
  echo "failover-time: a node already answers on 127.0.0.1:$(node_port 1 2); stop it or set PORT_BASE" >&2; exit 1
fi
trap '"$here/loopback-cluster.sh" down "$d" >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM
leaders() { # leaders NODE...: the groups (shard label) those nodes lead, one a line
  local i
  for i in "$@"; do curl -sf -m 2 "127.0.0.1:$(node_port "$i" 2)/metrics" || true; done |
    awk '/^swarmkv_raft_state\{/ && $2 == 2 { print $1 }' | sort -u
}
rm -rf "$d"
"$here/loopback-cluster.sh" up 3 "$shards" "$d" >/dev/null 2>&1 || true
t0=$(date +%s)
until [ "$(leaders 1 2 3 | wc -l)" -ge $((shards + 1)) ]; do
  [ $(($(date +%s) - t0)) -lt "$limit" ] || { echo "failover-time: no leader for every group after ${limit}s; see $d/n*.log" >&2; exit 1; }
  sleep 1
done
echo "failover-time: $shards shards ready; idle ${settle}s, then SIGKILL node 1" >&2
sleep "$settle"
led=$(leaders 1 | wc -l)
kill -9 "$(head -1 "$d/pids")"
k=$(date +%s.%N)
until [ "$(leaders 2 3 | wc -l)" -ge $((shards + 1)) ]; do
  if awk -v k="$k" -v now="$(date +%s.%N)" -v l="$limit" 'BEGIN { exit !(now - k > l) }'; then
    echo "failover-time: $(leaders 2 3 | wc -l) of $((shards + 1)) groups have a leader ${limit}s after the kill" >&2; exit 1
  fi
  sleep 0.2
done
awk -v k="$k" -v now="$(date +%s.%N)" -v led="$led" -v s="$shards" -v f="${SWARM_EXTRA_FLAGS:-}" \
  'BEGIN { printf "%d shards%s: node 1 led %d groups; all had a new leader %.1f s after its SIGKILL\n", s, (f != "" ? " (" f ")" : ""), led, now - k }'
