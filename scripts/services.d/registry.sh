# A schema registry for the codec tests: Apicurio Registry 2.6.13.Final, the
# prebuilt distribution Maven Central serves (Confluent's registry is not
# there), downloaded once into the tools dir and run on the machine's Java
# (17 or newer) on 127.0.0.1:8081, with in-memory storage (a restart starts
# empty). It serves the Confluent-compatible API at
# http://127.0.0.1:8081/apis/ccompat/v7, which consumer-codec speaks.
# REGISTRY_URL points the tests at another registry instead (that base URL,
# Confluent's or Apicurio's ccompat one); on another host nothing is
# started, on 127.0.0.1 Apicurio is started on the URL's port when nothing
# answers there (scripts/test exports the default URL).
#
# Differences from Confluent's registry the tests allow for: ids may skip
# numbers, and `GET /mode` is not supported.
# Log: $CONSUMER_TOOLS_DIR/services/registry/server.log.
# shellcheck shell=bash

registry_version=2.6.13.Final
registry_home="$tools_dir/apicurio-registry-$registry_version"
registry_path=/apis/ccompat/v7
registry_url="${REGISTRY_URL:-http://127.0.0.1:8081$registry_path}"
registry_url="${registry_url%/}"
registry_hostport="${registry_url#*://}"; registry_hostport="${registry_hostport%%/*}"
registry_host="${registry_hostport%:*}"; registry_port="${registry_hostport##*:}"
[ "$registry_port" = "$registry_hostport" ] && registry_port=80
registry_tarball_url="https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app/$registry_version/apicurio-registry-app-$registry_version-all.tar.gz"

# Up when the ccompat API lists its subjects (a JSON array): a port that
# takes connections could be another program, or Quarkus still starting.
registry_up() {
  command -v curl >/dev/null || { tcp_up "$registry_host" "$registry_port"; return; }
  curl -sf -m 2 "$registry_url/subjects" 2>/dev/null | grep -q '^\['
}

# The distribution (a runner jar and its lib/), downloaded and unpacked
# once per version; a stamp written last says it is whole.
ensure_registry_installed() {
  [ -f "$registry_home/.installed" ] && return 0
  command -v curl >/dev/null || die "curl is not installed: the schema registry is downloaded with it (apt-get install curl), or point REGISTRY_URL at a running registry."
  exec 6>"$tools_dir/.registry.lock"
  flock 6 2>/dev/null || true
  if [ ! -f "$registry_home/.installed" ]; then
    say "downloading Apicurio Registry $registry_version from Maven Central into $registry_home (once, about 140 MB)"
    local t0; t0="$(now)"
    rm -rf "$registry_home" "$registry_home.tmp"
    mkdir -p "$registry_home.tmp"
    curl -sSfL --retry 3 -o "$registry_home.tmp/dist.tar.gz" "$registry_tarball_url" \
      || die "could not download $registry_tarball_url: this machine needs Maven Central reachable, or point REGISTRY_URL at a running registry."
    tar -xzf "$registry_home.tmp/dist.tar.gz" -C "$registry_home.tmp" \
      || die "could not unpack $registry_home.tmp/dist.tar.gz (a partial download? delete $registry_home.tmp and run again)."
    rm -f "$registry_home.tmp/dist.tar.gz"
    # The tarball holds the jar either at its root or in one top directory.
    local jar; jar="$(find "$registry_home.tmp" -name "apicurio-registry-app-$registry_version-runner.jar" | head -n 1)"
    [ -n "$jar" ] || die "the Apicurio Registry download holds no apicurio-registry-app-$registry_version-runner.jar (see $registry_home.tmp)."
    echo "$jar" | sed "s|^$registry_home.tmp|$registry_home|" >"$registry_home.tmp/.installed"
    mv "$registry_home.tmp" "$registry_home"
    say "Apicurio Registry $registry_version installed in $(since "$t0")"
  fi
  exec 6>&-
}

ensure_registry() {
  if registry_up; then say "the schema registry is up at $registry_url"; return; fi
  if use_docker; then
    compose_up registry
    wait_until 90 registry_up || die "the docker compose registry does not answer at $registry_url within 90 s."
    say "Apicurio Registry is up at $registry_url (docker compose)"
    return
  fi
  is_local_host "$registry_host" \
    || die "no schema registry answers at $registry_url (REGISTRY_URL): start that registry, or unset REGISTRY_URL to have Apicurio Registry started on 127.0.0.1:8081."
  [ "${registry_url#*://"$registry_hostport"}" = "$registry_path" ] \
    || die "nothing answers at $registry_url (REGISTRY_URL), and the Apicurio Registry this script starts serves http://$registry_hostport$registry_path: point REGISTRY_URL there, or at a registry you run."
  java_ok || die "Apicurio Registry needs Java 17 or newer and this machine has $(java -version 2>&1 | head -n 1 || echo none): install openjdk-17-jre-headless, or point REGISTRY_URL at a running registry."
  ensure_registry_installed
  local dir="$services_dir/registry" t0 pid jar
  jar="$(cat "$registry_home/.installed")"
  mkdir -p "$dir"
  t0="$(now)"
  pid="$(spawn_detached "$dir/server.log" java -Xms128m -Xmx512m -Djava.awt.headless=true \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$registry_port" -jar "$jar")"
  echo "$pid" >"$dir.pid"
  PID_TO_WATCH="$pid" wait_until 90 registry_up || {
    tail -n 20 "$dir/server.log" >&2 || true
    die "Apicurio Registry exited or did not answer at $registry_url within 90 s (its log ends above; in full in $dir/server.log): free port $registry_port, or point REGISTRY_URL at a running registry."
  }
  say "Apicurio Registry $registry_version (pid $pid) started in $(since "$t0") at $registry_url, log in $dir/server.log"
}

stop_registry() { stop_pidfile "$services_dir/registry.pid" "Apicurio Registry"; }
