# RabbitMQ for the tests: AMQP_URL (default
# amqp://guest:guest@127.0.0.1:5672/%2f). When nothing answers there and the
# host is this machine, the local node is started (`rabbitmq-server
# -detached`, as the package's own user), and the server is installed from
# Debian's packages first when it is missing. The tests that restart the
# broker (tests/amqp_restart.rs) drive that node with rabbitmqctl.
#
# A node this script starts gets a fresh data directory of its own
# (RABBITMQ_MNESIA_BASE=/var/lib/rabbitmq/consumer-rs, emptied at each start,
# as the Kafka broker is formatted at each start): the machine's own node
# data is never touched, and the queues earlier test runs left can never
# slow the boot (a node recovering 300 quorum and 1 000 classic test queues
# took over 90 s to answer).
#
# "Up" means the broker declares and deletes a queue within 10 s
# (scripts/services.d/probe.py), not only that its port takes connections: a
# stuck node of this script's (a wedged or SIGSTOPped beam.smp) is stopped,
# with SIGKILL when it ignores rabbitmqctl stop, and started fresh.
# shellcheck shell=bash

amqp_url="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
amqp_hostport="${amqp_url#*://}"; amqp_hostport="${amqp_hostport#*@}"; amqp_hostport="${amqp_hostport%%/*}"
amqp_host="${amqp_hostport%%:*}"; amqp_port="${amqp_hostport##*:}"
[ "$amqp_port" = "$amqp_hostport" ] && amqp_port=5672

# A node this script starts keeps its data here (emptied at each start).
rabbitmq_base=/var/lib/rabbitmq/consumer-rs

# The port takes connections (any broker, local or not).
rabbitmq_up() { tcp_up "$amqp_host" "$amqp_port"; }

# The broker does real work: declares and deletes a queue within 10 s (a
# node that is stopped, wedged or shutting down still takes TCP
# connections). The reason it did not is in $rabbitmq_probe_error.
rabbitmq_answers() {
  command -v python3 >/dev/null || return 0
  rabbitmq_probe_error="$(python3 "$lib/probe.py" amqp "$amqp_url" 10 2>&1)"
}

# The pid of the node this script started (its data in $rabbitmq_base),
# if one runs.
rabbitmq_our_pid() {
  local pid
  for pid in $(pgrep -u rabbitmq beam.smp 2>/dev/null); do
    as_root cat "/proc/$pid/environ" 2>/dev/null | tr '\0' '\n' | grep -qx "RABBITMQ_MNESIA_BASE=$rabbitmq_base" \
      && { echo "$pid"; return 0; }
  done
  return 1
}

# Stops the node this script started: rabbitmqctl stop, then SIGKILL when
# it has not exited 20 s later (a wedged node ignores SIGTERM); waits
# until it has exited.
stop_rabbitmq() {
  local pid i
  pid="$(rabbitmq_our_pid)" || return 0
  say "stopping RabbitMQ (pid $pid)"
  timeout 20 rabbitmqctl -q stop >/dev/null 2>&1 &
  for i in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "RabbitMQ (pid $pid) did not exit within 20 s of rabbitmqctl stop: SIGKILL"
    as_root kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 20); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
  fi
  wait 2>/dev/null || true
  kill -0 "$pid" 2>/dev/null && say "RabbitMQ (pid $pid) is still running"
  return 0
}

