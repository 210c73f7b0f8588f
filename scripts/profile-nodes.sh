#!/usr/bin/env bash
# Profiles the 3 nodes of a fresh loopback cluster (scripts/loopback-cluster.sh)
# under one bench workload and prints where their CPU goes, by component:
# the breakdown docs/performance-log.md quotes. The CPU profiles of the three
# nodes, taken at the same time in the middle of the run, are kept in OUT for
# `go tool pprof` (e.g. go tool pprof -top -cum OUT/n1.prof OUT/n2.prof OUT/n3.prof).
#
#   scripts/profile-nodes.sh [workload]      workload: put100 (default),
#       put1, put1000, get100, ledger100 (scripts/bench-lib.sh), or idle
#       (no load and no warm-up: what an idle cluster spends)
# Before the breakdown it prints the nodes' CPU over the profiled seconds
# from /proc (utime+stime), which unlike the profiles counts every thread.
# Environment:
#   SWARMNODE=./bin/swarmnode   the binary (make build)
#   SHARDS=8                    shards of the cluster
#   SECONDS_PROFILED=10         length of the profiles (the bench runs 8 s longer)
#   WARM=20s                    a put load at 100 clients first (0: none), so the
#                               Raft log WALs are past their first rotations
#   OUT=/tmp/swarmkv-profile    profiles, bench output, the cluster's data dir
#
# Each component is the cumulative share of the nodes' CPU samples spent in
# (under) the functions named; components overlap where one calls the other
# (the fsyncs are part of the WAL writers, the decoding part of the apply).
# Needs the ports of scripts/loopback-cluster.sh free (PORT_BASE moves them,
# as there).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
workload=${1:-put100}
bin=${SWARMNODE:-./bin/swarmnode}
shards=${SHARDS:-8}
secs=${SECONDS_PROFILED:-10}
warm=${WARM:-20s}
out=${OUT:-/tmp/swarmkv-profile}
# shellcheck source=bench-lib.sh
. "$here/bench-lib.sh"
# The workload's own --duration is overridden below (the last flag wins).
args=
[ "$workload" = idle ] || args=$(bench_args "$workload") || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ -x "$bin" ] || { echo "profile-nodes: $bin is not built (make build)" >&2; exit 2; }
if curl -sf -m 1 "127.0.0.1:$(node_port 1 2)/healthz" >/dev/null 2>&1; then
  echo "profile-nodes: a node already answers on 127.0.0.1:$(node_port 1 2); stop that cluster first" >&2; exit 1
fi
rm -rf "$out"; mkdir -p "$out"
d=$out/cluster
trap 'SWARMNODE=$bin "$here/loopback-cluster.sh" down "$d" >/dev/null 2>&1 || true' EXIT
SWARMNODE=$bin "$here/loopback-cluster.sh" up 3 "$shards" "$d" >/dev/null
[ "$workload" = idle ] && warm=0
if [ "$warm" != 0 ]; then
  echo "warming: put, 100 clients, $warm" >&2
  # shellcheck disable=SC2046
  "$bin" bench $(bench_args warm) --duration "$warm" --progress=false --endpoints "$ep" >/dev/null
fi
if [ "$workload" = idle ]; then
  echo "profiling an idle cluster: ${secs}s of each node's CPU" >&2
else
  echo "profiling $workload: ${secs}s of each node's CPU in a $((secs + 8))s run" >&2
fi
bench=
if [ "$workload" != idle ]; then
  # shellcheck disable=SC2086
  "$bin" bench $args --duration "$((secs + 8))s" --progress=false --endpoints "$ep" >"$out/bench.txt" 2>&1 &
  bench=$!
fi
sleep 5 # past the prefill of get and ledger
t0=$(node_cpu "$d")
for i in 1 2 3; do
  curl -sf -m $((secs + 10)) -o "$out/n$i.prof" "127.0.0.1:$(node_port "$i" 2)/debug/pprof/profile?seconds=$secs" &
done
wait $(jobs -p | grep -vx "${bench:-none}")
t1=$(node_cpu "$d")
if [ -n "$bench" ]; then
  wait "$bench" || true
  grep -E 'throughput|latency' "$out/bench.txt" || { cat "$out/bench.txt" >&2; exit 1; }
