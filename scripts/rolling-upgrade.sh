#!/usr/bin/env bash
# Rolling upgrade with real binaries (docs/operations.md, "Upgrades").
#
# Builds the old binary from git revision OLD_REV in a temporary git
# worktree (never committed), starts 3 loopback nodes on it, runs
# `swarmnode bench mixed` (the old binary's) against them, replaces the
# nodes one at a time with this tree's binary (`make build`) on the same
# data dirs, waiting for /readyz and every group settled each time, and
# reports the bench's operations and errors and the cluster's final
# protocol version.
#
#   scripts/rolling-upgrade.sh
#   OLD_REV=<rev> PORT_BASE=19400 DURATION=90 WORKLOAD=mixed scripts/rolling-upgrade.sh
#
# Node i (1..3) listens on 127.0.0.1:PORT_BASE+10*i+{0 gRPC, 1 Raft,
# 2 HTTP, 3 gossip}. Everything it writes is under a temporary directory
# (KEEP=1 keeps it, with the nodes' logs). Exits 1 if a step fails, the
# bench saw an error other than an unknown outcome, or the cluster did
# not reach the new protocol version.
set -euo pipefail

old_rev=${OLD_REV:-f6c5d17}
base=${PORT_BASE:-19400}
duration=${DURATION:-90}
workload=${WORKLOAD:-mixed}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/swarmkv-upgrade.XXXXXX)
pids=()
bench_pid=

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

cleanup() {
  [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  git -C "$root" worktree remove --force "$work/old-src" 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

port() { echo $((base + 10 * $1 + $2)); }
join=$(for i in 1 2 3; do printf '127.0.0.1:%d,' "$(port "$i" 3)"; done); join=${join%,}
endpoints=$(for i in 1 2 3; do printf '127.0.0.1:%d,' "$(port "$i" 0)"; done); endpoints=${endpoints%,}

log "building the old binary from $old_rev"
git -C "$root" worktree add --detach "$work/old-src" "$old_rev" >/dev/null 2>&1
make -C "$work/old-src" build >/dev/null
cp "$work/old-src/bin/swarmnode" "$work/swarmnode-old"
git -C "$root" worktree remove --force "$work/old-src"
log "building the new binary from $(git -C "$root" rev-parse --short HEAD)"
make -C "$root" build >/dev/null
cp "$root/bin/swarmnode" "$work/swarmnode-new"
old="$work/swarmnode-old" new="$work/swarmnode-new"

# start i BIN: starts node i on its data dir with BIN.
start() {
  "$2" serve --id "n$1" --data-dir "$work/n$1" \
    --grpc-addr "127.0.0.1:$(port "$1" 0)" --raft-addr "127.0.0.1:$(port "$1" 1)" \
    --http-addr "127.0.0.1:$(port "$1" 2)" --gossip-addr "127.0.0.1:$(port "$1" 3)" \
    --join "$join" --bootstrap-expect 3 --gossip-profile local >>"$work/n$1.log" 2>&1 &
  pids[$1]=$!
}

# stop i: SIGTERM node i and wait until it exited.
stop() {
  kill "${pids[$1]}"
  wait "${pids[$1]}" || true
  pids[$1]=
}

# wait_ready i: /readyz of node i answers ready (60 s).
wait_ready() {
  for _ in $(seq 1 240); do
    curl -sf "127.0.0.1:$(port "$1" 2)/readyz" >/dev/null && return 0
    sleep 0.25
  done
  echo "n$1 not ready after 60s; see $work/n$1.log" >&2
  return 1
}

status() { "$new" status --admin "127.0.0.1:$(port "$1" 2)" "${@:2}"; }

# wait_settled: every group settled (a leader, every replica a reachable
# voter), as node 1's status says (60 s).
wait_settled() {
  local line
  for _ in $(seq 1 240); do
    line=$(status 1 2>/dev/null) || true
    line=${line%%$'\n'*}
    if [[ $line =~ \(([0-9]+)\ of\ ([0-9]+)\ groups\ settled\) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then
      return 0
    fi
    sleep 0.25
  done
  echo "groups not settled after 60s: $line" >&2
  return 1
}

version() { status 1 --json 2>/dev/null | jq -r '.protocol_version // 1'; }

log "starting 3 nodes of the old binary (ports $(port 1 0)-$(port 3 3), data in $work)"
for i in 1 2 3; do start "$i" "$old"; done
for i in 1 2 3; do wait_ready "$i"; done
wait_settled
first_line=$(status 1); log "cluster ready: ${first_line%%$'\n'*}"

log "bench $workload for ${duration}s (the old binary's client)"
"$old" bench "$workload" --endpoints "$endpoints" --duration "${duration}s" --clients 32 --conns 4 \
  --read-ratio 0.5 --op-timeout 30s --progress=false --json >"$work/bench.json" 2>"$work/bench.err" &
bench_pid=$!
bench_start=$(date +%s)
sleep 5 # load before the first restart

for i in 1 2 3; do
  t0=$(date +%s.%N)
  log "n$i: stop, start with the new binary"
  stop "$i"
  start "$i" "$new"
  wait_ready "$i"
  wait_settled
  log "n$i: ready and every group settled in $(since "$t0")s; cluster runs protocol version $(version)"
  [ "$i" = 3 ] || sleep 3 # load between restarts
done
t_last=$(date +%s.%N)

v=
for _ in $(seq 1 120); do
  v=$(version) || true
  [ "$v" = 2 ] && break
  sleep 0.25
done
log "protocol version $v, $(since "$t_last")s after the last node settled"
# The grace after the raise: every node refuses plain Raft headers.
for _ in $(seq 1 120); do
  n=0
  for i in 1 2 3; do grep -q "raft connections without a group incarnation are refused" "$work/n$i.log" && n=$((n + 1)); done
  [ "$n" = 3 ] && break
  sleep 0.25
done
log "nodes requiring group incarnations on Raft connections: $n of 3"

if [ $(($(date +%s) - bench_start)) -ge "$duration" ]; then
  echo "warning: the bench ended before the upgrade did (raise DURATION)" >&2
fi
wait "$bench_pid" || true
bench_pid=
ops=$(jq -r .ops "$work/bench.json")
errs=$(jq -r .errors "$work/bench.json")
first=$(jq -r '.first_error // ""' "$work/bench.json")
echo
echo "bench $workload: $ops ops in $(jq -r .seconds "$work/bench.json")s, $errs errors, $(jq -r .ops_per_sec "$work/bench.json" | cut -d. -f1) ops/s, p99 $(jq -r .p99_ms "$work/bench.json") ms${first:+ (first error: $first)}"
final=$(status 1)
printf '\n%s\n\n' "$final"
# (no `status | grep -q`: with pipefail, grep's early exit fails the pipe)
want=$(sed -n 's/^[[:space:]]*ProtocolVersion *= *\([0-9][0-9]*\)$/\1/p' "$root/cluster/config.go")
[[ $final == *"protocol version $want"* ]] || { echo "FAIL: the cluster did not reach protocol version $want" >&2; exit 1; }
[ "$n" = 3 ] || { echo "FAIL: $n of 3 nodes require group incarnations" >&2; exit 1; }
if [ "$errs" != 0 ] && ! [[ $first == *"outcome unknown"* ]]; then
  echo "FAIL: the bench saw errors other than unknown outcomes" >&2
  exit 1
fi
echo "rolling upgrade from $old_rev: ok"
