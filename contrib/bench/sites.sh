#!/usr/bin/env bash
# Many-destinations benchmark: a fresh relay (bbolt outbox) delivers by MX
# to DOMAINS recipient domains (d0.test, d1.test, ...) served by SITES sites,
# each site one MX host on an address of its own (127.0.1.1, 127.0.1.2, ...;
# domain d's host is mx<d % SITES>.test), all answered by a DNS server on
# loopback (contrib/bench/mxrig dns, the relay's delivery.dns.servers) and
# received by one sink listening on every address (mxrig sink, on the port
# of delivery.mx_port). The sites keep the shipped rules (a careful
# default: sessions at once delivery.mx_connections, 100 messages a
# session, 60 new connections a minute, 200 waiting), or those of -f FILE
# (delivery.sites.file).
#
#   contrib/bench/sites.sh [-m MESSAGES] [-n DOMAINS] [-S SITES] [-s SESSIONS] [-l BYTES] [-f SITES_FILE]
#
# The load is mxrig send: SESSIONS sessions at once, message i to
# user@d<i % DOMAINS>.test, one recipient each, so that every site's mail
# comes spread over the whole load, as a newsletter's does. It prints:
# - the throughput, from the first message accepted (its 250) to the last
#   delivered (postino_delivery_delivered_total reaching MESSAGES);
# - the claims per message: how many times a message was taken for
#   delivery (READY to PROCESSING), counted by how each claim ended, from
#   the relay's metrics (postino_delivery_delivered_total, _failed_total,
#   _deferred_total and postino_site_handed_back_total: the relay has no
#   counter of claims itself); 1.00 is one claim each, a hand-back (a site
#   full, or its rate) costs one more;
# - the most sessions open at once to one site, as the sink saw them;
# - whether every message reached the sink exactly once (by the
#   X-Genro-Mail-ID the relay adds).
#
# 10,000 messages to 1,000 domains on 50 sites are the defaults. The
# relay and its data live in a temporary directory under the current one,
# removed at the end (load.sh's note on ext4 applies).
set -euo pipefail

messages=10000 domains=1000 sites=50 sessions=20 length=4096 rules=
while getopts "m:n:S:s:l:f:" opt; do
  case $opt in
    m) messages=$OPTARG ;;
    n) domains=$OPTARG ;;
    S) sites=$OPTARG ;;
    s) sessions=$OPTARG ;;
    l) length=$OPTARG ;;
    f) rules=$(realpath "$OPTARG") ;;
    *) echo "usage: $0 [-m messages] [-n domains] [-S sites] [-s sessions] [-l bytes] [-f sites file]" >&2; exit 2 ;;
  esac
done
if [ "$sites" -lt 1 ] || [ "$sites" -gt 254 ] || [ "$domains" -lt "$sites" ]; then
  echo "-S takes 1 to 254 sites (127.0.1.1 to 127.0.1.254), and -n at least as many domains" >&2
  exit 2
fi

root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/contrib/bench/lib.sh"
work=$(mktemp -d "$PWD/postino-sites.XXXXXX")
relay= sink= dns=
trap 'kill $relay $sink $dns 2>/dev/null || true; wait $relay $sink $dns 2>/dev/null || true; rm -rf "$work"' EXIT

(cd "$root" && go build -o "$work/postino" ./cmd/postino && go build -o "$work/mxrig" ./contrib/bench/mxrig)
# started PID FILE NAME says whether the process wrote its first line to
# FILE, and stops the script when it has exited.
started() {
  kill -0 "$1" 2>/dev/null || { echo "$3 exited" >&2; exit 1; }
  [ -s "$2" ]
}

ips=()
for s in $(seq 0 $((sites - 1))); do ips+=("127.0.1.$((s + 1))"); done
{
  echo "; The root zone's NS: the relay asks it when a lookup fails."
  echo ". 300 IN NS a.root-servers.net."
  for s in "${!ips[@]}"; do echo "mx$s.test. 300 IN A ${ips[$s]}"; done
  for d in $(seq 0 $((domains - 1))); do echo "d$d.test. 300 IN MX 10 mx$((d % sites)).test."; done
} >"$work/zone"
"$work/mxrig" dns -zone "$work/zone" >"$work/dns.out" &
dns=$!
"$work/mxrig" sink "${ips[@]}" >"$work/sink.out" &
sink=$!
wait_for started "$dns" "$work/dns.out" "mxrig dns"
wait_for started "$sink" "$work/sink.out" "mxrig sink"