ensure_rabbitmq() {
  if rabbitmq_up; then
    if rabbitmq_answers; then say "RabbitMQ is up at $amqp_host:$amqp_port"; return; fi
    local why="RabbitMQ at $amqp_host:$amqp_port takes connections but did not declare and delete a queue within 10 s ($rabbitmq_probe_error)"
    is_local_host "$amqp_host" && ! use_docker && rabbitmq_our_pid >/dev/null \
      || die "$why: restart that broker, or unset AMQP_URL to have a local one started."
    say "$why: the node is stuck; stopping it and starting it fresh"
    stop_rabbitmq
  fi
  if use_docker; then
    compose_up rabbitmq
    wait_until 90 rabbitmq_up || die "the docker compose RabbitMQ does not answer on $amqp_host:$amqp_port within 90 s."
    say "RabbitMQ is up at $amqp_host:$amqp_port (docker compose)"
    return
  fi
  is_local_host "$amqp_host" \
    || die "RabbitMQ does not answer at $amqp_host:$amqp_port (AMQP_URL): start it, or unset AMQP_URL to have a local one installed and started."
  if ! command -v rabbitmq-server >/dev/null; then
    if can_install_packages; then
      say "RabbitMQ is not installed: installing it from Debian's packages (rabbitmq-server)"
      local t0; t0="$(now)"
      apt_install rabbitmq-server \
        || die "apt-get could not install rabbitmq-server (its output ends above): install RabbitMQ by hand, or point AMQP_URL at a running one."
      say "RabbitMQ installed in $(since "$t0")"
    elif docker_engine_up; then
      CONSUMER_SERVICES=docker ensure_rabbitmq
      return
    else
      die "RabbitMQ is not installed here, this user cannot install it (no root, no passwordless sudo) and no Docker engine answers: install the rabbitmq-server package, or run docker compose up -d rabbitmq, or point AMQP_URL at a running RabbitMQ (guest/guest)."
    fi
  fi
  say "RabbitMQ is not answering at $amqp_host:$amqp_port; starting the local node"
  local t0; t0="$(now)"
  # A node that is running with its app stopped (rabbitmqctl stop_app) only needs start_app.
  if command -v rabbitmqctl >/dev/null && timeout 20 rabbitmqctl -q status >/dev/null 2>&1; then
    rabbitmqctl -q start_app >/dev/null 2>&1 || true
  else
    local base="$rabbitmq_base"
    as_root rm -rf "$base" && as_root mkdir -p "$base" && as_root chown rabbitmq: "$base" \
      || die "could not prepare $base for the test node's data: run this script as root or with passwordless sudo, or start RabbitMQ yourself and point AMQP_URL at it."
    as_root env RABBITMQ_MNESIA_BASE="$base" rabbitmq-server -detached >/dev/null 2>&1 || true
  fi
  wait_until 90 rabbitmq_up \
    || die "RabbitMQ is not reachable at $amqp_host:$amqp_port and rabbitmq-server -detached did not bring it up within 90 s (see /var/log/rabbitmq/): start RabbitMQ with user guest/guest, or point AMQP_URL at one."
  wait_until 60 rabbitmq_answers \
    || die "RabbitMQ started on $amqp_host:$amqp_port but did not declare and delete a queue within 60 s ($rabbitmq_probe_error; see /var/log/rabbitmq/)."
  say "RabbitMQ started in $(since "$t0") on $amqp_host:$amqp_port"
}

sweep_rabbitmq() {
  # Queues earlier test runs left (each harness uses a `ct.` prefix; they
  # expire ten minutes after their last use, and a few hundred quorum queues
  # expiring at once can stall a RabbitMQ 3.10 node for minutes, under the
  # tests of the next run). Only a local node can be swept this way; one
  # eval deletes them all at once (one rabbitmqctl call per queue would
  # take minutes). Which are old enough: sweep_rabbitmq.erl beside this.
  command -v rabbitmqctl >/dev/null || return 0
  local n
  n="$(timeout 300 rabbitmqctl eval "Mine = none, $(grep -v '^%%' "$lib/sweep_rabbitmq.erl")" 2>/dev/null </dev/null || true)"
  case "$n" in
    '' | 0) ;;
    *[!0-9]*) say "could not sweep the queues earlier test runs left (they expire on their own)" ;;
    *) say "deleted $n queues left by earlier test runs (made over three hours ago)" ;;
  esac
}

