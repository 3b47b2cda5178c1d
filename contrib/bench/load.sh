#!/usr/bin/env bash
# Load benchmark: Postfix's smtp-source loads a fresh relay (bbolt outbox,
# every message fsync'd before its 250) and the script prints accepted
# messages per second, accept latency percentiles (from the relay's own
# histogram), the relay's peak resident memory and its CPU time per message. With -d the relay
# delivers to Postfix's smtp-sink as its smarthost, and the script also
# prints end-to-end messages per second, first accepted to last delivered,
# and checks that every message reached the sink exactly once (by the
# X-Genro-Mail-ID the relay adds). With -x the relay delivers the same
# way but by MX, to one fast site: the load's recipient domain, example.net,
# has its MX host on 127.0.0.2, where smtp-sink listens, in the zone of a
# DNS server on loopback (contrib/bench/mxrig dns) that the relay asks
# (delivery.dns.servers); delivery.mx_port is the sink's port. The site's
# rule (delivery.sites.file) lifts the careful default's limits (100
# messages a session, 60 new connections a minute, 200 waiting) and gives
# it the smarthost's 20 sessions: -d against -x is what the site layer
# (the MX lookup, the site's queue) costs on the way out.
#
#   contrib/bench/load.sh [-d|-x] [-b bolt|mysql|postgres|dynamodb] [-S local|shared|outbox] [-r RELAYS] [-s SESSIONS] [-m MESSAGES] [-l BYTES] [-u ENTRIES] [-P FILE]
#
# -b mysql uses a fresh database on the server of TEST_POSTINO_MYSQL_DSN
# (root@tcp(127.0.0.1:3306)/ by default), and prints the server's work per
# message: the deltas of SHOW GLOBAL STATUS Questions, Com_commit,
# Innodb_row_lock_waits, Innodb_deadlocks, Innodb_data_written and
# Innodb_os_log_written (bytes to the data files and to the redo log), and
# mariadbd's CPU time. They are the whole server's: other clients of the
# server count too.
# -b postgres uses a fresh database on the server of TEST_POSTINO_POSTGRES_DSN
# (postgres://root@127.0.0.1:5432/test by default; a URL), and prints the
# database's commits, rows inserted and updated (pg_stat_database), the WAL
# written (pg_stat_wal, the whole server's) and the CPU time of the server's
# processes, per message.
# -b dynamodb uses a fresh table on the DynamoDB Local of
# TEST_POSTINO_DYNAMODB_ENDPOINT (make deps starts one), behind a counting
# proxy (contrib/bench/ddbcount), and prints the round trips per message.
# Those figures are taken once every message is READY (accept only) or
# delivered (-d).
#
# -r 2 runs two relays on the one MySQL or PostgreSQL database or DynamoDB table, the
# sessions and messages split between them. They share one data directory:
# a relay may deliver a message the other accepted, and finds its file in
# the spool by the path the row records, so relays sharing an outbox must
# share the spool (docs/stores.md). -S outbox keeps the messages'
# bytes in the outbox instead (spool.store, MySQL, PostgreSQL or DynamoDB): each relay then has
# a data directory of its own.
#
# With -b bolt, whose outbox is one process's, each relay has its own
# outbox and data directory: a fleet that shares no store at all, the most
# a shared store's fleet can reach on the machine.
#
# -u N fills the fresh outbox's suppression list with N entries before the
# relay starts (bolt, mysql or postgres; with bolt, each relay's outbox),
# through contrib/bench/suppress fill, which prints the import's time.
# No entry matches the load's recipient: the run measures what the
# lookups cost (the intake worker's, one per message, and delivery's, one
# per claim), and the recipients it holds back, printed, must stay 0. Compare a run with
# -u 1000000 against one without, in turns (docs/benchmarks.md).
#
# -c CPUS gives each relay a CPU budget of its own (a cgroup's CPU quota,
# 0.5 for half a core), as a sidecar's CPU limit does: with it, -r 2 against
# -r 1 asks whether a second relay adds throughput on the shared store,
# rather than what two relays cost when they and the store share the same
# cores (the comparison without -c). It needs root and the cgroup CPU
# controller (v1 or v2).
#
# -P FILE writes a CPU profile of relay 1 (go tool pprof FILE) of the 15
# seconds from the first message, through the relay's admin.profiling
# listener: give enough messages (-m) for the load to last that long.
#
# smtp-source and smtp-sink come with Debian's postfix package. The relay and its data
# live in a temporary directory under the current one, removed at the end.
# On ext4 without a journal, creating files in the minutes after deleting
# many is slower (the inode allocator skips inodes freed in the last five to
# six minutes; each create then costs several times the CPU): leave six
# minutes between runs, or the next run measures that. Running from a new
# top-level directory (mkdir /bench-2 && cd /bench-2) mostly avoids it:
# the filesystem puts a new top-level directory in another block group.
set -euo pipefail

