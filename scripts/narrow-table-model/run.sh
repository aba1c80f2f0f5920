#!/usr/bin/env bash
# A SQL model of a run's writes on PostgreSQL, the layout of today against the narrow table of
# waiting and running runs with a history partitioned by id (docs/benchmarks.md, "The narrow
# table, modelled in SQL"). pgbench, one client, cycles of 100 runs at a fixed rate, on a
# cluster of its own (initdb in a temporary directory, autovacuum on, the shared server left
# alone). Not modelled: the tasks' fire counts, the successors' probes, the claim's fairness
# statement (a plain FOR UPDATE SKIP LOCKED here), starts, references, rollups.
#
#   scripts/narrow-table-model/run.sh current|narrow [--rate RUNS_PER_S] [--warm S] [--measure S]
#                                     [--no-live-vacuum] [--breakdown]
#
# Every 5 s, retention: `current` deletes the runs more than 200,000 ids old; `narrow` drops the
# history partitions wholly past that and VACUUMs `live_runs` (--no-live-vacuum leaves it to
# autovacuum). Prints the runs done in the measured part, WAL bytes and PostgreSQL CPU (every
# process of the cluster) per run, and the tables' sizes; --breakdown adds the WAL of the last
# 20 s by relation and record type (pg_walinspect). Needs PostgreSQL 15's server binaries; as
# root, the cluster runs as `postgres`.
set -euo pipefail
cd "$(dirname "$0")"
layout="${1:-}"
case "$layout" in current|narrow) shift ;; *) echo "usage: $0 current|narrow [options]" >&2; exit 2 ;; esac
rate=5000; warm=80; measure=120; live_vacuum=1; breakdown=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="$2"; shift 2 ;;
    --warm) warm="$2"; shift 2 ;;
    --measure) measure="$2"; shift 2 ;;
    --no-live-vacuum) live_vacuum=0; shift ;;
    --breakdown) breakdown=1; shift ;;
    *) echo "$0: unknown option $1" >&2; exit 2 ;;
  esac
done
bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
retain=200000
cycles_per_s=$((rate / 100))
[ "$cycles_per_s" -ge 1 ] || { echo "$0: --rate must be at least 100" >&2; exit 2; }

work="$(mktemp -d)"
as_pg=()
if [ "$(id -u)" = 0 ]; then chown postgres "$work"; as_pg=(runuser -u postgres --); fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cleanup() { "${as_pg[@]}" "$bin/pg_ctl" -D "$work/data" stop -m immediate >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
"${as_pg[@]}" "$bin/initdb" -D "$work/data" -U postgres -A trust >/dev/null
printf "port = %s\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nautovacuum = on\n" \
  "$port" "$work" >> "$work/data/postgresql.conf"
"${as_pg[@]}" "$bin/pg_ctl" -D "$work/data" -l "$work/server.log" -w start >/dev/null
psql_() { psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
PGOPTIONS="-c client_min_messages=warning" psql_ -f "$layout.sql" >/dev/null
psql_ -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect" >/dev/null
seq=runs_id_seq; [ "$layout" = narrow ] && seq=run_ids

partition_ids=50000 next_drop=0 next_create=0
# The narrow layout's history partitions: those the next 5 s of ids may reach are created, those
# wholly past retention dropped.
history_partitions() { # current last id
  while [ $(((next_drop + 1) * partition_ids)) -le $(($1 - retain)) ]; do
    psql_ -c "DROP TABLE run_history_$next_drop" >/dev/null
    next_drop=$((next_drop + 1))
  done
  while [ "$next_create" -le $((($1 + rate * 5) / partition_ids)) ]; do
    psql_ -c "CREATE TABLE run_history_$next_create PARTITION OF run_history
              FOR VALUES FROM ($((next_create * partition_ids))) TO ($(((next_create + 1) * partition_ids)))" >/dev/null
    next_create=$((next_create + 1))
  done
}
retention() {
  local cur; cur="$(psql_ -c "SELECT last_value FROM $seq")"
  if [ "$layout" = current ]; then
    psql_ -c "DELETE FROM runs WHERE tenant_id = 1 AND scheduled_at < ($cur - $retain) * 10
              AND finished_at IS NOT NULL" >/dev/null
    return
  fi
  history_partitions "$cur"
  [ "$live_vacuum" = 1 ] && psql_ -c "VACUUM live_runs" >/dev/null
  return 0
}
cycles() { # seconds
  local left="$1"
  while [ "$left" -gt 0 ]; do
    "${as_pg[@]}" "$bin/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c1 -R "$cycles_per_s" -T 5 \
      -D retain="$retain" -f "$layout-cycle.sql" postgres >/dev/null
    retention
    left=$((left - 5))
  done
}
cpu_ticks() { # every process of the cluster, and the children it waited for
  local pm t; pm="$(head -n1 "$work/data/postmaster.pid")"
  t="$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")"
  for c in $(pgrep -P "$pm"); do t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat"))); done
  echo "$t"
}

[ "$layout" = narrow ] && history_partitions 0
cycles "$warm"
w0="$(psql_ -c "SELECT pg_current_wal_lsn()")"; c0="$(cpu_ticks)"; s0="$(psql_ -c "SELECT last_value FROM $seq")"
t0="$(date +%s.%N)"
if [ "$breakdown" = 1 ] && [ "$measure" -gt 20 ]; then cycles $((measure - 20)); b0="$(psql_ -c "SELECT pg_current_wal_lsn()")"; bs0="$(psql_ -c "SELECT last_value FROM $seq")"; cycles 20
else cycles "$measure"; b0="$w0"; bs0="$s0"; fi
sleep 1
w1="$(psql_ -c "SELECT pg_current_wal_lsn()")"; c1="$(cpu_ticks)"; s1="$(psql_ -c "SELECT last_value FROM $seq")"
t1="$(date +%s.%N)"
runs=$((s1 - s0))
wal="$(psql_ -c "SELECT pg_wal_lsn_diff('$w1', '$w0')")"
if [ "$layout" = current ]; then
  size="runs $(psql_ -c "SELECT pg_size_pretty(pg_total_relation_size('runs'))")"
else
  size="live_runs $(psql_ -c "SELECT pg_size_pretty(pg_total_relation_size('live_runs'))"), run_history $(psql_ -c "SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))) FROM pg_inherits WHERE inhparent = 'run_history'::regclass")"
fi
python3 -c "
runs, secs, wal, ticks = $runs, $t1 - $t0, $wal, $((c1 - c0)) / $(getconf CLK_TCK)
print(f'$layout: {runs} runs in {secs:.1f} s ({runs / secs:.0f}/s of $rate offered); '
      f'WAL {wal / runs:.0f} B/run; PostgreSQL CPU {ticks * 1e6 / runs:.1f} µs/run; $size')"
if [ "$breakdown" = 1 ]; then
  n=$((s1 - bs0))
  psql_ -F ' | ' -c "
    WITH r AS (SELECT resource_manager || '/' || record_type AS what, record_length AS len, fpi_length AS fpi,
                      (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid AS node
               FROM pg_get_wal_records_info('$b0', '$w1'))
    SELECT COALESCE(c.relname, '-') AS relation, what,
           round(count(*)::numeric / $n, 2) AS records_per_run,
           round(sum(len)::numeric / $n) AS bytes_per_run, round(sum(fpi)::numeric / $n) AS of_which_page_images
    FROM r LEFT JOIN pg_class c ON c.relfilenode = r.node
    GROUP BY 1, 2 HAVING sum(len)::numeric / $n >= 5 ORDER BY 4 DESC"
fi
