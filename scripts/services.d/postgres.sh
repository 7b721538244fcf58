# PostgreSQL for the tests: DATABASE_URL (default
# postgres://postgres@127.0.0.1:5432/test, trust auth for that user from this
# machine). When nothing answers there and the host is this machine, the
# Debian cluster on that port is configured and started, and the server is
# installed from Debian's packages first when it is missing. What is changed
# on such a cluster, and nothing else:
#   - pg_hba.conf gains, at its top, trust lines for the URL's user from
#     127.0.0.1 and ::1 (databases and replication), marked "consumer-rs";
#   - conf.d/consumer-rs.conf sets wal_level = logical (the Debezium test
#     reads the outbox from the WAL) and room for replication slots;
#   - the URL's database is created when it does not exist.
# shellcheck shell=bash

pg_url="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"

# postgres://user[:password]@host[:port]/db[?params]
pg_rest="${pg_url#*://}"
pg_userinfo=""; case "$pg_rest" in *@*) pg_userinfo="${pg_rest%%@*}"; pg_rest="${pg_rest#*@}" ;; esac
pg_user="${pg_userinfo%%:*}"; pg_user="${pg_user:-postgres}"
pg_hostport="${pg_rest%%/*}"
pg_db="${pg_rest#*/}"; pg_db="${pg_db%%\?*}"; [ "$pg_db" = "$pg_rest" ] && pg_db=test
pg_host="${pg_hostport%:*}"; pg_port="${pg_hostport##*:}"
[ "$pg_port" = "$pg_hostport" ] && pg_port=5432
# The same server and credentials, database `postgres`: for creating the
# URL's database.
pg_admin_url="${pg_url%%/${pg_db}*}/postgres"

pg_answers() { pg_isready -q -h "$pg_host" -p "$pg_port" -t 2 >/dev/null 2>&1; }
pg_up() { PGCONNECT_TIMEOUT=5 timeout 10 psql "$pg_url" -qAtc 'select 1' >/dev/null 2>&1; }

# The Debian cluster (version and name) listening on the URL's port, if any.
pg_cluster() {
  command -v pg_lsclusters >/dev/null || return 1
  pg_lsclusters -h 2>/dev/null | awk -v port="$pg_port" '$3 == port { print $1, $2; exit }'
}

pg_install() {
  can_install_packages \
    || die "PostgreSQL is not installed here and this user cannot install it (no root, no passwordless sudo): install the postgresql package (or start a server and set DATABASE_URL), then run this again."
  say "PostgreSQL is not installed: installing it from Debian's packages (postgresql)"
  local t0; t0="$(now)"
  apt_install postgresql postgresql-client \
    || die "apt-get could not install postgresql (its output ends above): install PostgreSQL by hand, or set DATABASE_URL to a running server."
  say "PostgreSQL installed in $(since "$t0")"
}

# Trust for the URL's user from this machine, and logical decoding.
pg_configure() {
  local version="$1" name="$2" conf="/etc/postgresql/$1/$2"
  [ -d "$conf" ] || return 0
  if ! grep -q 'consumer-rs' "$conf/pg_hba.conf" 2>/dev/null; then
    say "PostgreSQL $version/$name: trusting user $pg_user from this machine (pg_hba.conf, marked consumer-rs)"
    local tmp; tmp="$(mktemp)"
    {
      echo "# consumer-rs test services (scripts/services): user $pg_user from this machine, no password"
      for what in all replication; do
        printf 'host    %-15s %-15s %-23s trust\n' "$what" "$pg_user" 127.0.0.1/32
        printf 'host    %-15s %-15s %-23s trust\n' "$what" "$pg_user" ::1/128
      done
      cat "$conf/pg_hba.conf"
    } >"$tmp"
    as_root cp "$tmp" "$conf/pg_hba.conf" || { rm -f "$tmp"; return 1; }
    rm -f "$tmp"
  fi
  if [ ! -f "$conf/conf.d/consumer-rs.conf" ]; then
    local tmp; tmp="$(mktemp)"
    cat >"$tmp" <<'CONF'
# consumer-rs test services (scripts/services): the outbox's CDC test reads
# the WAL through a logical replication slot (Debezium, pgoutput).
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
# Each test binary runs its tests two at a time, each with a pool.
max_connections = 200
CONF
    as_root mkdir -p "$conf/conf.d" && as_root cp "$tmp" "$conf/conf.d/consumer-rs.conf" && as_root chmod 644 "$conf/conf.d/consumer-rs.conf"
    rm -f "$tmp"
  fi
}

