#!/usr/bin/env bash
# Load benchmark: Postfix's smtp-source loads a fresh relay (bbolt outbox,
# every message fsync'd before its 250) and the script prints accepted
# messages per second, accept latency percentiles (from the relay's own
# histogram), the relay's peak resident memory and its CPU time per message. With -d the relay
# delivers to Postfix's smtp-sink as its smarthost, and the script also
# prints end-to-end messages per second, first accepted to last delivered.
#
#   contrib/bench/load.sh [-d] [-b bolt|mysql|dynamodb] [-s SESSIONS] [-m MESSAGES] [-l BYTES]
#
# -b mysql uses a fresh database on the server of TEST_POSTINO_MYSQL_DSN
# (root@tcp(127.0.0.1:3306)/ by default); -b dynamodb a fresh table on the
# DynamoDB Local of TEST_POSTINO_DYNAMODB_ENDPOINT (make deps starts one).
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

sessions=20 messages=10000 length=4096 deliver= backend=bolt
while getopts "db:s:m:l:" opt; do
  case $opt in
    d) deliver=1 ;;
    b) backend=$OPTARG ;;
    s) sessions=$OPTARG ;;
    m) messages=$OPTARG ;;
    l) length=$OPTARG ;;
    *) echo "usage: $0 [-d] [-b bolt|mysql|dynamodb] [-s sessions] [-m messages] [-l bytes]" >&2; exit 2 ;;
  esac
done

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
work=$(mktemp -d "$PWD/postino-bench.XXXXXX")
pid= sink= cleanup=
trap 'kill $pid $sink 2>/dev/null || true; wait $pid $sink 2>/dev/null || true; eval "$cleanup"; rm -rf "$work"' EXIT

(cd "$root" && go build -o "$work/postino" ./cmd/postino)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
smtp=127.0.0.1:$(free_port)
admin=127.0.0.1:$(free_port)
upstream=()
if [ -n "$deliver" ]; then
  sinkaddr=127.0.0.1:$(free_port)
  "$sink_bin" -u postfix "$sinkaddr" 1024 &
  sink=$!
  upstream=(--smarthost "$sinkaddr")
else
  # Accept only: delivery is paused, messages wait in READY.
  export POSTINO_DELIVERY_PAUSED=true
fi
store=()
case $backend in
  bolt) ;;
  mysql)
    base=${TEST_POSTINO_MYSQL_DSN:-root@tcp(127.0.0.1:3306)/}
    db=postino_bench_$$
    mysql -uroot -h127.0.0.1 -e "CREATE DATABASE $db"
    cleanup="mysql -uroot -h127.0.0.1 -e 'DROP DATABASE $db'"
    "$work/postino" migrate --backend mysql --dsn "$base$db" >/dev/null
    store=(--backend mysql --dsn "$base$db")
    ;;
  dynamodb)
    export AWS_ENDPOINT_URL=${TEST_POSTINO_DYNAMODB_ENDPOINT:-http://127.0.0.1:8000}
    export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-postino} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-postino} AWS_REGION=${AWS_REGION:-us-east-1}
    "$work/postino" dynamodb create-table --table "postino_bench_$$" >/dev/null
    store=(--backend dynamodb --table "postino_bench_$$")
    ;;
  *) echo "unknown backend $backend" >&2; exit 2 ;;
esac
"$work/postino" serve --data "$work/var" --listen "$smtp" --admin "$admin" "${upstream[@]}" "${store[@]}" 2>"$work/serve.log" &
pid=$!
for _ in $(seq 100); do
  curl -sf "http://$admin/readyz" >/dev/null && break
  sleep 0.1
done

start=$(date +%s.%N)
"$source_bin" -s "$sessions" -l "$length" -m "$messages" -f app@example.com -t user@example.net "$smtp"
end=$(date +%s.%N)
if [ -n "$deliver" ]; then
  delivered=0
  while [ "$delivered" -lt "$messages" ]; do
    sleep 0.05
    delivered=$(curl -sf "http://$admin/metrics" | awk '/^postino_delivery_delivered_total/{n += $2} END {print n + 0}')
  done
  last=$(date +%s.%N)
fi

metrics=$(curl -sf "http://$admin/metrics")
accepted=$(echo "$metrics" | awk '/^postino_intake_accepted_total /{print $2}')
rss_kib=$(awk '/^VmHWM:/{print $2}' "/proc/$pid/status")
# User and system CPU time of the relay, in clock ticks.
cpu_ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")

echo "store=$backend sessions=$sessions messages=$messages size=${length}B"
awk -v n="$accepted" -v s="$start" -v e="$end" 'BEGIN { printf "accepted: %d in %.2f s = %.0f msg/s\n", n, e - s, n / (e - s) }'
if [ -n "$deliver" ]; then
  awk -v n="$messages" -v s="$start" -v e="$last" 'BEGIN { printf "delivered end to end: %d in %.2f s = %.0f msg/s\n", n, e - s, n / (e - s) }'
fi
# Percentiles from the cumulative histogram, interpolated inside a bucket.
echo "$metrics" | awk '
  /^postino_intake_accept_seconds_bucket/ {
    match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5)
    if (le == "+Inf") le = 1e9
    n++; bound[n] = le + 0; cum[n] = $2 + 0
  }
  END {
    total = cum[n]
    split("0.5 0.9 0.99 0.999", qs, " ")
    line = "accept latency:"
    for (i = 1; i <= 4; i++) {
      want = qs[i] * total; lo = 0; prev = 0
      for (j = 1; j <= n; j++) {
        if (cum[j] >= want) {
          frac = (cum[j] == prev) ? 0 : (want - prev) / (cum[j] - prev)
          v = lo + frac * (bound[j] - lo); break
        }
        lo = bound[j]; prev = cum[j]
      }
      line = line sprintf(" p%s %.1f ms", qs[i] * 100, v * 1000)
    }
    print line
  }'
echo "peak RSS: $((rss_kib / 1024)) MiB"
awk -v t="$cpu_ticks" -v hz="$(getconf CLK_TCK)" -v n="$messages" \
  'BEGIN { printf "relay CPU: %.1f s = %.0f us per message\n", t / hz, t / hz / n * 1e6 }'
