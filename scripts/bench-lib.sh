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
# bench_args WORKLOAD prints the arguments; it fails on an unknown name.
bench_args() {
  case $1 in
    put100) echo "put --clients 100 --conns 4 --duration 10s" ;;
    warm) echo "put --clients 100 --conns 4 --duration 20s" ;;
    put1) echo "put --clients 1 --conns 1 --duration 8s" ;;
    put1000) echo "put --clients 1000 --conns 8 --duration 10s" ;;
    get100) echo "get --clients 100 --key-space 10000 --duration 10s" ;;
    ledger100) echo "ledger --clients 100 --accounts 10000 --duration 10s" ;;
    *) return 1 ;;
  esac
}

# ep: the gRPC endpoints of the 3 nodes of scripts/loopback-cluster.sh.
ep=127.0.0.1:17100,127.0.0.1:27100,127.0.0.1:37100

# node_sched DIR prints two figures summed over every thread of the nodes
# of the cluster in data dir DIR: the times a thread was switched in to run
# (a wakeup or a preempted thread resumed) and the nanoseconds threads spent
# runnable, waiting for a core (/proc/<pid>/task/*/schedstat). On a machine
# where a wakeup is dear, node CPU per op follows switches per op
# (docs/performance.md, round 9).
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
