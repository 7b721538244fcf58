# Shared by scripts/services and its parts: messages, timing, installing
# Debian packages, and the tools dir.
# shellcheck shell=bash

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

tools_dir="${CONSUMER_TOOLS_DIR:-$HOME/.cache/consumer-rs/tools}"
services_dir="$tools_dir/services"
mkdir -p "$services_dir"

# "host:port" reachable by a TCP connect within 2 s?
tcp_up() { timeout 2 bash -c ": </dev/tcp/$1/$2" 2>/dev/null; }

# Seconds since the epoch, for the install and start times the script prints.
now() { date +%s; }
since() { echo "$(($(now) - $1)) s"; }

is_local_host() {
  case "$1" in 127.0.0.1 | localhost | ::1 | '[::1]') return 0 ;; *) return 1 ;; esac
}

# Runs a command as root: directly when we are root, else through sudo
# without a password prompt. Fails (without running it) when neither works.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo -n "$@"
  else
    return 126
  fi
}

can_install_packages() {
  command -v apt-get >/dev/null || return 1
  [ "$(id -u)" -eq 0 ] && return 0
  command -v sudo >/dev/null && sudo -n true 2>/dev/null
}

# apt-get install of Debian packages, with the package lists refreshed once
# when a fresh machine has none (or stale ones). Services are not started
# by the package's scripts here: scripts/services starts them itself.
apt_install() {
  local log="$services_dir/apt.log"
  : >"$log"
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1; then
    say "apt-get install $* failed; updating the package lists and trying again"
    as_root apt-get update -q >>"$log" 2>&1 || true
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1 || {
      tail -n 15 "$log" >&2
      return 1
    }
  fi
}

# Docker instead of local packages: CONSUMER_SERVICES=docker, or nothing
# installed and nothing installable while a Docker engine answers.
docker_engine_up() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }
use_docker() { [ "${CONSUMER_SERVICES:-}" = docker ]; }

compose_up() {
  local svc="$1"
  docker_engine_up || die "CONSUMER_SERVICES=docker, but no Docker engine answers here (docker info fails): start Docker, or unset CONSUMER_SERVICES to have the services installed from Debian's packages and Maven Central."
  say "starting $svc with docker compose (docker-compose.yml)"
  docker compose -f "$repo_dir/docker-compose.yml" up -d "$svc" >&2 \
    || die "docker compose could not start $svc (see above): fix that, or unset CONSUMER_SERVICES to install it locally."
}

# Waits up to $1 seconds for the command after it to succeed, checking every
# 0.5 s; fails when the time is up or when the process in $PID_TO_WATCH ends.
wait_until() {
  local secs="$1"; shift
  local i
  for i in $(seq 1 $((secs * 2))); do
    "$@" && return 0
    if [ -n "${PID_TO_WATCH:-}" ] && ! kill -0 "$PID_TO_WATCH" 2>/dev/null; then return 1; fi
    sleep 0.5
  done
  return 1
}

# Starts a detached background process (it outlives this script) with its
# output in $log, and prints its pid. setsid without job control does not
# fork, so $! is the program's own pid.
spawn_detached() {
  local log="$1"; shift
  (
    set +m
    nohup setsid "$@" >"$log" 2>&1 </dev/null &
    echo $!
  )
}

# Stops the process whose pid file is $1 (named $2 in messages) and waits
# until it has exited: SIGTERM, then SIGKILL after 10 s. Nothing to do when
# there is no pid file or the process is gone.
stop_pidfile() {
  local f="$1" label="$2"
  [ -f "$f" ] || return 0
  local pid i; pid="$(cat "$f")"
  rm -f "$f"
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null
  for i in $(seq 1 20); do
    kill -0 "$pid" 2>/dev/null || { say "stopped $label (pid $pid)"; return 0; }
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null
  say "$label (pid $pid) did not exit within 10 s of SIGTERM: SIGKILL"
}
