#!/usr/bin/env bash
# A large shard under load: how long it takes to move it (a split) and to
# give a new node its replica (a snapshot install), and how much memory
# every node uses meanwhile (issue 38 item 4; docs/scale.md).
#
# Starts a 3-node loopback cluster of one shard with the policy's size and
# load rules off (scripts/loopback-cluster.sh, PORT_BASE), fills the shard
# with SIZE_MIB MiB of kv values of VALUE bytes (`bench put`, random keys
# of a space 100 times the puts, so few overwrites), then under a light
# load (`bench mixed --clients 20`, LOAD seconds per phase):
#   split     `swarmnode shards split 0 --wait`: half of the data moves to
#             a new shard (pre-copy, freeze, sync pass, publish)
#   replace   node 4 joins, `swarmnode remove n3 --wait`: n3's replicas
#             move to n4, which installs each shard from a snapshot
# Every node's RSS is read from /proc every second; the table gives each
# phase's time and peak RSS per node, the move's unavailable window, and
# the bench's errors (there should be none).
#   SWARMNODE=bin/swarmnode [SIZE_MIB=4096] [VALUE=65536] [LOAD=60] \
#     [PORT_BASE=25600] scripts/large-shard.sh [data-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SWARMNODE:-./bin/swarmnode}
dir=${1:-/tmp/swarmkv-large-shard}
size=${SIZE_MIB:-4096}
value=${VALUE:-65536}
load=${LOAD:-60}
export PORT_BASE=${PORT_BASE:-25600} SWARMNODE=$bin
port() { echo $((PORT_BASE + 10 * ($1 - 1) + $2)); }
case $size$value$load in *[!0-9]*) echo "SIZE_MIB, VALUE and LOAD are whole numbers" >&2; exit 2 ;; esac
ep=127.0.0.1:$(port 1 0),127.0.0.1:$(port 2 0),127.0.0.1:$(port 3 0)
admin=127.0.0.1:$(port 1 2)
puts=$((size * 1048576 / value))
[ "$puts" -ge 1 ] || { echo "SIZE_MIB must hold at least one VALUE" >&2; exit 2; }

scripts/loopback-cluster.sh down "$dir" >/dev/null 2>&1 || true
SWARM_EXTRA_FLAGS="--max-shard-size 0 --max-shard-load 0" scripts/loopback-cluster.sh up 3 1 "$dir" >/dev/null
sampler=
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null || true
  [ -n "${LOGS:-}" ] && mkdir -p "$LOGS" && cp "$dir"/n*.log "$LOGS"/ 2>/dev/null || true
  scripts/loopback-cluster.sh down "$dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The sampler: one line a second, "phase node rss_kib", for every node of
# the pids file (node i is line i).
echo fill >"$dir/phase"
(
  while :; do
    ph=$(cat "$dir/phase")
    i=0
    while read -r pid; do
      i=$((i + 1))
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
      [ -n "$rss" ] && echo "$ph n$i $rss"
    done <"$dir/pids"
    sleep 1
  done >"$dir/rss.txt"
) &
sampler=$!

phase() { # phase NAME: start timing NAME
  echo "$1" >"$dir/phase"
  start=$(date +%s.%N)
}
took() { echo "$(date +%s.%N) - $start" | bc; }
declare -A secs

phase fill
echo "fill: $puts puts of $value bytes ($size MiB) into shard 0" >&2
"$bin" bench put --clients 32 --total "$puts" --key-space $((puts * 100)) --value-size "$value" \
  --endpoints "$ep" --op-timeout 60s --progress=false >"$dir/fill.txt" 2>&1
secs[fill]=$(took)
"$bin" shards --admin "$admin" >"$dir/shards-filled.txt"

loadbg() { # loadbg NAME: the light load of a phase, in the background
  "$bin" bench mixed --read-ratio 0.5 --clients 20 --duration "${load}s" --endpoints "$ep" \
    --progress=false >"$dir/bench-$1.txt" 2>&1 &
  bench=$!
}

phase split
echo "split: shard 0's upper half, under load" >&2
loadbg split
"$bin" shards split 0 --wait --timeout 60m --admin "$admin" >"$dir/split.txt"
secs[split]=$(took)
wait "$bench"

phase replace
echo "replace: n4 joins, n3 is removed (its replicas move to n4), under load" >&2
loadbg replace
scripts/loopback-cluster.sh add 4 "$dir" >/dev/null
"$bin" join n4 --wait=false --admin "$admin" >/dev/null
"$bin" remove n3 --wait --timeout 60m --admin "$admin" >"$dir/remove.txt"
secs[replace]=$(took)
wait "$bench"
echo done >"$dir/phase"
sleep 1.5

"$bin" shards --admin "$admin" >"$dir/shards-after.txt"
echo "| phase | seconds | peak RSS MiB n1 | n2 | n3 | n4 |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for ph in fill split replace; do
  row="| $ph | $(printf '%.1f' "${secs[$ph]}")"
  for n in n1 n2 n3 n4; do
    peak=$(awk -v ph="$ph" -v n="$n" '$1 == ph && $2 == n && $3 > m {m = $3} END {if (m) printf "%d", m / 1024; else printf "-"}' "$dir/rss.txt")
    row="$row | $peak"
  done
  echo "$row |"
done
echo
echo "shard 0 after the fill:"; sed 's/^/  /' "$dir/shards-filled.txt" | head -8
echo "after the split and the replacement:"; sed 's/^/  /' "$dir/shards-after.txt" | head -8
grep -h "move: pre-copied" "$dir"/n*.log | sed -E 's/.* written=([0-9]+) took=([^ ]+).*/split: the pre-copy wrote \1 pairs in \2/' || true
grep -h "move: pass resumes" "$dir"/n*.log | sed -E 's/.*msg="move: pass resumes".*compared_before=([0-9]+).*/split: a pass resumed after \1 pairs/' || true
grep -h "move: slots available again" "$dir"/n*.log | sed -E 's/.* unavailable=([^ ]+).*/split: unavailable \1/' || true
grep -h -i "snapshot" "$dir/n4.log" | grep -v DEBUG | sed 's/^/replace, n4: /' | head -12 || true
for f in "$dir"/bench-*.txt; do echo "$(basename "$f" .txt): $(grep -h ' ops ' "$f" | head -1 | sed 's/^ *//')"; done
