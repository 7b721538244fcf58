# An SQS emulator for the tests: moto's server (PyPI `moto[server]`, pinned
# below) in a venv of its own in the tools dir, on 127.0.0.1:4566 (the port
# AWS emulators conventionally take, so an SDK's AWS_ENDPOINT_URL_SQS set
# for one works for the other). SQS_ENDPOINT points the tests at another
# endpoint instead (AWS_ENDPOINT_URL_SQS is read when SQS_ENDPOINT is
# unset), and then nothing is started.
#
# moto keeps its queues in memory: a restart starts empty. Any FIFO receive
# that breaks a group's order (SQS never does) is written to
# $CONSUMER_TOOLS_DIR/services/sqs/fifo-order.log. The same venv
# holds boto3 (a dependency of moto), which the tests' outside producer
# (scripts/sqs_producer.py) runs on; `scripts/tools sqs-python` prints its
# python. Log: $CONSUMER_TOOLS_DIR/services/sqs/server.log.
# shellcheck shell=bash

moto_version=5.2.6
sqs_venv="$tools_dir/moto-$moto_version"
sqs_endpoint="${SQS_ENDPOINT:-${AWS_ENDPOINT_URL_SQS:-http://127.0.0.1:4566}}"
sqs_hostport="${sqs_endpoint#*://}"; sqs_hostport="${sqs_hostport%%/*}"
sqs_host="${sqs_hostport%:*}"; sqs_port="${sqs_hostport##*:}"
[ "$sqs_port" = "$sqs_hostport" ] && sqs_port=80

# moto answers any request on its root; a TCP connect alone could be
# another program on the port.
sqs_up() {
  command -v curl >/dev/null || { tcp_up "$sqs_host" "$sqs_port"; return; }
  curl -s -o /dev/null -m 2 -X POST -H 'Content-Type: application/x-amz-json-1.0' \
    -H 'X-Amz-Target: AmazonSQS.ListQueues' \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0' \
    -d '{}' "$sqs_endpoint/"
}

# The venv with moto's server, made once per pinned version (a stamp
# written last says it is whole).
ensure_moto_venv() {
  [ -f "$sqs_venv/.installed" ] && return 0
  command -v python3 >/dev/null || die "the SQS emulator (moto) runs on Python 3, which is not installed here: install python3 (with venv), or point SQS_ENDPOINT at a running SQS emulator."
  exec 7>"$tools_dir/.moto.lock"
  flock 7 2>/dev/null || true
  if [ ! -f "$sqs_venv/.installed" ]; then
    say "installing moto[server] $moto_version from PyPI into $sqs_venv (once)"
    local t0; t0="$(now)"
    rm -rf "$sqs_venv"
    python3 -m venv "$sqs_venv" >"$tools_dir/moto-install.log" 2>&1 \
      || { tail -n 5 "$tools_dir/moto-install.log" >&2; die "python3 -m venv failed (above): install python3-venv, or point SQS_ENDPOINT at a running SQS emulator."; }
    "$sqs_venv/bin/pip" install -q --disable-pip-version-check "moto[server]==$moto_version" >>"$tools_dir/moto-install.log" 2>&1 \
      || { tail -n 15 "$tools_dir/moto-install.log" >&2; die "pip could not install moto[server]==$moto_version from PyPI (its log ends above): this machine needs PyPI reachable, or point SQS_ENDPOINT at a running SQS emulator."; }
    touch "$sqs_venv/.installed"
    say "moto $moto_version installed in $(since "$t0")"
  fi
  exec 7>&-
}

ensure_sqs() {
  if [ -n "${SQS_ENDPOINT:-}${AWS_ENDPOINT_URL_SQS:-}" ]; then
    if sqs_up; then say "SQS is up at $sqs_endpoint"; return; fi
    die "no SQS answers at $sqs_endpoint (SQS_ENDPOINT or AWS_ENDPOINT_URL_SQS): start that emulator, or unset both to have moto started on 127.0.0.1:4566."
  fi
  if sqs_up; then say "SQS (moto) is up at $sqs_endpoint"; return; fi
  if use_docker; then
    compose_up sqs
    wait_until 60 sqs_up || die "the docker compose SQS emulator does not answer at $sqs_endpoint within 60 s."
    say "SQS is up at $sqs_endpoint (docker compose)"
    return
  fi
  ensure_moto_venv
  local dir="$services_dir/sqs" t0
  mkdir -p "$dir"
  t0="$(now)"
  local pid
  # moto_server.py: moto with its FIFO receive made to keep a group's order
  # (see the file); it writes any receive that still breaks one to
  # fifo-order.log, which the tests that check a group's order read.
  : >"$dir/fifo-order.log"
  pid="$(spawn_detached "$dir/server.log" env MOTO_FIFO_AUDIT="$dir/fifo-order.log" \
    "$sqs_venv/bin/python" "$lib/moto_server.py" -H 127.0.0.1 -p "$sqs_port")"
  echo "$pid" >"$dir.pid"
  PID_TO_WATCH="$pid" wait_until 60 sqs_up || {
    tail -n 20 "$dir/server.log" >&2 || true
    die "moto exited or did not answer at $sqs_endpoint within 60 s (its log ends above; in full in $dir/server.log): free port $sqs_port, or point SQS_ENDPOINT at a running SQS emulator."
  }
  say "moto $moto_version (pid $pid) started in $(since "$t0") at $sqs_endpoint, log in $dir/server.log"
}

# The python of moto's venv (boto3 included), for the tests' outside producer.
sqs_python() {
  ensure_moto_venv
  echo "$sqs_venv/bin/python"
}

stop_sqs() { stop_pidfile "$services_dir/sqs.pid" "moto"; }