# The TLS listener (amqps) beside the plain one, on the local node this
# script manages: 127.0.0.1:$amqps_port (default 5671) with the test CA's
# server certificate (scripts/services.d/tls.sh); a client certificate is
# verified when one is given (verify_peer) but not required; user
# consumer_tls, with the test password, has every permission on vhost /.
# The listener and its options are added to the running node (its
# application environment, so a stop_app/start_app keeps them, and the
# listener itself): a node started without them gains them in place,
# queues and all, instead of being restarted.
amqps_port="${AMQPS_PORT:-5671}"
# The node's copy of the CA and the server's certificate and key.
rabbitmq_tls_dir=/var/lib/rabbitmq/consumer-rs-tls

# The amqps listener does real work for user consumer_tls.
rabbitmq_tls_answers() {
  command -v python3 >/dev/null || { tcp_up 127.0.0.1 "$amqps_port"; return; }
  rabbitmq_probe_error="$(PROBE_CA_FILE="$tls_dir/ca.pem" PROBE_PASSWORD_FILE="$tls_dir/password" \
    python3 "$lib/probe.py" amqp "amqps://$tls_user@127.0.0.1:$amqps_port/%2f" 10 2>&1)"
}

ensure_rabbitmq_tls() {
  if use_docker || ! is_local_host "$amqp_host" || ! command -v rabbitmqctl >/dev/null; then
    say "RabbitMQ's TLS listener is set up on a local node only (not with AMQP_URL elsewhere or docker compose): the secured-connection tests need amqps on 127.0.0.1:$amqps_port"
    return 0
  fi
  ensure_tls_material
  tls_install_for "$rabbitmq_tls_dir" rabbitmq \
    && as_root install -o rabbitmq -m 600 "$tls_dir/password" "$rabbitmq_tls_dir/password" \
    || die "could not copy the TLS files to $rabbitmq_tls_dir for RabbitMQ: run this script as root or with passwordless sudo."
  local d="$rabbitmq_tls_dir" said
  if ! tcp_up 127.0.0.1 "$amqps_port"; then
    said="$(timeout 60 rabbitmqctl eval "
      Opts = [{cacertfile, \"$d/ca.pem\"}, {certfile, \"$d/server.pem\"}, {keyfile, \"$d/server.key\"},
              {verify, verify_peer}, {fail_if_no_peer_cert, false}],
      ok = application:set_env(rabbit, ssl_options, Opts),
      ok = application:set_env(rabbit, ssl_listeners, [{\"127.0.0.1\", $amqps_port}]),
      rabbit_networking:ensure_ssl(),
      rabbit_networking:start_ssl_listener({\"127.0.0.1\", $amqps_port}, rabbit_networking:fix_ssl_options(Opts), 10)." 2>&1 </dev/null)" \
      || die "RabbitMQ did not start its TLS listener on 127.0.0.1:$amqps_port: $said"
    say "RabbitMQ: TLS listener started on 127.0.0.1:$amqps_port (amqps)"
  fi
  said="$(timeout 60 rabbitmqctl eval "
    {ok, P0} = file:read_file(\"$d/password\"),
    P = string:trim(P0),
    U = <<\"$tls_user\">>,
    case rabbit_auth_backend_internal:lookup_user(U) of
      {ok, _} -> rabbit_auth_backend_internal:change_password(U, P, <<\"consumer-rs\">>);
      _ -> rabbit_auth_backend_internal:add_user(U, P, <<\"consumer-rs\">>)
    end,
    rabbit_auth_backend_internal:set_permissions(U, <<\"/\">>, <<\".*\">>, <<\".*\">>, <<\".*\">>, <<\"consumer-rs\">>)." 2>&1 </dev/null)" \
    || die "RabbitMQ did not set up user $tls_user: $said"
  as_root rm -f "$d/password"
  wait_until 20 rabbitmq_tls_answers \
    || die "RabbitMQ's TLS listener on 127.0.0.1:$amqps_port did not declare and delete a queue for user $tls_user within 20 s ($rabbitmq_probe_error)."
  say "RabbitMQ TLS listener is up at amqps://127.0.0.1:$amqps_port (user $tls_user, CA $tls_dir/ca.pem)"
}
