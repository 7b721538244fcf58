# Throwaway TLS material and credentials for the secured listeners
# (consumer-cli/tests/secure_connections.rs,
# docs/guide/secure_connections.md), made once
# with openssl from Debian into $CONSUMER_TOOLS_DIR/tls, and made again when
# a certificate is missing or expires within 30 days:
#
#   ca.pem, ca.key                 the test CA every secured listener trusts
#   server.pem, server.key         signed by it, for localhost and 127.0.0.1:
#                                  RabbitMQ's, Kafka's and PostgreSQL's
#   kafka-server.pem               server.key and server.pem in one file
#                                  (Kafka's PEM keystore)
#   client.pem, client.key         signed by the CA, CN consumer_tls: a client
#                                  certificate every listener accepts
#   other-ca.pem, other-ca.key     a CA no listener trusts
#   other-client.pem, other-client.key
#                                  signed by the other CA: a client
#                                  certificate every listener refuses
#   password                       the password of user consumer_tls on all
#                                  three services (random, made once)
#
# Keys are unencrypted PKCS#8 and readable by this user only; each service
# gets its own copy of the server's files where it can read them (see
# postgres.sh and rabbitmq.sh). Nothing here is a secret worth keeping:
# delete the directory and the next start makes new ones.
# shellcheck shell=bash

tls_dir="$tools_dir/tls"
# The user the tests authenticate as on every secured listener.
tls_user=consumer_tls

# The certificate in $1 exists and is valid for 30 more days.
tls_cert_fresh() { [ -f "$1" ] && openssl x509 -checkend $((30 * 24 * 3600)) -noout -in "$1" >/dev/null 2>&1; }

# A CA: key $1.key, self-signed certificate $1.pem, subject CN $2.
tls_make_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 825 \
    -keyout "$1.key" -out "$1.pem" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    >/dev/null 2>&1
}

# A leaf: key $1.key, certificate $1.pem signed by CA $2, subject CN $3,
# extensions $4 (an openssl extension section's lines).
tls_make_leaf() {
  local ext; ext="$(mktemp)"
  printf '%s\n' "$4" >"$ext"
  openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$1.key" -out "$1.csr" -subj "/CN=$3" >/dev/null 2>&1 \
    && openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days 825 -sha256 \
      -extfile "$ext" -out "$1.pem" >/dev/null 2>&1
  local status=$?
  rm -f "$ext" "$1.csr"
  return $status
}

# Makes what is missing or about to expire, and the password once.
ensure_tls_material() {
  command -v openssl >/dev/null || {
    can_install_packages && apt_install openssl
    command -v openssl >/dev/null || die "openssl is not installed: the secured listeners' certificates are made with it (apt-get install openssl)."
  }
  mkdir -p "$tls_dir"
  chmod 700 "$tls_dir"
  local made=0
  if ! tls_cert_fresh "$tls_dir/ca.pem"; then
    tls_make_ca "$tls_dir/ca" "consumer-rs test CA" || die "openssl could not make the test CA in $tls_dir."
    rm -f "$tls_dir/server.pem" "$tls_dir/client.pem"
    made=1
  fi
  if ! tls_cert_fresh "$tls_dir/other-ca.pem"; then
    tls_make_ca "$tls_dir/other-ca" "consumer-rs untrusted CA" || die "openssl could not make the untrusted CA in $tls_dir."
    rm -f "$tls_dir/other-client.pem"
    made=1
  fi
  if ! tls_cert_fresh "$tls_dir/server.pem"; then
    tls_make_leaf "$tls_dir/server" "$tls_dir/ca" localhost "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1" || die "openssl could not make the server certificate in $tls_dir."
    made=1
  fi
  if ! tls_cert_fresh "$tls_dir/client.pem"; then
    tls_make_leaf "$tls_dir/client" "$tls_dir/ca" "$tls_user" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth" || die "openssl could not make the client certificate in $tls_dir."
    made=1
  fi
  if ! tls_cert_fresh "$tls_dir/other-client.pem"; then
    tls_make_leaf "$tls_dir/other-client" "$tls_dir/other-ca" "$tls_user" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth" || die "openssl could not make the untrusted client certificate in $tls_dir."
    made=1
  fi
  cat "$tls_dir/server.key" "$tls_dir/server.pem" >"$tls_dir/kafka-server.pem"
  if [ ! -s "$tls_dir/password" ]; then
    openssl rand -hex 16 >"$tls_dir/password" || die "openssl could not make the test password in $tls_dir."
    made=1
  fi
  chmod 600 "$tls_dir"/*.key "$tls_dir/kafka-server.pem" "$tls_dir/password"
  [ "$made" -eq 1 ] && say "made the secured listeners' test CA, certificates and password in $tls_dir"
  return 0
}

# The test password (ensure_tls_material made it).
tls_password() { cat "$tls_dir/password"; }

# Copies the CA and the server's certificate and key into $1 for a service
# running as user $2 (key readable by that user only); prints nothing.
tls_install_for() {
  local dest="$1" owner="$2" f
  as_root mkdir -p "$dest" || return 1
  for f in ca.pem server.pem server.key; do
    as_root cp "$tls_dir/$f" "$dest/$f" || return 1
  done
  as_root chown -R "$owner:" "$dest" && as_root chmod 700 "$dest" && as_root chmod 600 "$dest/server.key"
}
