#!/usr/bin/env bash
# What a node pays for the shards it holds (issue 38, item 1): for each shard
# count, a fresh 3-node loopback cluster (scripts/loopback-cluster.sh) with
# that many shards, then, in this order:
#   idle CPU      the 3 nodes' CPU (utime+stime from /proc) over IDLE_SECONDS
#                 with no load, in cores
#   idle RSS      the largest node's VmRSS at the end of the idle window
#   put/s         put100 of scripts/bench-lib.sh (100 clients, 4 connections)
#   get/s         get100 (linearizable get, 100 clients, 10k keys prefilled)
#   ledger/s      ledger100 (ProcessUsage, 100 clients, 10,000 accounts)
#   CPU/op        the 3 nodes' CPU per operation of each bench, in µs, from
#                 the bench's first progress line (after its prefill and
#                 first second) to its end: unlike scripts/perf-ab.sh, the
#                 prefills of get100 and ledger100 are not counted
#   peak RSS      the largest node's VmHWM after the three benches
# and prints one markdown table on stdout (progress on stderr). The load tool
# runs on the same machine and its CPU is not counted.
#
#   scripts/scale-bench.sh
#
# Environment:
#   SHARDS="1 8 64 256"        shard counts, one fresh cluster each
#   QUICK=1                    short runs: 5 s benches, 5 s settle
#   IDLE_SECONDS=10            the idle window
#   SETTLE=15 (QUICK: 5)       seconds between readiness and the idle window
#                              (elections, leader balancing)
#   DURATION=10s (QUICK: 5s)   length of each bench
#   READY_SECONDS=300          how long a cluster may take to get every
#                              shard a leader (/readyz on all 3 nodes)
#   PORT_BASE=24300            node i uses PORT_BASE+10*(i-1)+0..4
#   SWARMNODE=./bin/swarmnode  the binary (make build)
#   SWARM_EXTRA_FLAGS=         more `swarmnode serve` flags, e.g.
#                              "--heartbeat-timeout 10s --election-timeout 10s"
#   WORK=/tmp/swarmkv-scale-bench   data dirs, node logs, bench output
#   WORKLOADS="put100 get100 ledger100"  the benches, a subset of these three
#                              ("" measures the idle figures only)
#
# Every step is bounded (readiness by READY_SECONDS, each bench by its
# duration plus 300 s for the prefill, under `timeout`), and the nodes and
# a running bench are stopped on exit, error or interrupt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PORT_BASE=${PORT_BASE:-24300}
bin=${SWARMNODE:-./bin/swarmnode}
shards_list=${SHARDS:-1 8 64 256}
idle=${IDLE_SECONDS:-10}
ready_max=${READY_SECONDS:-300}
work=${WORK:-/tmp/swarmkv-scale-bench}
workloads=${WORKLOADS-put100 get100 ledger100}
if [ -n "${QUICK:-}" ]; then settle=${SETTLE:-5} dur=${DURATION:-5s}; else settle=${SETTLE:-15} dur=${DURATION:-10s}; fi
# shellcheck source=bench-lib.sh
. "$here/bench-lib.sh"
[ -x "$bin" ] || { echo "scale-bench: $bin is not built (make build)" >&2; exit 2; }
export SWARMNODE=$bin
for w in $workloads; do
  case $w in put100 | get100 | ledger100) ;; *) echo "scale-bench: WORKLOADS wants put100, get100, ledger100, got '$w'" >&2; exit 2 ;; esac
done
for s in $shards_list; do
  [[ $s =~ ^[0-9]+$ && $s -ge 1 ]] || { echo "scale-bench: SHARDS wants counts >= 1, got '$s'" >&2; exit 2; }
done
if curl -sf -m 1 "127.0.0.1:$(node_port 1 2)/healthz" >/dev/null 2>&1; then
  echo "scale-bench: a node already answers on 127.0.0.1:$(node_port 1 2); stop it or set PORT_BASE" >&2; exit 1