sessions=20 messages=10000 length=4096 deliver= mx= backend=bolt relays=1 spoolstore=local cpus= suppressions=0 profile=
while getopts "dxb:S:r:s:m:l:c:u:P:" opt; do
  case $opt in
    d) deliver=1 ;;
    x) deliver=1 mx=1 ;;
    b) backend=$OPTARG ;;
    S) spoolstore=$OPTARG ;;
    r) relays=$OPTARG ;;
    s) sessions=$OPTARG ;;
    m) messages=$OPTARG ;;
    l) length=$OPTARG ;;
    c) cpus=$OPTARG ;;
    u) suppressions=$OPTARG ;;
    P) profile=$OPTARG ;;
    *) echo "usage: $0 [-d|-x] [-b bolt|mysql|postgres|dynamodb] [-S local|shared|outbox] [-r relays] [-s sessions] [-m messages] [-l bytes] [-c cpus] [-u entries] [-P profile]" >&2; exit 2 ;;
  esac
done

quota=
if [ -n "$cpus" ]; then
  # The cgroup's quota, in microseconds of CPU per 100 ms period.
  quota=$(awk -v c="$cpus" 'BEGIN { q = int(c * 100000); if (q < 1000) exit 1; print q }') ||
    { echo "-c $cpus: give a number of cores, 0.01 or more" >&2; exit 2; }
fi

if [ "$suppressions" != 0 ] && [ "$backend" = dynamodb ]; then
  echo "-u fills a bolt, mysql or postgres outbox's suppression list" >&2
  exit 2
fi

if [ "$spoolstore" = outbox ] && [ "$backend" = bolt ]; then
  echo "-S outbox keeps the bytes in an outbox the relays share: -b mysql, -b postgres or -b dynamodb" >&2
  exit 2
fi

tool() {
  local bin
  bin=$(command -v "$1" || true)
  [ -n "$bin" ] || bin=/usr/sbin/$1
  if [ ! -x "$bin" ]; then
    echo "$1 not found: apt-get install -y postfix" >&2
    exit 1
  fi
  echo "$bin"
}
source_bin=$(tool smtp-source)
sink_bin=$(tool smtp-sink)

root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/contrib/bench/lib.sh"
work=$(mktemp -d "$PWD/postino-bench.XXXXXX")
pids=() sink= proxy= dns= cleanup= cgroups=()
trap 'kill ${pids[*]} $sink $proxy $dns 2>/dev/null || true; wait ${pids[*]} $sink $proxy $dns 2>/dev/null || true; eval "$cleanup"; rm -rf "$work"; [ ${#cgroups[@]} -eq 0 ] || rmdir "${cgroups[@]}"' EXIT

# cpu_cgroup NAME makes a cgroup whose processes share $cpus cores at most
# ($quota), and prints its directory.
cpu_cgroup() {
  local dir
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    dir=/sys/fs/cgroup/$1
    mkdir "$dir" && echo "$quota 100000" >"$dir/cpu.max"
  elif [ -d /sys/fs/cgroup/cpu ]; then
    dir=/sys/fs/cgroup/cpu/$1
    mkdir "$dir" && echo 100000 >"$dir/cpu.cfs_period_us" && echo "$quota" >"$dir/cpu.cfs_quota_us"
  else
    echo "-c needs the cgroup CPU controller, which this machine does not mount" >&2
    return 1
  fi || { rmdir "$dir" 2>/dev/null; echo "-c: cannot make the cgroup $dir (run as root)" >&2; return 1; }
  echo "$dir"
}

