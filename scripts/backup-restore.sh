#!/usr/bin/env bash
# Backup and restore, measured (docs/operations.md, "Backup and restore"):
# a loopback cluster of 3 nodes takes KEYS puts, then a backup while a put
# load runs; the backup is verified and restored into a fresh cluster of 3
# nodes (one seeded node, two that join), which is backed up in turn and
# compared with the first backup record by record (scripts/backupdiff).
# Prints the figures: backup size and time, verify, restore, time to
# serving, records compared.
#   KEYS=20000 scripts/backup-restore.sh
# Settings (environment): KEYS (20000), VALUE_SIZE (2048 bytes), SHARDS
# (4), PORT_BASE (19000: the source uses PORT_BASE+10..+33, the restored
# cluster PORT_BASE+110..+133), DIR (/tmp/swarmkv-backup-restore, removed
# at the end unless KEEP=1), SWARMNODE (./bin/swarmnode, built if absent).
set -euo pipefail
keys=${KEYS:-20000}; vsize=${VALUE_SIZE:-2048}; shards=${SHARDS:-4}
base=${PORT_BASE:-19000}; dir=${DIR:-/tmp/swarmkv-backup-restore}
bin=${SWARMNODE:-./bin/swarmnode}
[ -x "$bin" ] || make build >/dev/null
rm -rf "$dir"; mkdir -p "$dir"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
port() { echo $((base + $1 * 10 + $2)); } # port NODE OFFSET (0 grpc, 1 raft, 2 http, 3 gossip)

# start NAME NODE [serve flags...]: node NODE (1-3 source, 11-13 restored).
start() {
  local name=$1 i=$2; shift 2
  "$bin" serve --id "$name" --data-dir "$dir/$name" \
    --grpc-addr "127.0.0.1:$(port "$i" 0)" --raft-addr "127.0.0.1:$(port "$i" 1)" \
    --http-addr "127.0.0.1:$(port "$i" 2)" --gossip-addr "127.0.0.1:$(port "$i" 3)" \
    --gossip-profile local "$@" >"$dir/$name.log" 2>&1 &
  pids+=($!)
}
ready() { curl -sf "127.0.0.1:$(port "$1" 2)/readyz" >/dev/null; }
wait_ready() {
  for _ in $(seq 1 600); do
    local ok=1 i
    for i in "$@"; do ready "$i" || ok=0; done
    [ $ok = 1 ] && return 0
    sleep 0.1
  done
  echo "not ready in 60s: nodes $*; see $dir/*.log" >&2; exit 1
}
# settled NODE: every shard and the meta group has a leader and 3
# reachable voters (swarmnode status's table).
settled() {
  "$bin" status --admin "127.0.0.1:$(port "$1" 2)" 2>/dev/null | awk '
    /^SHARD/ { t = 1; next }
    t && NF >= 5 { n++; v = 0; for (i = 5; i <= NF; i++) if ($i ~ /:voter:[0-9]+$/) v++
                   if ($2 == "(none)" || v != 3) bad++ }
    END { exit !(n > 0 && bad == 0) }'
}

echo "== source cluster: 3 nodes, $shards shards (ports $(port 1 0)-$(port 3 3))"
join="127.0.0.1:$(port 1 3),127.0.0.1:$(port 2 3),127.0.0.1:$(port 3 3)"
for i in 1 2 3; do start "n$i" "$i" --join "$join" --bootstrap-expect 3 --shards "$shards"; done
wait_ready 1 2 3
eps="127.0.0.1:$(port 1 0),127.0.0.1:$(port 2 0),127.0.0.1:$(port 3 0)"
t=$(now)
"$bin" bench put --endpoints "$eps" --total "$keys" --key-space $((keys * 100)) --value-size "$vsize" --progress=false | grep -E 'ops|throughput'
echo "prefill: $keys puts of $vsize B in $(since "$t") s"

echo "== backup under a put load (20 clients for ${LOAD_SECONDS:-20} s)"
"$bin" bench put --endpoints "$eps" --duration "${LOAD_SECONDS:-20}s" --clients 20 --key-space $((keys * 100)) \
  --value-size "$vsize" --progress=false >"$dir/load.log" 2>&1 &
load=$!
sleep 2
t=$(now)
"$bin" backup --admin "127.0.0.1:$(port 2 2)" --out "$dir/cluster.swkvbak" --backup-key-file "$dir/backup.key" # made here
backup_s=$(since "$t")
kill -0 $load 2>/dev/null || echo "warning: the load ended before the backup did (raise LOAD_SECONDS)" >&2
wait $load
grep -E ' ops |throughput' "$dir/load.log" | sed 's/^ */load: /'
size=$(stat -c %s "$dir/cluster.swkvbak")

echo "== verify"
t=$(now)
"$bin" backup verify "$dir/cluster.swkvbak" --backup-key-file "$dir/backup.key" | tail -n +1 | head -3
verify_s=$(since "$t")
records=$("$bin" backup verify "$dir/cluster.swkvbak" --backup-key-file "$dir/backup.key" | awk '$1 == "total" { print $2 }')

echo "== restore into a fresh cluster"
for i in 1 2 3; do kill "${pids[$((i - 1))]}" 2>/dev/null || true; done # the source is done
t=$(now)
"$bin" restore --from "$dir/cluster.swkvbak" --data-dir "$dir/r1" --backup-key-file "$dir/backup.key"
restore_s=$(since "$t")
t=$(now)
start r1 11
wait_ready 11
r1_s=$(since "$t")
start r2 12 --join "127.0.0.1:$(port 11 3)"
start r3 13 --join "127.0.0.1:$(port 11 3)"
for i in 2 3; do
  for _ in $(seq 1 100); do curl -sf "127.0.0.1:$(port 1"$i" 2)/healthz" >/dev/null && break; sleep 0.1; done
  "$bin" join "r$i" --admin "127.0.0.1:$(port 11 2)" >/dev/null
done
wait_ready 11 12 13
serving_s=$(since "$t")
for _ in $(seq 1 1200); do settled 11 && break; sleep 0.1; done
settled 11 || { echo "the restored cluster did not settle on 3 voters in 120s" >&2; "$bin" status --admin "127.0.0.1:$(port 11 2)" >&2; exit 1; }
voters_s=$(since "$t")

echo "== compare: a backup of the restored cluster against the first"
"$bin" backup --admin "127.0.0.1:$(port 13 2)" --out "$dir/restored.swkvbak" --backup-key-file "$dir/backup.key" >/dev/null
go run ./scripts/backupdiff "$dir/cluster.swkvbak" "$dir/restored.swkvbak" | tail -1 | tee "$dir/diff.txt"
compared=$(awk '{ print $2 }' "$dir/diff.txt")

cat <<EOF

| step | result |
| --- | --- |
| backup (under a put load: $(awk '$1 == "ops" { print $2 " puts, " $5 " errors" }' "$dir/load.log")) | $records records, $(awk -v s="$size" 'BEGIN { printf "%.1f MiB", s / 1048576 }') in $backup_s s |
| verify | $verify_s s |
| restore (seed written) | $restore_s s |
| r1 serving (alone) | $r1_s s |
| 3 nodes serving | $serving_s s |
| every group on 3 voters | $voters_s s |
| records compared | $compared, $(awk '{ print $5 }' "$dir/diff.txt") differ, $(awk '{ print $7 + $11 }' "$dir/diff.txt") missing |
EOF