fi
hz=$(getconf CLK_TCK)
dur_s=${dur%s}
mkdir -p "$work"
d=
benchpid=
cleanup() {
  [ -z "$benchpid" ] || kill "$benchpid" 2>/dev/null || true
  [ -z "$d" ] || "$here/loopback-cluster.sh" down "$d" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ready() { # every node answers /readyz (each local shard has a leader)
  local i
  for i in 1 2 3; do curl -sf -m 2 "127.0.0.1:$(node_port "$i" 2)/readyz" >/dev/null || return 1; done
}
largest() { # largest FIELD (VmRSS, VmHWM) of the nodes, in MiB
  local p
  for p in $(cat "$d/pids"); do awk -v f="$1:" '$1 == f { print $2 }' "/proc/$p/status"; done |
    sort -n | tail -1 | awk '{ printf "%.0f", $1 / 1024 }'
}
json_field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<<"$1"; }
# bench W: runs workload W, sets res to "ops/s µs-per-op errors" ("- - -" if it
# failed); in this shell, so that cleanup knows benchpid
bench() {
  local w=$1 c1= d1= c2 out ops tput errs
  # shellcheck disable=SC2046
  timeout $((dur_s + 300)) "$bin" bench $(bench_args "$w") --duration "$dur" --json --progress=true \
    --endpoints "$ep" >"$work/$w-$s.json" 2>"$work/$w-$s.err" &
  benchpid=$!
  while kill -0 "$benchpid" 2>/dev/null; do
    if [ -z "$c1" ] && line=$(grep -m1 ' ops/s ' "$work/$w-$s.err"); then
      c1=$(node_cpu "$d"); d1=$(awk '{ print $2 }' <<<"$line")
    fi
    sleep 0.1
  done
  wait "$benchpid" || true
  benchpid=
  c2=$(node_cpu "$d")
  out=$(tr -d '\n ' <"$work/$w-$s.json")
  tput=$(json_field "$out" ops_per_sec); ops=$(json_field "$out" ops); errs=$(json_field "$out" errors)
  if [ -z "$tput" ] || [ "${ops:-0}" = 0 ] || [ -z "$c1" ] || [ "$ops" -le "$d1" ]; then
    echo "scale-bench: $s shards, $w failed: $(grep -v ' ops/s ' "$work/$w-$s.err" | tail -1)" >&2
    res="- - -"; return
  fi
  res=$(awk -v t="$tput" -v o=$((ops - d1)) -v c=$((c2 - c1)) -v hz="$hz" -v e="$errs" \
    'BEGIN { printf "%.0f %.0f %d\n", t, c / hz * 1e6 / o, e }')
}
fmt() { # thousands separators; "-" stays
  [ "$1" = - ] && { echo -; return; }
  printf "%d" "$1" | sed ':a; s/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/; ta'
}
cell() { # ops/s and errors
  local e=""
  [ "$1" = - ] && { echo -; return; }
  [ "$3" != - ] && [ "$3" != 0 ] && e=" ($3 errors)"
  echo "$(fmt "$1")/s$e"
}

rows=()
start=$(date +%s)
for s in $shards_list; do
  d=$work/lc-$s
  rm -rf "$d"
  echo "scale-bench: $s shards: starting 3 nodes (ports from $PORT_BASE)" >&2
  t0=$(date +%s)
  "$here/loopback-cluster.sh" up 3 "$s" "$d" >/dev/null 2>&1 || true
  until ready; do
    if [ $(($(date +%s) - t0)) -ge "$ready_max" ]; then
      echo "scale-bench: $s shards: not ready after ${ready_max}s; see $d/n*.log" >&2; exit 1
    fi
    sleep 1
  done
  echo "scale-bench: $s shards: ready in $(($(date +%s) - t0))s; settling ${settle}s, then ${idle}s idle" >&2
  sleep "$settle"
  c0=$(node_cpu "$d"); sleep "$idle"; c1=$(node_cpu "$d")
  idle_cores=$(awk -v c=$((c1 - c0)) -v hz="$hz" -v s="$idle" 'BEGIN { printf "%.2f", c / hz / s }')
  idle_rss=$(largest VmRSS)
  echo "scale-bench: $s shards: idle ${idle_cores} cores, largest RSS ${idle_rss} MiB" >&2
  declare -A r=([put100.t]=- [put100.c]=- [put100.e]=- [get100.t]=- [get100.c]=- [get100.e]=- [ledger100.t]=- [ledger100.c]=- [ledger100.e]=-)
  for w in $workloads; do
    echo "scale-bench: $s shards: $w for $dur" >&2
    bench "$w"
    read -r "r[$w.t]" "r[$w.c]" "r[$w.e]" <<<"$res"
    echo "scale-bench: $s shards: $w $(fmt "${r[$w.t]}")/s, ${r[$w.c]} µs CPU/op, ${r[$w.e]} errors" >&2
  done
  peak=$(largest VmHWM)
  rows+=("| $s | $idle_cores | $idle_rss MiB | $peak MiB | $(cell "${r[put100.t]}" "${r[put100.c]}" "${r[put100.e]}") | $(cell "${r[get100.t]}" "${r[get100.c]}" "${r[get100.e]}") | $(cell "${r[ledger100.t]}" "${r[ledger100.c]}" "${r[ledger100.e]}") | ${r[put100.c]} / ${r[get100.c]} / ${r[ledger100.c]} |")
  unset r
  "$here/loopback-cluster.sh" down "$d" >/dev/null 2>&1 || true
  d=
done
echo "scale-bench: done in $(($(date +%s) - start))s; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown commit)" >&2
echo "| shards | idle CPU, 3 nodes (cores) | largest RSS, idle | largest RSS, peak | put, 100 clients | linearizable get, 100 clients | ledger, 100 clients | node CPU per op, put / get / ledger (µs) |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
