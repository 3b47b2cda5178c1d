# Shared by .ci/deps and .ci/with-dynamodb (sourced, not run).

cache=${TEST_POSTINO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/postino-test}
mkdir -p "$cache"
jar_dir=$cache/node_modules/amplify-dynamodb-simulator/emulator

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_up() {
  for _ in $(seq 120); do up "$1" && return 0; sleep 0.5; done
  echo "$2 did not come up on port $1" >&2
  return 1
}

dynamodb_install() {
  if [ ! -f "$jar_dir/DynamoDBLocal.jar" ]; then
    echo "installing DynamoDB Local into $cache"
    (cd "$cache" && npm install --no-audit --no-fund --loglevel=error amplify-dynamodb-simulator >/dev/null)
  fi
}

# dynamodb_start PORT LOG starts an in-memory DynamoDB Local in the
# background and leaves its pid in dynamodb_pid. Java alone is left running
# (exec), its output to LOG and its input from /dev/null, so that nothing
# left behind holds the caller's output: `.ci/deps | tail` ends when the
# script does.
dynamodb_start() {
  (cd "$jar_dir" && exec nohup java -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
      -inMemory -port "$1") >"$2" 2>&1 </dev/null &
  dynamodb_pid=$!
}

# postgres_start starts the machine's PostgreSQL cluster unless it answers
# on 127.0.0.1 already. Its errors are shown: a cluster that will not start
# fails the caller.
postgres_start() {
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  [ -n "$version" ] || { echo "no PostgreSQL cluster in /etc/postgresql" >&2; return 1; }
  if ! pg_isready -q -h 127.0.0.1; then
    echo "starting PostgreSQL $version"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
    wait_up 5432 PostgreSQL
  fi
  postgres_connections "$version"
}

# postgres_connections raises the cluster's max_connections to
# PG_MAX_CONNECTIONS (restarting it once) when it is lower: every store,
# relay and submissions reader of a test holds a pool, and two make test
# at once went past the default of 100 ("too many clients already").
PG_MAX_CONNECTIONS=${PG_MAX_CONNECTIONS:-500}
postgres_connections() {
  local now
  now=$(su postgres -c "psql -XAtqc 'SHOW max_connections'")
  [ "$now" -ge "$PG_MAX_CONNECTIONS" ] && return 0
  echo "PostgreSQL max_connections $now -> $PG_MAX_CONNECTIONS (restart)"
  su postgres -c "psql -Xqc 'ALTER SYSTEM SET max_connections = $PG_MAX_CONNECTIONS'"
  pg_ctlcluster --skip-systemctl-redirect "$1" main restart
  wait_up 5432 PostgreSQL
}

# mariadb_connections raises MariaDB's max_connections to
# MARIADB_MAX_CONNECTIONS when it is lower.
MARIADB_MAX_CONNECTIONS=${MARIADB_MAX_CONNECTIONS:-500}
mariadb_connections() {
  local now
  now=$(mysql -uroot -h127.0.0.1 -NBe 'SELECT @@max_connections')
  [ "$now" -ge "$MARIADB_MAX_CONNECTIONS" ] && return 0
  echo "MariaDB max_connections $now -> $MARIADB_MAX_CONNECTIONS"
  mysql -uroot -h127.0.0.1 -e "SET GLOBAL max_connections = $MARIADB_MAX_CONNECTIONS"
}
