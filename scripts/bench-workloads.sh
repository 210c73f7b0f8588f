# Sourced by scripts/perf-ab.sh and scripts/profile-nodes.sh: the named
# workloads docs/performance.md measures, as `swarmnode bench` arguments
# (8-byte keys, 256-byte values, the bench defaults otherwise).
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
