#!/usr/bin/env bash
# Compares swarmnode binaries (variants) on the loopback cluster the way
# docs/performance.md measures: per round, each variant in turn gets a fresh
# 3-node, 8-shard cluster (scripts/loopback-cluster.sh) and runs the chosen
# workloads on it; variants are interleaved, in alternating order (A B, B A,
# A B, ...), so that drift of a shared, noisy machine and the advantage of
# running first in a round hit every variant alike. Each run prints one line
# (ops/s, mean and p99 latency, errors, node CPU per op, Raft log WAL
# fsyncs per op where the nodes export swarmkv_raftlog_wal_fsync_seconds,
# the nodes' thread switches and run-queue wait per op, the largest node
# RSS); the end prints the medians per variant and workload.
#
#   scripts/perf-ab.sh NAME=BINARY [NAME=BINARY ...]
#
# Environment:
#   ROUNDS=3                                   rounds (medians need 3)
#   WORKLOADS="put100 put1 put1000 get100 ledger100"
#   NODE_ENV_<NAME>="GOMAXPROCS=1 ..."         environment of that variant's nodes,
#       e.g. SWARM_EXTRA_FLAGS=--wal-min-sync-interval=250us (serve flags)
#   SHARDS_<NAME>=8                            shards of that variant's cluster
#       (the same binary twice with SHARDS_one=1 compares shard counts)
#   WORK=/tmp/swarmkv-perf-ab                  data dirs and raw JSON results
#   DURATION=                                  if set, every workload runs this long
#       (e.g. 3s for a quick check that the script works)
#   PORT_BASE=                                 if set, the cluster's ports (as
#       scripts/loopback-cluster.sh), e.g. 23000: node i uses 23000+10*(i-1)+0..4
#
# Workloads (scripts/bench-lib.sh; 8-byte keys, 256-byte values):
#   put100    put, 100 clients over 4 connections, 10 s
#   put1      put, 1 client, 8 s
#   put1000   put, 1000 clients over 8 connections, 10 s
#   get100    linearizable get, 100 clients, 10k keys prefilled, 10 s
#   ledger100 ProcessUsage, 100 clients over 10,000 accounts, 10 s
#   warm      put, 100 clients over 4 connections, 20 s: run first, it takes
#             the nodes' Pebble WALs past their first memtable rotations
#             (log files recycled rather than grown), as on a node that has
#             been up for a while
#   ka100     lease-keepalive, 10,000 leases renewed in turn by 100 callers
#             over 4 connections on the shared keep-alive streams, 10 s
#   kaonce100 the same, a KeepAliveOnce call per keep-alive
#   watch100  watch: 100 watchers of one routing key while 100 put clients
#             write its keys (32-byte keys, 8-byte values), 10 s: the line
#             adds events/s delivered to all watchers and the delivery p99
#   watch0    the same puts without watchers
# (WORKLOADS="watch0 watch100 ka100" measures the lease and watch figures of
# docs/performance.md; scripts/etcd-reference.sh has the same for etcd.)
#
# Node CPU per op is utime+stime of the 3 node processes around the bench
# (prefills included) over its operations; switches per op the times the
# nodes' threads were switched in to run, and wait per op the time they
# spent runnable but waiting for a core (/proc/<pid>/task/*/schedstat),
# over the same window. The load tool runs on the same
# machine and its CPU is not counted. Needs the loopback ports of
# scripts/loopback-cluster.sh free: it refuses to start if a node is running.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-3}
workloads=${WORKLOADS:-put100 put1 put1000 get100 ledger100}
work=${WORK:-/tmp/swarmkv-perf-ab}
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
names=()
declare -A bin
for v in "$@"; do
  n=${v%%=*}; b=${v#*=}
  [[ $n =~ ^[A-Za-z0-9_]+$ && $n != "$v" && -x $b ]] || { echo "perf-ab: want NAME=BINARY with an executable BINARY, got '$v'" >&2; exit 2; }
  names+=("$n"); bin[$n]=$b
done
# shellcheck source=bench-lib.sh
. "$here/bench-lib.sh"
for w in $workloads; do
  bench_args "$w" >/dev/null || { echo "perf-ab: unknown workload '$w'" >&2; exit 2; }
done
if curl -sf -m 1 "127.0.0.1:$(node_port 1 2)/healthz" >/dev/null 2>&1; then
  echo "perf-ab: a node already answers on 127.0.0.1:$(node_port 1 2); stop that cluster first" >&2; exit 1
fi
mkdir -p "$work"
results=$work/results.tsv
: >"$results"

wal_fsyncs() { # WAL fsyncs of the 3 nodes' Raft log stores so far ("" if not exported)
  local i
  for i in 1 2 3; do curl -sf -m 2 "127.0.0.1:$(node_port "$i" 2)/metrics" || true; done |
    awk '/^swarmkv_raftlog_wal_fsync_seconds_count/ { n += $2; seen = 1 } END { if (seen) printf "%d", n }'
}
json_field() { # field $2 of the one-line JSON object $1
  sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<<"$1"
}
hz=$(getconf CLK_TCK)
d=
trap '[ -n "$d" ] && "$here/loopback-cluster.sh" down "$d" >/dev/null 2>&1' EXIT

for r in $(seq 1 "$rounds"); do
  # Odd rounds run the variants in the given order, even rounds in reverse
  # (A B, B A, A B, ...): the variant that runs first in a round measured
  # faster, whichever it was (docs/performance-log.md, round 7).
  order=("${names[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=()
    for ((i = ${#names[@]} - 1; i >= 0; i--)); do order+=("${names[$i]}"); done
  fi
  for n in "${order[@]}"; do
    d=$work/lc-$n-$r
    rm -rf "$d"
    envvar=NODE_ENV_$n shardsvar=SHARDS_$n
    # shellcheck disable=SC2086
    env ${!envvar:-} SWARMNODE=${bin[$n]} "$here/loopback-cluster.sh" up 3 "${!shardsvar:-8}" "$d" >/dev/null
    sleep 2
    for w in $workloads; do
      args=$(bench_args "$w")
      [ -z "${DURATION:-}" ] || args="$args --duration $DURATION" # the last flag wins
      c0=$(node_cpu "$d"); f0=$(wal_fsyncs); read -r s0 q0 < <(node_sched "$d")
      # shellcheck disable=SC2086
      out=$("${bin[$n]}" bench $args --json --progress=false --endpoints "$ep" 2>"$work/bench.err" | tr -d '\n ') || true
      c1=$(node_cpu "$d"); f1=$(wal_fsyncs); read -r s1 q1 < <(node_sched "$d")
      if [ -z "$(json_field "$out" ops_per_sec)" ]; then
        echo "round $r $n $w: bench failed: $(tail -1 "$work/bench.err")" >&2
        continue
      fi
      echo "$out" >>"$work/$n-$w-$r.json"
      rss=$(for p in $(cat "$d/pids"); do awk '/VmRSS/ {print $2}' "/proc/$p/status"; done | sort -n | tail -1)
      ops=$(json_field "$out" ops); ops=${ops:-0}
      line=$(awk -v n="$n" -v w="$w" -v r="$r" -v tput="$(json_field "$out" ops_per_sec)" \
        -v mean="$(json_field "$out" mean_ms)" -v p99="$(json_field "$out" p99_ms)" \
        -v errs="$(json_field "$out" errors)" -v ops="$ops" -v cpu=$((c1 - c0)) -v hz="$hz" -v rss="$rss" \
        -v fs="${f0:+${f1:+$((f1 - f0))}}" -v sw=$((s1 - s0)) -v qw=$((q1 - q0)) \
        -v evs="$(json_field "$out" events_per_sec)" -v evp99="$(json_field "$out" event_p99_ms)" \
        'BEGIN { cpuop = ops > 0 ? cpu / hz * 1e6 / ops : 0; fsop = (fs != "" && ops > 0) ? sprintf("%.3f", fs / ops) : "-";
                 swop = ops > 0 ? sw / ops : 0; qop = ops > 0 ? qw / 1000 / ops : 0
                 ev = evs != "" ? sprintf("%.0f", evs) : "-"; evp = evp99 != "" ? sprintf("%.1f", evp99) : "-"
                 printf "%s\t%s\t%d\t%.0f\t%.2f\t%.1f\t%d\t%.0f\t%d\t%s\t%.2f\t%.0f\t%s\t%s\n", n, w, r, tput, mean, p99, errs, cpuop, rss / 1024, fsop, swop, qop, ev, evp }')
      echo "$line" >>"$results"
      awk -F'\t' '{ printf "round %s %-8s %-9s %7s ops/s  mean %6s ms  p99 %6s ms  errors %s  node CPU/op %5s us  fsyncs/op %s  switches/op %s  wait/op %s us  RSS %s MiB%s\n", $3, $1, $2, $4, $5, $6, $7, $8, $10, $11, $12, $9, ($13 != "-" ? sprintf("  events %s/s  delivery p99 %s ms", $13, $14) : "") }' <<<"$line"
    done
    "$here/loopback-cluster.sh" down "$d" >/dev/null
    d=
  done
done

echo
echo "medians of $rounds rounds (ops/s [runs]; mean ms; p99 ms; node CPU/op us; WAL fsyncs/op; switches/op; wait/op us; largest RSS MiB[; watch: events/s; delivery p99 ms])"
for w in $workloads; do
  for n in "${names[@]}"; do
    awk -F'\t' -v n="$n" -v w="$w" '
      $1 == n && $2 == w { k++; t[k] = $4; m[k] = $5; p[k] = $6; c[k] = $8; f[k] = $10; s[k] = $11; q[k] = $12; e[k] = $13; ep[k] = $14; if ($9 > rss) rss = $9; runs = runs (runs ? ", " : "") $4 }
      function med(a,   i, j, x) { for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } return a[int((k + 1) / 2)] }
      END { if (k) printf "%-9s %-8s %7s [%s]; %s; %s; %s; %s; %s; %s; %s%s\n", w, n, med(t), runs, med(m), med(p), med(c), (f[1] == "-" ? "-" : med(f)), med(s), med(q), rss, (e[1] != "" && e[1] != "-" ? sprintf("; %s; %s", med(e), med(ep)) : "") }' "$results"
  done
done
