#!/usr/bin/env bash
# Measures etcd on this machine with the workloads of scripts/perf-ab.sh, so
# that swarmkv's figures can be set against the reference the performance
# issue names ("etcd v3.6 on the same kind of machine") on the same host,
# at the same time. Builds etcd and its benchmark tool from the Go module
# proxy (go.etcd.io/etcd/server/v3 and go.etcd.io/etcd/v3/tools/benchmark,
# CGO_ENABLED=0) into a scratch module, starts a 3-member etcd cluster on
# loopback (default settings: every write fsynced by the leader and a
# majority), runs the workloads against the leader (--target-leader: what
# swarmkv's client does, which routes every call to its shard's leader),
# and prints per run ops/s, mean and p99 latency and the members' CPU per
# op, then the medians.
#
#   scripts/etcd-reference.sh
#
# Environment:
#   ETCD_VERSION=v3.6.8                       module version built
#   ROUNDS=3                                   rounds (a fresh cluster each)
#   WORKLOADS="put100 put1 put1000 get100"     (or any of the lease and
#                                              watch workloads below)
#   WORK=/tmp/swarmkv-etcd-ref                 module, binaries, data dirs
#   SCALE=1                                    multiplies every request count
#                                              (0.1 for a quick check)
#   ETCD_PORT_BASE=                            if set, member i listens on
#       ETCD_PORT_BASE+10*(i-1) (clients) and +1 (peers), e.g. 23500
#
# Workloads (8-byte keys, 256-byte values, over 100k keys; etcd's benchmark
# takes a request count, not a duration, so the counts below aim at about
# 10 s on the project's VM):
#   put100   100 clients over 4 connections, 40,000 puts
#   put1     1 client, 1 connection, 3,000 puts
#   put1000  1000 clients over 8 connections, 100,000 puts
#   get100   linearizable range of one key, 100 clients over 4 connections,
#            150,000 reads
# Lease and watch workloads (docs/performance-log.md, "Leases and watches";
# scripts/perf-ab.sh has swarmkv's):
#   ka100    lease-keepalive: 100 clients over 4 connections, each granting
#            one lease (100 s TTL) and renewing it with KeepAliveOnce (a
#            stream per keep-alive), 100,000 keep-alives
#   ka10k    the same with 10,000 clients over 100 connections: 10,000
#            leases, 200,000 keep-alives (KA_CLIENTS=N for N clients: on the
#            shared 2-core machine etcd refused 10,000 grants sent at once,
#            "etcdserver: too many requests", and the tool panics; 4,000 ran)
#   watch100 watch: 100 watchers (100 streams of 1) of one key while 100
#            clients over 4 connections put it 20,000 times (32-byte key,
#            4-byte value): events/s received by all watchers (the put rate
#            is about that over 100)
#   watch0   the puts of watch100 without watchers: put, 100 clients over 4
#            connections, one 32-byte key, 8-byte values, 40,000 puts
#   watchlat100 watch-latency: 100 watchers (10 streams of 10) of one key, one
#            client putting it 5,000 times at up to 1,000/s: the line is the
#            events' delay from each put's answer to their delivery
# Uses loopback ports 12379-32380 (or ETCD_PORT_BASE's); refuses to start if
# one answers.
set -euo pipefail
version=${ETCD_VERSION:-v3.6.8}
rounds=${ROUNDS:-3}
workloads=${WORKLOADS:-put100 put1 put1000 get100}
work=${WORK:-/tmp/swarmkv-etcd-ref}
scale=${SCALE:-1}
for w in $workloads; do
  case $w in put100|put1|put1000|get100|ka100|ka10k|watch100|watch0|watchlat100) ;; *) echo "etcd-reference: unknown workload '$w'" >&2; exit 2 ;; esac
done
# cport I / pport I: member I's client and peer port.
cport() { if [ -n "${ETCD_PORT_BASE:-}" ]; then echo $((ETCD_PORT_BASE + 10 * ($1 - 1))); else echo "${1}2379"; fi; }
pport() { if [ -n "${ETCD_PORT_BASE:-}" ]; then echo $((ETCD_PORT_BASE + 10 * ($1 - 1) + 1)); else echo "${1}2380"; fi; }
# n COUNT: COUNT times SCALE, at least 1.
n() { awk -v c="$1" -v s="$scale" 'BEGIN { v = int(c * s + 0.5); print (v < 1 ? 1 : v) }'; }
for i in 1 2 3; do
  if curl -sf -m 1 "127.0.0.1:$(cport "$i")/health" >/dev/null 2>&1; then
    echo "etcd-reference: something answers on 127.0.0.1:$(cport "$i"); stop it first" >&2; exit 1
  fi
done
mkdir -p "$work/mod"
etcd=$work/etcd-$version bench=$work/etcd-benchmark-$version
if [ ! -x "$etcd" ] || [ ! -x "$bench" ]; then
  echo "building etcd $version and its benchmark tool from the module proxy ..." >&2
  (
    cd "$work/mod"
    [ -f go.mod ] || go mod init etcdref >/dev/null 2>&1
    GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$version" "go.etcd.io/etcd/v3@$version" >get.log 2>&1 ||
      { echo "etcd-reference: fetching etcd $version from the module proxy failed:" >&2; tail -5 get.log >&2; exit 1; }
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -o "$etcd" go.etcd.io/etcd/server/v3
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -o "$bench" go.etcd.io/etcd/v3/tools/benchmark
  )
