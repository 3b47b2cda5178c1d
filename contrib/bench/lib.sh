# Shell helpers the benchmark scripts share; they source it.

# free_port [IP] prints a TCP port free on IP (127.0.0.1 by default).
free_port() { python3 -c 'import socket, sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "${1:-127.0.0.1}"; }

# wait_for CMD... runs CMD until it succeeds, for at most ten minutes.
wait_for() {
  local deadline=$((SECONDS + 600))
  until "$@"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "gave up after ten minutes waiting for: $*" >&2
      exit 1
    fi
    sleep 0.05
  done
}