pg_start_cluster() {
  local version="$1" name="$2"
  local t0; t0="$(now)"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start >&2 \
    || die "pg_ctlcluster could not start PostgreSQL $version/$name (see /var/log/postgresql/postgresql-$version-$name.log): fix that, or set DATABASE_URL to a running server."
  wait_until 30 pg_answers \
    || die "PostgreSQL $version/$name was started but does not answer on $pg_host:$pg_port within 30 s (see /var/log/postgresql/postgresql-$version-$name.log)."
  echo "$version $name" >"$services_dir/postgres.started"
  say "PostgreSQL $version/$name started in $(since "$t0") on $pg_host:$pg_port"
}

# Stops the cluster this script started (pg_ctlcluster waits until it has
# stopped); a server it found running is left alone.
stop_postgres() {
  local f="$services_dir/postgres.started"
  [ -f "$f" ] || return 0
  # shellcheck disable=SC2046
  set -- $(cat "$f")
  rm -f "$f"
  say "stopping PostgreSQL $1/$2"
  as_root pg_ctlcluster --skip-systemctl-redirect "$1" "$2" stop -m fast >&2 || say "pg_ctlcluster could not stop PostgreSQL $1/$2"
}

pg_create_database() {
  pg_up && return 0
  psql "$pg_admin_url" -qAtc "select 1" >/dev/null 2>&1 \
    || die "PostgreSQL answers on $pg_host:$pg_port but refuses user $pg_user (database postgres): give that user trust or password access from this machine, or set DATABASE_URL to credentials that work."
  say "creating database $pg_db"
  psql "$pg_admin_url" -qAtc "CREATE DATABASE \"$pg_db\"" >/dev/null \
    || die "could not create database $pg_db on $pg_host:$pg_port as $pg_user: create it by hand, or point DATABASE_URL at an existing one."
  pg_up || die "PostgreSQL database $pg_db was created but $pg_url still does not answer."
}