smtp=127.0.0.1:$(free_port) admin=127.0.0.1:$(free_port)
POSTINO_DELIVERY_DNS_SERVERS=$(cat "$work/dns.out") POSTINO_DELIVERY_MX_PORT=$(head -1 "$work/sink.out") \
  POSTINO_DELIVERY_SITES_FILE=$rules POSTINO_HOSTNAME=bench-relay.test \
  "$work/postino" serve --data "$work/var" --listen "$smtp" --admin "$admin" 2>"$work/serve.log" &
relay=$!
ready() {
  kill -0 "$relay" 2>/dev/null || { echo "the relay exited:" >&2; cat "$work/serve.log" >&2; exit 1; }
  curl -sf "http://$admin/readyz" -o /dev/null
}
wait_for ready

# metric NAME sums a metric's series.
metric() { curl -sf "http://$admin/metrics" | awk -v name="$1" '$1 == name || index($1, name "{") == 1 { n += $2 } END { print n + 0 }'; }
"$work/mxrig" send -s "$sessions" -m "$messages" -l "$length" -domains "$domains" -to 'user@d%d.test' "$smtp" >"$work/send.out"
# Every message ends SENT or FAILED; a failure is counted, not waited for.
ended() { [ $(($(metric postino_delivery_delivered_total) + $(metric postino_delivery_failed_total))) -ge "$messages" ]; }
wait_for ended
last=$(date +%s.%N)
stats=$(curl -sf "http://$admin/metrics")
kill -TERM "$sink"
wait "$sink" || true
sink=

first=$(awk '/^first accepted at / { print $4 }' "$work/send.out")
sum() { echo "$stats" | awk -v name="$1" '$1 == name || index($1, name "{") == 1 { n += $2 } END { print n + 0 }'; }
delivered=$(sum postino_delivery_delivered_total) failed=$(sum postino_delivery_failed_total)
deferred=$(sum postino_delivery_deferred_total) handed=$(sum postino_site_handed_back_total)
throttled=$(sum postino_site_throttled_total)

echo "messages=$messages domains=$domains sites=$sites sessions=$sessions size=${length}B rules=${rules:-shipped}"
sed -n 's/^sent /accepted: /p' "$work/send.out"
awk -v n="$delivered" -v s="$first" -v e="$last" 'BEGIN { printf "delivered: %d in %.2f s = %.0f msg/s (first accepted to last delivered)\n", n, e - s, n / (e - s) }'
[ "$failed" -eq 0 ] || echo "FAILED: $failed messages (see $work/serve.log, kept: remove it)" >&2
awk -v d="$delivered" -v f="$failed" -v r="$deferred" -v h="$handed" -v n="$messages" 'BEGIN {
  printf "claims: %d = %.2f per message (%d ended SENT, %d FAILED, %d deferred, %d handed back)\n", d + f + r + h, (d + f + r + h) / n, d, f, r, h }'
echo "throttling signals: $throttled"
sed -n 's/^sink sessions: /sessions: /p' "$work/sink.out"
awk -v want="$messages" '/^sink messages: / {
    gsub(",", ""); distinct = $5; dup = $8
    printf "at the sink: %d distinct messages, %d duplicate deliveries (want %d and 0): %s\n", distinct, dup, want,
      (distinct == want && dup == 0) ? "exactly once" : "NOT exactly once" }' "$work/sink.out"
pid=$relay
awk -v r="$(awk '/^VmHWM:/{print $2}' "/proc/$pid/status")" -v t="$(awk '{print $14 + $15}' "/proc/$pid/stat")" -v hz="$(getconf CLK_TCK)" -v n="$messages" \
  'BEGIN { printf "relay: peak RSS %d MiB, CPU %.1f s = %.0f us per message\n", r / 1024, t / hz, t / hz / n * 1e6 }'
if [ "$failed" -ne 0 ]; then
  trap - EXIT
  kill $relay $dns 2>/dev/null || true
  exit 1
fi