(cd "$root" && go build -o "$work/postino" ./cmd/postino)
[ "$suppressions" = 0 ] || (cd "$root" && go build -o "$work/suppress" ./contrib/bench/suppress)
upstream=()
if [ -n "$deliver" ]; then
  sinkip=127.0.0.1
  # By MX, the sink is the MX host of example.net on an address of its own.
  [ -z "$mx" ] || sinkip=127.0.0.2
  sinkaddr=$sinkip:$(free_port $sinkip)
  # Each message is dumped to its own file, for the exactly-once check.
  # smtp-sink drops to the postfix user, who must reach the directory.
  chmod 711 "$work"
  mkdir -m 777 "$work/sink"
  # A parent directory the postfix user cannot enter (mktemp's 0700) would
  # make the sink exit at its first message, and the relay retry for ever.
  if [ "$(id -u)" -eq 0 ] && ! runuser -u postfix -- test -w "$work/sink"; then
    echo "smtp-sink runs as the postfix user, who cannot write to $work/sink: run from a directory whose parents every user may enter (chmod o+x)" >&2
    exit 1
  fi
  "$sink_bin" -u postfix -d "$work/sink/%H%M/%S." "$sinkaddr" 1024 &
  sink=$!
  if [ -z "$mx" ]; then
    upstream=(--smarthost "$sinkaddr")
  else
    (cd "$root" && go build -o "$work/mxrig" ./contrib/bench/mxrig)
    cat >"$work/zone" <<ZONE
; The root zone's NS: the relay asks it when a lookup fails.
. 300 IN NS a.root-servers.net.
example.net. 300 IN MX 10 mx.example.net.
mx.example.net. 300 IN A $sinkip
ZONE
    "$work/mxrig" dns -zone "$work/zone" >"$work/dns.addr" &
    dns=$!
    dns_up() { kill -0 "$dns" || { echo "mxrig dns exited" >&2; exit 1; }; [ -s "$work/dns.addr" ]; }
    wait_for dns_up
    # A fast site: the smarthost's sessions, and limits the load never
    # reaches (a rule's 0 takes the shipped default's figure, not none).
    cat >"$work/sites.yaml" <<SITES
providers:
  - name: bench
    mx: [mx.example.net]
    sessions: 20
    messages_per_session: 1000000
    connections_per_minute: 1000000
    max_queued: 1000000
SITES
    export POSTINO_DELIVERY_DNS_SERVERS=$(cat "$work/dns.addr") POSTINO_DELIVERY_MX_PORT=${sinkaddr##*:} POSTINO_DELIVERY_SITES_FILE=$work/sites.yaml
  fi
else
  # Accept only: delivery is paused, messages wait in READY.
  export POSTINO_DELIVERY_PAUSED=true
fi
store=() fill=()
case $backend in
  bolt) ;;
  mysql)
    base=${TEST_POSTINO_MYSQL_DSN:-root@tcp(127.0.0.1:3306)/}
    db=postino_bench_$$
    mysql -uroot -h127.0.0.1 -e "CREATE DATABASE $db"
    cleanup="mysql -uroot -h127.0.0.1 -e 'DROP DATABASE $db'"
    "$work/postino" migrate --backend mysql --dsn "$base$db" >/dev/null
    store=(--backend mysql --dsn "$base$db")
    fill=(--backend mysql --dsn "$base$db")
    mariadbd_pid=$(pgrep -xo mariadbd || pgrep -xo mysqld)
    ;;
  postgres)
    base=${TEST_POSTINO_POSTGRES_DSN:-postgres://root@127.0.0.1:5432/test}
    db=postino_bench_$$
    psql -q "$base" -c "CREATE DATABASE $db"
    cleanup="psql -q '$base' -c 'DROP DATABASE $db WITH (FORCE)'"
    "$work/postino" migrate --backend postgres --dsn "${base%/*}/$db" >/dev/null
    store=(--backend postgres --dsn "${base%/*}/$db")
    fill=(--backend postgres --dsn "${base%/*}/$db")
    ;;
  dynamodb)
    endpoint=${TEST_POSTINO_DYNAMODB_ENDPOINT:-http://127.0.0.1:8000}
    export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-postino} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-postino} AWS_REGION=${AWS_REGION:-us-east-1}
    (cd "$root" && go build -o "$work/ddbcount" ./contrib/bench/ddbcount)
    proxyaddr=127.0.0.1:$(free_port)
    "$work/ddbcount" -listen "$proxyaddr" -target "$endpoint" &
    proxy=$!
    export AWS_ENDPOINT_URL=http://$proxyaddr
    wait_for curl -sf "$AWS_ENDPOINT_URL/_ddbcount" -o /dev/null
    "$work/postino" dynamodb create-table --table "postino_bench_$$" >/dev/null
    store=(--backend dynamodb --table "postino_bench_$$")
    ;;
  *) echo "unknown backend $backend" >&2; exit 2 ;;