fi
awk -v t=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v s="$secs" \
  'BEGIN { printf "nodes'"'"' CPU from /proc: %.2f cores (3 nodes, %ds)\n", t / hz / s, s }'

top=$(go tool pprof -top -cum -nodecount=100000 "$out/n1.prof" "$out/n2.prof" "$out/n3.prof" 2>/dev/null)
total=$(sed -n 's/.*Total samples = \([0-9.]*[mµu]*s\).*/\1/p' <<<"$top")
echo "nodes' CPU in the profiles: ${total} over 3 x ${secs}s"
# share NAME REGEX...: the cumulative % of the outermost function matching
# each REGEX, the largest of them (MODE=sum: their sum, for disjoint frames).
share() {
  local name=$1 re p pct=0; shift
  for re in "$@"; do
    p=$(awk -v re="$re" '$6 ~ re { v = $5; sub("%", "", v); if (v + 0 > m) m = v + 0 } END { print m + 0 }' <<<"$top")
    pct=$(awk -v a="$pct" -v b="$p" -v sum="${MODE:-}" 'BEGIN { print (sum == "sum" ? a + b : (b > a ? b : a)) }')
  done
  printf '  %-58s %5.1f %%\n' "$name" "$pct"
}
sum() { MODE=sum share "$@"; }
echo "share of the nodes' CPU (cumulative, components overlap):"
share "state machine apply (3 replicas)" '^github.com/swarmkv/swarmkv/fsm.\(\*FSM\).ApplyBatch$'
share "  command decoding (CBOR)" '^github.com/swarmkv/swarmkv/fsm.DecodeCommand$'
share "  Pebble reads (Batch.Get)" '^github.com/cockroachdb/pebble/v2.\(\*Batch\).Get$'
share "  Pebble commit (memtable insert)" '^github.com/swarmkv/swarmkv/fsm.\(\*FSM\).commit$'
share "Pebble WAL writers (Raft log and state machines)" '^github.com/cockroachdb/pebble/v2/record.\(\*LogWriter\).flushLoop$'
share "  fdatasync" '^golang.org/x/sys/unix.Fdatasync$'
share "Pebble flushes and compactions" '^github.com/cockroachdb/pebble/v2.\(\*DB\).compact$'
sum "Raft transport (NetworkTransport, both ends)" '^github.com/hashicorp/raft.\(\*NetworkTransport\).handleConn$' \
  '^github.com/hashicorp/raft.\(\*Raft\).replicate$' '^github.com/hashicorp/raft.\(\*netPipeline\).decodeResponses$' \
  '^github.com/hashicorp/raft.\(\*Raft\).pipelineDecode$' '^github.com/hashicorp/raft.\(\*Raft\).heartbeat$'
sum "  msgpack encoding and decoding" '^github.com/hashicorp/go-msgpack/v2/codec.\(\*Decoder\).Decode$' \
  '^github.com/hashicorp/go-msgpack/v2/codec.\(\*Encoder\).Encode$'
sum "leadership check of read rounds (both ends)" '^github.com/swarmkv/swarmkv/transport.\(\*checkPeer\).loop$' \
  '^github.com/swarmkv/swarmkv/transport.\(\*LeaderChecker\).answer$'
share "Raft loops (leader, follower)" '^github.com/hashicorp/raft.\(\*Raft\).run$'
sum "gRPC server and the pipeline's workers" '^google.golang.org/grpc.\(\*Server\).handleRawConn.func1$' \
  '^google.golang.org/grpc/internal/transport.\(\*loopyWriter\).run$' '^github.com/swarmkv/swarmkv/cluster.workerPool.worker$'
sum "socket writes and reads (all)" '^net.\(\*conn\).Write$' '^net.\(\*conn\).Read$'
share "Go scheduler (finding work, spinning)" '^runtime.schedule$'
share "garbage collection (background marking)" '^runtime.gcBgMarkWorker$'
echo "profiles: $out/n{1,2,3}.prof"
