#!/usr/bin/env bash
# Fleet benchmark: does a second relay on the shared store add throughput?
# It runs contrib/bench/load.sh end to end (-d) with one relay and with
# RELAYS relays, in pairs, the order flipped each pair (so that a slow
# drift of the machine favours neither), and prints each run, the ratio of
# each pair (RELAYS relays / one) and their mean and median. A single pair
# says little: on a 2-core machine two runs of the same tree differ by
# 10 % or more.
#
#   contrib/bench/fleet.sh [-n PAIRS] [-r RELAYS] [load.sh options: -b mysql -m 10000 -c 0.5 ...]
#
# -n is the number of pairs (3), -r the relays of the second run of a pair
# (2). The other options go to both runs, -b included (mysql by default):
# -c CPUS gives every relay a CPU budget of its own, as sidecars have; without
# it, the relays, the store and the load share the machine's cores. With
# -b bolt the relays share no store (each has a bbolt outbox of its own):
# the control, what a second process costs or wins on the machine.
#
# Each run works in a directory of its own under the current one, removed at
# its end: run it from the filesystem's root (cd /) so that each is a new
# top-level directory, which load.sh's ext4 note asks for.
set -euo pipefail

# MySQL unless the options say otherwise: load.sh takes the last -b.
pairs=3 relays=2 args=(-b mysql)
while [ $# -gt 0 ]; do
  case $1 in
    -n) pairs=$2; shift 2 ;;
    -r) relays=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
load=$(cd "$(dirname "$0")" && pwd)/load.sh

# run R prints one summary line of load.sh -d -r R: messages per second end
# to end, the CPU per message of the relays together and of the store's
# server, commits and statements per message (MySQL), and whether every
# message reached the sink exactly once.
run() {
  local dir out
  dir=$(mktemp -d "$PWD/postino-fleet.XXXXXX")
  chmod 711 "$dir" # smtp-sink's user goes through it (load.sh)
  out=$(cd "$dir" && "$load" -d -r "$1" "${args[@]}" 2>&1) || { echo "$out" >&2; rmdir "$dir"; return 1; }
  rmdir "$dir"
  echo "$out" | awk -v r="$1" '
    /^delivered end to end:/ { rate = $(NF - 1) }
    /^at the sink:/ { once = ($0 ~ /: exactly once$/) ? "exactly once" : "NOT EXACTLY ONCE" }
    /^relay [0-9]+:/ { match($0, /= [0-9]+ us per message/); relay += substr($0, RSTART + 2, RLENGTH - 17) }
    / CPU: .* us per message$/ && !/^relay/ { match($0, /= [0-9]+ us per message/); server = substr($0, RSTART + 2, RLENGTH - 17) }
    /^Com_commit:/ { commits = $(NF - 2) }
    /^Questions:/ { questions = $(NF - 2) }
    END {
      line = sprintf("relays=%d %5d msg/s  relay CPU %5d us/msg", r, rate, relay)
      if (server != "") line = line sprintf("  server CPU %5d us/msg", server)
      if (commits != "") line = line sprintf("  commits %s  statements %s /msg", commits, questions)
      print line "  " once
    }'
}

ratios=() lost=0
for i in $(seq "$pairs"); do
  # The order flips each pair.
  if [ $((i % 2)) -eq 1 ]; then order=(1 "$relays"); else order=("$relays" 1); fi
  for r in "${order[@]}"; do
    line=$(run "$r")
    echo "pair $i: $line"
    [[ $line == *"NOT EXACTLY ONCE" ]] && lost=$((lost + 1))
    rate=$(echo "$line" | awk '{ print $2 }')
    if [ "$r" -eq 1 ]; then one=$rate; else many=$rate; fi
  done
  ratio=$(awk -v a="$many" -v b="$one" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$ratio")
  echo "pair $i: $relays relays / 1 = $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v r="$relays" '
  { v[NR] = $1; sum += $1 }
  END {
    median = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%d relays / 1 over %d pairs: mean %.2f, median %.2f, from %.2f to %.2f\n", r, NR, sum / NR, median, v[1], v[NR]
  }'
# A run that lost or repeated a message measured something else: the
# figures stand, but the script fails.
if [ "$lost" -gt 0 ]; then
  echo "$lost run(s) did not deliver every message exactly once: see the lines above" >&2
  exit 1
fi