esac
# The shared outbox's list is filled once; bbolt's, relay by relay below.
[ "$suppressions" = 0 ] || [ "$backend" = bolt ] || "$work/suppress" fill "${fill[@]}" -n "$suppressions"

# settle has the database server write out what the setup left in memory
# (the migration's tables; a filled list's million rows) before the run,
# in every run alike. Without it a run after a fill measures the import's
# aftermath: MariaDB went on flushing its dirty pages through the run
# (four times the bytes written, 10 % of the rate), PostgreSQL's
# autovacuum and checkpointer went over the new rows. The import's own
# cost is the fill's figure.
settle() {
  case $backend in
    mysql)
      local pct
      pct=$(mysql -uroot -h127.0.0.1 -N -e "SELECT @@GLOBAL.innodb_max_dirty_pages_pct")
      cleanup="$cleanup; mysql -uroot -h127.0.0.1 -e 'SET GLOBAL innodb_max_dirty_pages_pct = $pct'"
      mysql -uroot -h127.0.0.1 -e "ANALYZE TABLE $db.suppressions; SET GLOBAL innodb_max_dirty_pages_pct = 0" >/dev/null
      # Other databases of the server may keep a few pages dirty: a
      # minute is the most the run waits for them.
      local dirty deadline=$((SECONDS + 60))
      while dirty=$(mysql -uroot -h127.0.0.1 -N -e "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'" | awk '{ print $2 }') &&
        [ "$dirty" -gt 64 ] && [ $SECONDS -lt $deadline ]; do
        sleep 0.2
      done
      mysql -uroot -h127.0.0.1 -e "SET GLOBAL innodb_max_dirty_pages_pct = $pct"
      echo "settled: $dirty dirty pages left in MariaDB's buffer pool"
      ;;
    postgres)
      psql -q "${base%/*}/$db" -c "VACUUM ANALYZE" -c "CHECKPOINT"
      ;;
  esac
}
settle
smtps=() admins=() profiling=false
[ -z "$profile" ] || profiling=true
for i in $(seq "$relays"); do
  smtp=127.0.0.1:$(free_port)
  admin=127.0.0.1:$(free_port)
  data=$work/var
  # bbolt is one process's: each relay then has an outbox of its own.
  [ "$spoolstore" = outbox ] || [ "$backend" = bolt ] && data=$work/var-$i
  if [ "$suppressions" != 0 ] && [ "$backend" = bolt ]; then
    mkdir -p "$data"
    "$work/suppress" fill --backend bolt --path "$data/outbox.db" -n "$suppressions"
  fi
  # Each relay names itself: relays sharing a data directory keep their
  # outcome journals apart by host name.
  # A relay with a budget starts in its cgroup, so that the Go runtime
  # sizes itself to the quota from the first instruction.
  in_cgroup=()
  if [ -n "$cpus" ]; then
    cg=$(cpu_cgroup "postino-bench-$$-$i")
    cgroups+=("$cg")
    in_cgroup=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg")
  fi
  POSTINO_HOSTNAME=bench-relay-$i POSTINO_ADMIN_PROFILING=$profiling "${in_cgroup[@]}" "$work/postino" serve --data "$data" --spool-store "$spoolstore" --listen "$smtp" --admin "$admin" \
    "${upstream[@]}" "${store[@]}" 2>"$work/serve-$i.log" &
  pids+=($!) smtps+=("$smtp") admins+=("$admin")