ensure_postgres() {
  if use_docker; then
    pg_answers || { compose_up postgres; wait_until 60 pg_answers || die "the docker compose PostgreSQL does not answer on $pg_host:$pg_port within 60 s."; }
    wait_until 30 pg_up || pg_create_database
    say "PostgreSQL is up at $pg_url (docker compose)"
    return
  fi
  if pg_up; then say "PostgreSQL is up at $pg_url"; return; fi
  command -v psql >/dev/null || {
    is_local_host "$pg_host" && can_install_packages && pg_install
    command -v psql >/dev/null || die "the PostgreSQL client (psql) is not installed: install postgresql-client, and run a PostgreSQL server reachable at $pg_url (or set DATABASE_URL)."
  }
  if ! is_local_host "$pg_host"; then
    pg_answers && pg_create_database && return
    die "PostgreSQL does not answer at $pg_host:$pg_port (DATABASE_URL): start it, or unset DATABASE_URL to have a local one installed and started."
  fi

  local cluster; cluster="$(pg_cluster || true)"
  if [ -z "$cluster" ] && ! pg_answers; then
    if ! command -v pg_ctlcluster >/dev/null || [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
      if can_install_packages; then
        pg_install
      elif docker_engine_up; then
        CONSUMER_SERVICES=docker ensure_postgres
        return
      else
        die "PostgreSQL is not installed here, this user cannot install it (no root, no passwordless sudo) and no Docker engine answers: install the postgresql package, or run docker compose up -d postgres, or set DATABASE_URL to a running server."
      fi
    fi
    cluster="$(pg_cluster || true)"
    if [ -z "$cluster" ]; then
      local version; version="$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -n 1)"
      [ -n "$version" ] || die "no PostgreSQL server binaries under /usr/lib/postgresql after installing: install postgresql by hand, or set DATABASE_URL."
      say "creating PostgreSQL cluster $version/consumer on port $pg_port"
      as_root pg_createcluster "$version" consumer -p "$pg_port" >&2 \
        || die "pg_createcluster could not make a cluster on port $pg_port (see above): free the port, or set DATABASE_URL."
      cluster="$version consumer"
    fi
  fi

  if [ -n "$cluster" ]; then
    # shellcheck disable=SC2086
    set -- $cluster
    if as_root true 2>/dev/null; then
      pg_configure "$1" "$2" || say "could not write PostgreSQL's configuration (not root?); continuing with what it has"
    fi
    if pg_answers; then
      # Running, but refusing us: the trust lines were just added.
      as_root pg_ctlcluster --skip-systemctl-redirect "$1" "$2" reload >/dev/null 2>&1 || true
    else
      pg_start_cluster "$1" "$2"
    fi
  fi
  wait_until 10 pg_answers || die "PostgreSQL does not answer at $pg_host:$pg_port and there is no Debian cluster on that port to start: start PostgreSQL there, or set DATABASE_URL."
  pg_create_database
  say "PostgreSQL is up at $pg_url"
}

# The Debezium test reads the WAL: wal_level must be logical. A local
# cluster the script manages is configured and restarted when it is not.
ensure_postgres_logical() {
  local level; level="$(psql "$pg_url" -qAtc 'show wal_level' 2>/dev/null || true)"
  [ "$level" = logical ] && return 0
  local cluster; cluster="$(pg_cluster || true)"
  if is_local_host "$pg_host" && [ -n "$cluster" ] && as_root true 2>/dev/null; then
    # shellcheck disable=SC2086
    set -- $cluster
    say "PostgreSQL runs with wal_level=$level; the CDC test needs logical: restarting $1/$2 with conf.d/consumer-rs.conf"
    pg_configure "$1" "$2"
    as_root pg_ctlcluster --skip-systemctl-redirect "$1" "$2" restart >&2 || die "pg_ctlcluster could not restart PostgreSQL $1/$2."
    wait_until 30 pg_up || die "PostgreSQL $1/$2 does not answer after its restart."
    return 0
  fi
  die "PostgreSQL at $pg_host:$pg_port runs with wal_level=$level, and the outbox's CDC test (Debezium) needs wal_level=logical: set it in postgresql.conf and restart the server."
}

sweep_postgres() {
  # Schemas left by earlier test runs: each test makes its own ct_* schema
  # (benchmarks bench_*), a failing test keeps its own for a look, and some
  # harnesses never drop theirs. Thousands of them (each with the store's
  # tables) slow every catalog query of the runs that follow. A test
  # schema's id is a UUID v7 whose first 48 bits are its creation time in
  # ms: only those older than SWEEP_OLDER_THAN_HOURS (6: no run lasts that
  # long) go, so a run beside this one on the same database keeps its own;
  # ids that are not v7 predate the time-ordered names and go too. Dropped
  # twenty per transaction: one transaction dropping thousands runs out of
  # lock slots (max_locks_per_transaction), which left every schema of
  # every run in place before.
  local hours="${SWEEP_OLDER_THAN_HOURS:-6}" old batch sql s n
  old="$(psql "$pg_url" -qAt -c "
    SELECT nspname FROM pg_namespace
    WHERE nspname ~ '^(ct|bench)[a-z0-9_]*_[0-9a-f]{32}\$'
      AND (substr(right(nspname, 32), 13, 1) <> '7'
           OR ('x' || lpad(left(right(nspname, 32), 12), 16, '0'))::bit(64)::bigint
              < (extract(epoch FROM now() - interval '$hours hours') * 1000)::bigint)" 2>/dev/null || true)"
  if [ -n "$old" ]; then
    n="$(printf '%s\n' "$old" | wc -l)"
    say "dropping $n test schema(s) older than $hours h that earlier runs left"
    while read -r batch; do
      sql=""
      for s in $batch; do sql="$sql DROP SCHEMA IF EXISTS \"$s\" CASCADE;"; done
      psql "$pg_url" -qAt -c "SET client_min_messages = warning; BEGIN; $sql COMMIT;" >/dev/null 2>&1 \
        || say "could not drop some old test schemas ($batch)"
    done < <(printf '%s\n' "$old" | xargs -n 20)
  fi
  # The replication slots the CDC test made.
  psql "$pg_url" -qAt >/dev/null 2>&1 <<'SQL' || true
DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'ct\_%' AND NOT active LOOP
    PERFORM pg_drop_replication_slot(s);
  END LOOP;
END $$;
SQL
}

# Role consumer_tls runs a query over TLS, the server's certificate checked
# against the test CA and its name (sslmode=verify-full).
pg_tls_up() {
  PGPASSWORD="$(tls_password)" PGCONNECT_TIMEOUT=5 timeout 10 psql \
    "host=127.0.0.1 port=$pg_port dbname=$pg_db user=$tls_user sslmode=verify-full sslrootcert=$tls_dir/ca.pem" \
    -qAtc 'select 1' >/dev/null 2>&1
}

# TLS beside the plain connections, on a local Debian cluster this script
# configures: conf.d/consumer-rs-tls.conf sets ssl = on with the test CA's
# server certificate (scripts/services.d/tls.sh, copied to
# consumer-rs-tls/ in the cluster's configuration directory) and that CA
# for client certificates (checked when a client sends one); pg_hba.conf
# gains, at its top, lines marked "TLS-only role" that let role
# consumer_tls in over TLS only, with its password (scram-sha-256), and
# refuse it without TLS. The role gets the test password and may create
# schemas in the URL's database. A reload applies it all: no restart.
ensure_postgres_tls() {
  local cluster; cluster="$(pg_cluster || true)"
  if use_docker || ! is_local_host "$pg_host" || [ -z "$cluster" ] || ! as_root true 2>/dev/null; then
    say "PostgreSQL's TLS settings are made on a local Debian cluster only (not with DATABASE_URL elsewhere or docker compose): the secured-connection tests need TLS and role $tls_user on $pg_host:$pg_port"
    return 0
  fi
  # shellcheck disable=SC2086
  set -- $cluster
  local conf="/etc/postgresql/$1/$2" changed=0
  ensure_tls_material
  tls_install_for "$conf/consumer-rs-tls" postgres \
    || die "could not copy the TLS files to $conf/consumer-rs-tls for PostgreSQL: run this script as root or with passwordless sudo."
  local tmp; tmp="$(mktemp)"
  cat >"$tmp" <<CONF
# consumer-rs test services (scripts/services): TLS with the test CA's
# certificates (scripts/services.d/tls.sh), beside plain connections.
ssl = on
ssl_cert_file = '$conf/consumer-rs-tls/server.pem'
ssl_key_file = '$conf/consumer-rs-tls/server.key'
ssl_ca_file = '$conf/consumer-rs-tls/ca.pem'
CONF
  if ! as_root cmp -s "$tmp" "$conf/conf.d/consumer-rs-tls.conf"; then
    as_root mkdir -p "$conf/conf.d" && as_root cp "$tmp" "$conf/conf.d/consumer-rs-tls.conf" \
      && as_root chmod 644 "$conf/conf.d/consumer-rs-tls.conf" || { rm -f "$tmp"; die "could not write $conf/conf.d/consumer-rs-tls.conf."; }
    changed=1
  fi
  # (A marker without "consumer-rs", which pg_configure looks for.)
  if ! grep -q "TLS-only role $tls_user" "$conf/pg_hba.conf" 2>/dev/null; then
    {
      echo "# TLS-only role $tls_user of the secured-connection tests (scripts/services): over TLS only, with its password"
      for net in 127.0.0.1/32 ::1/128; do
        printf 'hostnossl %-13s %-15s %-23s reject\n' all "$tls_user" "$net"
        printf 'hostssl   %-13s %-15s %-23s scram-sha-256\n' all "$tls_user" "$net"
      done
      cat "$conf/pg_hba.conf"
    } >"$tmp"
    as_root cp "$tmp" "$conf/pg_hba.conf" || { rm -f "$tmp"; die "could not write $conf/pg_hba.conf."; }
    changed=1
  fi
  rm -f "$tmp"
  # The password goes on standard input, not on a command line.
  psql "$pg_url" -qAt -v ON_ERROR_STOP=1 >/dev/null <<SQL || die "could not set up role $tls_user on PostgreSQL at $pg_host:$pg_port."
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$tls_user') THEN
    CREATE ROLE $tls_user LOGIN;
  END IF;
END \$\$;
ALTER ROLE $tls_user PASSWORD '$(tls_password)';
GRANT CONNECT, CREATE ON DATABASE "$pg_db" TO $tls_user;
SQL
  if [ "$changed" -eq 1 ]; then
    as_root pg_ctlcluster --skip-systemctl-redirect "$1" "$2" reload >&2 \
      || die "pg_ctlcluster could not reload PostgreSQL $1/$2 with its TLS settings."
    say "PostgreSQL $1/$2: TLS on with the test CA's certificate; role $tls_user over TLS only (reloaded)"
  fi
  wait_until 10 pg_tls_up \
    || die "PostgreSQL at 127.0.0.1:$pg_port does not take role $tls_user over TLS (sslmode=verify-full against $tls_dir/ca.pem) 10 s after its reload: see /var/log/postgresql/postgresql-$1-$2.log."
  say "PostgreSQL takes TLS at 127.0.0.1:$pg_port (role $tls_user, sslmode=verify-full, CA $tls_dir/ca.pem)"
}
