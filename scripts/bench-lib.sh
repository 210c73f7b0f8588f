# Sourced by scripts/perf-ab.sh and scripts/profile-nodes.sh: what both need
# of the cluster of scripts/loopback-cluster.sh (its endpoints, its nodes'
# CPU) and the named workloads docs/performance.md measures, as
# `swarmnode bench` arguments (8-byte keys, 256-byte values, the bench
# defaults otherwise).
#   put100    put, 100 clients over 4 connections, 10 s
#   put1      put, 1 client, 8 s
#   put1000   put, 1000 clients over 8 connections, 10 s
#   get100    linearizable get, 100 clients, 10k keys prefilled, 10 s
#   ledger100 ProcessUsage, 100 clients over 10,000 accounts, 10 s
#   warm      put, 100 clients over 4 connections, 20 s
#   ka100     lease-keepalive: 10,000 leases granted first, renewed in turn
#             by 100 callers over 4 connections on the clients' shared
#             keep-alive streams, 10 s (keep-alives/s)
#   kaonce100 the same with a KeepAliveOnce call per keep-alive
#   watch100  watch: 100 watchers of one routing key, while 100 put clients
#             over 4 connections write its keys (32-byte keys, 8-byte
#             values), 10 s (puts/s, events/s delivered to all watchers)
#   watch0    the same puts without watchers (the put throughput watch100
#             compares with)
# bench_args WORKLOAD prints the arguments; it fails on an unknown name.
bench_args() {
  case $1 in
    put100) echo "put --clients 100 --conns 4 --duration 10s" ;;
    warm) echo "put --clients 100 --conns 4 --duration 20s" ;;
    put1) echo "put --clients 1 --conns 1 --duration 8s" ;;
    put1000) echo "put --clients 1000 --conns 8 --duration 10s" ;;
    get100) echo "get --clients 100 --key-space 10000 --duration 10s" ;;
    ledger100) echo "ledger --clients 100 --accounts 10000 --duration 10s" ;;
    ka100) echo "lease-keepalive --clients 100 --conns 4 --leases 10000 --duration 10s" ;;
    kaonce100) echo "lease-keepalive --clients 100 --conns 4 --leases 10000 --keepalive-call once --duration 10s" ;;
    watch100) echo "watch --watchers 100 --clients 100 --conns 4 --routing-keys 1 --key-size 32 --value-size 8 --duration 10s" ;;
    watch0) echo "watch --watchers 0 --clients 100 --conns 4 --routing-keys 1 --key-size 32 --value-size 8 --duration 10s" ;;
    *) return 1 ;;
  esac
}

# node_port I J: port J (0 gRPC, 1 Raft, 2 HTTP, 3 gossip, 4 Redis) of node
# I of scripts/loopback-cluster.sh, which honours PORT_BASE the same way.
node_port() {
  if [ -n "${PORT_BASE:-}" ]; then echo $((PORT_BASE + 10 * ($1 - 1) + $2)); else echo "${1}710$2"; fi
}

# ep: the gRPC endpoints of the 3 nodes of scripts/loopback-cluster.sh.
ep=127.0.0.1:$(node_port 1 0),127.0.0.1:$(node_port 2 0),127.0.0.1:$(node_port 3 0)

# node_sched DIR prints two figures summed over every thread of the nodes
# of the cluster in data dir DIR: the times a thread was switched in to run
# (a wakeup or a preempted thread resumed) and the nanoseconds threads spent
# runnable, waiting for a core (/proc/<pid>/task/*/schedstat). On a machine
# where a wakeup is dear, node CPU per op follows switches per op
# (docs/performance-log.md, round 9).
node_sched() {
  local p
  for p in $(cat "$1/pids"); do cat /proc/"$p"/task/*/schedstat 2>/dev/null; done |
    awk '{ w += $2; n += $3 } END { printf "%.0f %.0f\n", n, w }'
}

# node_cpu DIR prints the CPU (utime+stime, in clock ticks) the nodes of the
# cluster in data dir DIR have used so far.
node_cpu() {
  local t=0 p
  for p in $(cat "$1/pids"); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
  echo "$t"
}