done
# ready says whether relay i answers /readyz, and stops the script with
# its log when it has exited.
ready() {
  if ! kill -0 "${pids[$1]}" 2>/dev/null; then
    echo "relay $(($1 + 1)) exited:" >&2
    cat "$work/serve-$(($1 + 1)).log" >&2
    exit 1
  fi
  curl -sf "http://${admins[$1]}/readyz" -o /dev/null
}
for i in "${!admins[@]}"; do
  wait_for ready "$i"
done

# metrics [ADMIN...] prints the metrics of the relays of those admin
# addresses, every relay's by default, one after the other.
metrics() {
  local admin
  [ $# -gt 0 ] || set -- "${admins[@]}"
  for admin in "$@"; do curl -sf "http://$admin/metrics"; done
}
# server_status prints the store server's counters, name and value a line.
server_status() {
  case $backend in
    mysql)
      mysql -uroot -h127.0.0.1 -N -e "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit', 'Innodb_row_lock_waits', 'Innodb_deadlocks', 'Innodb_data_written', 'Innodb_os_log_written')"
      awk '{print "mariadbd_cpu_ticks", $14 + $15}' "/proc/$mariadbd_pid/stat"
      ;;
    postgres)
      psql -At -F ' ' "$base" -c "SELECT 'xact_commit', xact_commit FROM pg_stat_database WHERE datname = '$db'
        UNION ALL SELECT 'tup_inserted', tup_inserted FROM pg_stat_database WHERE datname = '$db'
        UNION ALL SELECT 'tup_updated', tup_updated FROM pg_stat_database WHERE datname = '$db'
        UNION ALL SELECT 'wal_bytes', wal_bytes::bigint FROM pg_stat_wal"
      # Every server process's CPU, the relays' connections among them.
      for p in $(pgrep -x postgres); do cat "/proc/$p/stat" 2>/dev/null; done | awk '{ t += $14 + $15 } END { print "postgres_cpu_ticks", t }'
      ;;
    dynamodb)
      curl -sf "$AWS_ENDPOINT_URL/_ddbcount" | python3 -c 'import json, sys; [print(k, v) for k, v in sorted(json.load(sys.stdin).items())]'
      ;;
  esac
}
before=$(server_status)

start=$(date +%s.%N) sources=()
if [ -n "$profile" ]; then
  curl -sf "http://${admins[0]}/debug/pprof/profile?seconds=15" -o "$profile" &
  profiler=$!
fi
for i in $(seq "$relays"); do
  n=$((messages / relays)) s=$((sessions / relays))
  [ "$i" -le $((messages % relays)) ] && n=$((n + 1))
  "$source_bin" -s "$s" -l "$length" -m "$n" -f app@example.com -t user@example.net "${smtps[$((i - 1))]}" &
  sources+=($!)
done
wait "${sources[@]}"
end=$(date +%s.%N)
# sum_metric NAME [ADMIN...] sums a metric (a name, or a name with its
# labels) over the lines of those relays, every relay's by default.
sum_metric() {
  local name=$1
  shift
  metrics "$@" | awk -v name="$name" '$1 == name || index($1, name "{") == 1 { n += $2 } END { print n + 0 }'
}
if [ -n "$deliver" ]; then
  delivered_all() { [ "$(sum_metric postino_delivery_delivered_total)" -ge "$messages" ]; }
  wait_for delivered_all
  last=$(date +%s.%N)
else
  # Counts come from the shared outbox: one relay's suffice, unless each
  # relay has its own (bbolt).
  counted=("${admins[0]}")
  [ "$backend" = bolt ] && counted=("${admins[@]}")
  all_ready() { [ "$(sum_metric 'postino_queue_messages{status="READY"}' "${counted[@]}")" -ge "$messages" ]; }
  wait_for all_ready
fi
after=$(server_status)

all_metrics=$(metrics)
accepted=$(sum_metric postino_intake_accepted_total)