fi
results=$work/results.tsv
: >"$results"
hz=$(getconf CLK_TCK)
pids=()
stop() {
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  pids=()
}
trap stop EXIT
cluster=e1=http://127.0.0.1:$(pport 1),e2=http://127.0.0.1:$(pport 2),e3=http://127.0.0.1:$(pport 3)
eps=127.0.0.1:$(cport 1),127.0.0.1:$(cport 2),127.0.0.1:$(cport 3)
cpu() { local t=0 p; for p in "${pids[@]}"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t"; }

for r in $(seq 1 "$rounds"); do
  rm -rf "$work/data"
  for i in 1 2 3; do
    "$etcd" --name "e$i" --data-dir "$work/data/e$i" --log-level error \
      --listen-client-urls "http://127.0.0.1:$(cport "$i")" --advertise-client-urls "http://127.0.0.1:$(cport "$i")" \
      --listen-peer-urls "http://127.0.0.1:$(pport "$i")" --initial-advertise-peer-urls "http://127.0.0.1:$(pport "$i")" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "ref-$r" \
      >"$work/e$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 1 100); do
    curl -sf -m 1 "127.0.0.1:$(cport 1)/health" 2>/dev/null | grep -q '"health":"true"' && break
    sleep 0.2
  done
  # the key get100 reads, 256 bytes, through etcd's JSON gateway
  curl -sf -m 5 "127.0.0.1:$(cport 1)/v3/kv/put" -d "{\"key\": \"$(printf 00000000 | base64)\", \"value\": \"$(head -c 256 /dev/zero | tr '\0' v | base64 -w0)\"}" >/dev/null
  for w in $workloads; do
    case $w in
      put100) args="--clients 100 --conns 4 put --key-size 8 --val-size 256 --key-space-size 100000 --total $(n 40000)" ;;
      put1) args="--clients 1 --conns 1 put --key-size 8 --val-size 256 --key-space-size 100000 --total $(n 3000)" ;;
      put1000) args="--clients 1000 --conns 8 put --key-size 8 --val-size 256 --key-space-size 100000 --total $(n 100000)" ;;
      get100) args="--clients 100 --conns 4 range 00000000 --consistency l --total $(n 150000)" ;;
      ka100) args="--clients 100 --conns 4 lease-keepalive --total $(n 100000)" ;;
      ka10k) args="--clients ${KA_CLIENTS:-10000} --conns 100 lease-keepalive --total $(n 200000)" ;;
      watch100) args="--clients 100 --conns 4 watch --streams 100 --watch-per-stream 1 --watched-key-total 1 --key-size 32 --put-total $(n 20000)" ;;
      watch0) args="--clients 100 --conns 4 put --key-size 32 --val-size 8 --key-space-size 1 --total $(n 40000)" ;;
      watchlat100) args="--clients 10 --conns 4 watch-latency --streams 10 --watchers-per-stream 10 --put-total $(n 5000) --put-rate 1000" ;;
    esac
    c0=$(cpu)
    # shellcheck disable=SC2086
    out=$("$bench" --endpoints "$eps" --target-leader $args 2>&1) || { echo "round $r $w: benchmark failed: $(grep -m1 '^panic:' <<<"$out" || tail -1 <<<"$out")" >&2; continue; }
    c1=$(cpu)
    # The last summary is the one measured (watch prints its watches'
    # creation first; watch-latency its puts first, then the events).
    tput=$(awk '/Requests\/sec:/ {v = $2} END {print v}' <<<"$out")
    mean=$(awk '/Average:/ {v = $2 * 1000} END {print v}' <<<"$out")
    p99=$(awk '/99% in/ {v = $3 * 1000} END {print v}' <<<"$out")
    ops=$(awk '/Total:/ {t = $2} /Requests\/sec:/ {v = int($2 * t + 0.5)} END {print v}' <<<"$out")
    rss=$(for p in "${pids[@]}"; do awk '/VmRSS/ {print $2}' "/proc/$p/status"; done | sort -n | tail -1)
    line=$(awk -v w="$w" -v r="$r" -v t="$tput" -v m="$mean" -v p="$p99" -v n="$ops" -v cpu=$((c1 - c0)) -v hz="$hz" -v rss="$rss" \
      'BEGIN { printf "etcd\t%s\t%d\t%.0f\t%.2f\t%.1f\t%.0f\t%d\n", w, r, t, m, p, (n > 0 ? cpu / hz * 1e6 / n : 0), rss / 1024 }')
    echo "$line" >>"$results"
    awk -F'\t' '{ printf "round %s etcd %-8s %7s ops/s  mean %6s ms  p99 %6s ms  member CPU/op %5s us  RSS %s MiB\n", $3, $2, $4, $5, $6, $7, $8 }' <<<"$line"
    case $w in
      watch100) awk -v t="$tput" 'BEGIN { printf "  (ops are events received by all watchers; puts about %.0f/s)\n", t / 100 }' ;;
      watchlat100) echo "  (mean and p99: delay from a put's answer to each watcher's event)" ;;
      ka100 | ka10k) echo "  (ops are keep-alives)" ;;
    esac
  done
  stop
done

echo
echo "etcd $version, medians of $rounds rounds (ops/s [runs]; mean ms; p99 ms; member CPU/op us; largest RSS MiB)"
for w in $workloads; do
  awk -F'\t' -v w="$w" '
    $2 == w { k++; t[k] = $4; m[k] = $5; p[k] = $6; c[k] = $7; if ($8 > rss) rss = $8; runs = runs (runs ? ", " : "") $4 }
    function med(a,   i, j, x) { for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } return a[int((k + 1) / 2)] }
    END { if (k) printf "%-8s %7s [%s]; %s; %s; %s; %s\n", w, med(t), runs, med(m), med(p), med(c), rss }' "$results"
done
