#!/usr/bin/env bash
# Measures how long a split and a merge keep the moved slots unavailable
# (docs/performance-log.md, rounds 12, 16 and 17). Starts a 3-node loopback
# cluster of one shard (scripts/loopback-cluster.sh, default ports), writes
# FILL puts first (random keys of a 1,000,000-key space, 256-byte values),
# then runs `swarmnode shards split 0 --wait` and `swarmnode shards merge 0 1
# --wait` and prints each move's window from the nodes' log ("move: slots
# available again"), the pairs the pre-copy wrote before the freeze
# (protocol version 3) and those written after it. With LOAD=SECONDS it runs `bench mixed --read-ratio 0.5
# --clients 50` and `bench ledger --clients 20` for that long instead of the
# fill, the split a third of the way in and the merge at two thirds, and
# prints the benches' errors (there should be none). With PROFILE=DIR it
# takes a 1-second CPU profile of every node as soon as the split's freeze
# is committed, i.e. inside the window (go tool pprof -top SWARMNODE DIR/n*.prof).
#   SWARMNODE=/tmp/bin/swarmnode [FILL=150000] [LOAD=40] [PROFILE=DIR] \
#     scripts/move-window.sh [data-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SWARMNODE:-./bin/swarmnode}
dir=${1:-/tmp/swarmkv-move-window}
fill=${FILL:-150000}
ep=127.0.0.1:17100,127.0.0.1:27100,127.0.0.1:37100
admin=127.0.0.1:17102
export SWARMNODE=$bin
scripts/loopback-cluster.sh down "$dir" >/dev/null 2>&1 || true
scripts/loopback-cluster.sh up 3 0 "$dir" >/dev/null
trap '[ -n "${LOGS:-}" ] && mkdir -p "$LOGS" && cp "$dir"/n*.log "$LOGS"/; scripts/loopback-cluster.sh down "$dir" >/dev/null 2>&1 || true' EXIT
pids=()
if [ -n "${LOAD:-}" ]; then
  echo "load: bench mixed (50 clients) and bench ledger (20 clients) for ${LOAD}s" >&2
  "$bin" bench mixed --read-ratio 0.5 --clients 50 --duration "${LOAD}s" --endpoints "$ep" --progress=false >"$dir/bench-mixed.txt" 2>&1 &
  pids+=($!)
  "$bin" bench ledger --clients 20 --duration "${LOAD}s" --endpoints "$ep" --progress=false >"$dir/bench-ledger.txt" 2>&1 &
  pids+=($!)
  sleep $((LOAD / 3))
else
  echo "fill: $fill puts" >&2
  "$bin" bench put --clients 100 --total "$fill" --key-space 1000000 --value-size 256 --endpoints "$ep" --progress=false >"$dir/fill.txt" 2>&1
fi
if [ -n "${PROFILE:-}" ]; then
  mkdir -p "$PROFILE"
  (
    for _ in $(seq 1 3000); do grep -q "move: frozen" "$dir"/n*.log && break; sleep 0.01; done
    for i in 1 2 3; do curl -sf -m 10 -o "$PROFILE/n$i.prof" "127.0.0.1:${i}7102/debug/pprof/profile?seconds=1" & done
    wait
  ) &
  pids+=($!)
fi
echo "split 0" >&2
"$bin" shards split 0 --wait --admin "$admin" >"$dir/split.txt"
[ -n "${LOAD:-}" ] && sleep $((LOAD / 3))
echo "merge 0 1" >&2
"$bin" shards merge 0 1 --wait --admin "$admin" >"$dir/merge.txt"
for p in "${pids[@]}"; do wait "$p"; done
grep -h "move: pre-copied" "$dir"/n*.log | sed -E 's/.* move=([0-9]+) .* written=([0-9]+) took=([^ ]+).*/move \1: pre-copy wrote \2 pairs in \3, before the freeze/' || true
grep -h "move: adopted" "$dir"/n*.log | sed -E 's/.* move=([0-9]+) .* pairs=([0-9]+).*/move \1: \2 pairs written after the freeze/'
grep -h "move: slots available again" "$dir"/n*.log | sed -E 's/.* move=([0-9]+) unavailable=([^ ]+).*/move \1: unavailable \2/'
if [ -n "${LOAD:-}" ]; then
  for f in "$dir"/bench-*.txt; do echo "$(basename "$f" .txt): $(grep -h ' ops ' "$f" | head -1 | sed 's/^ *//')"; done
fi