[ -z "$profile" ] || wait "$profiler" || echo "the CPU profile failed: see relay 1's log" >&2
echo "${mx:+route=mx }store=$backend spool.store=$spoolstore relays=$relays sessions=$sessions messages=$messages size=${length}B${cpus:+ cpus=$cpus per relay} suppressions=$suppressions"
awk -v n="$accepted" -v s="$start" -v e="$end" 'BEGIN { printf "accepted: %d in %.2f s = %.0f msg/s\n", n, e - s, n / (e - s) }'
if [ -n "$deliver" ]; then
  awk -v n="$messages" -v s="$start" -v e="$last" 'BEGIN { printf "delivered end to end: %d in %.2f s = %.0f msg/s\n", n, e - s, n / (e - s) }'
  # The sink's dumps hold the X-Genro-Mail-ID the relay gave each message.
  find "$work/sink" -type f -exec grep -h -m1 '^X-Genro-Mail-ID:' {} + | awk -v want="$messages" '
    { seen[$2]++ }
    END {
      for (id in seen) { ids++; if (seen[id] > 1) dup += seen[id] - 1 }
      printf "at the sink: %d distinct messages, %d duplicate deliveries (want %d and 0): %s\n", ids, dup, want,
        (ids == want && dup == 0) ? "exactly once" : "NOT exactly once"
    }'
fi
if [ -n "$mx" ]; then
  echo "$all_metrics" | awk '$1 ~ /^postino_site_handed_back_total/ { n += $2 } END { printf "handed back by the site: %d (want 0: its limits leave it room)\n", n }'
fi
if [ "$suppressions" != 0 ]; then
  echo "$all_metrics" | awk '$1 ~ /^postino_recipients_suppressed_total/ { n += $2 } END { printf "recipients held back by the suppression list: %d (want 0)\n", n }'
fi
# Percentiles from the cumulative histogram of every relay, interpolated
# inside a bucket.
echo "$all_metrics" | awk '
  /^postino_intake_accept_seconds_bucket/ {
    match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5)
    if (!(le in cum)) { n++; key[n] = le; bound[n] = (le == "+Inf") ? 1e9 : le + 0 }
    cum[le] += $2
  }
  END {
    for (j = 1; j <= n; j++) c[j] = cum[key[j]]
    total = c[n]
    split("0.5 0.9 0.99 0.999", qs, " ")
    line = "accept latency:"
    for (i = 1; i <= 4; i++) {
      want = qs[i] * total; lo = 0; prev = 0
      for (j = 1; j <= n; j++) {
        if (c[j] >= want) {
          frac = (c[j] == prev) ? 0 : (want - prev) / (c[j] - prev)
          v = lo + frac * (bound[j] - lo); break
        }
        lo = bound[j]; prev = c[j]
      }
      line = line sprintf(" p%s %.1f ms", qs[i] * 100, v * 1000)
    }
    print line
  }'
hz=$(getconf CLK_TCK)
for i in $(seq "$relays"); do
  pid=${pids[$((i - 1))]}
  rss_kib=$(awk '/^VmHWM:/{print $2}' "/proc/$pid/status")
  # User and system CPU time of the relay, in clock ticks.
  cpu_ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  awk -v i="$i" -v r="$rss_kib" -v t="$cpu_ticks" -v hz="$hz" -v n="$messages" \
    'BEGIN { printf "relay %d: peak RSS %d MiB, CPU %.1f s = %.0f us per message (of all %d)\n", i, r / 1024, t / hz, t / hz / n * 1e6, n }'
done
# The store server's work per message, from the counters' deltas.
if [ -n "$after" ]; then
  awk -v n="$messages" -v hz="$hz" -v b="$backend" '
    NR == FNR { was[$1] = $2; next }
    { d = $2 - was[$1] }
    $1 == "mariadbd_cpu_ticks" { printf "mariadbd CPU: %.1f s = %.0f us per message\n", d / hz, d / hz / n * 1e6; next }
    $1 == "postgres_cpu_ticks" { printf "PostgreSQL CPU: %.1f s = %.0f us per message\n", d / hz, d / hz / n * 1e6; next }
    b == "mysql" || b == "postgres" { printf "%s: %d = %.2f per message\n", $1, d, d / n; next }
    d > 0 { printf "DynamoDB %s: %d = %.2f round trips per message\n", $1, d, d / n }' <(echo "$before") <(echo "$after")
fi
