"""Asks a service to do real work within a deadline, so that a node which
accepts TCP connections but does nothing (stopped, wedged, shutting down)
is not taken for up. Standard library only: it runs before any venv exists.

    python3 probe.py amqp AMQP_URL [SECONDS]    # declare and delete a queue
    python3 probe.py kafka HOST:PORT [SECONDS]  # an ApiVersions round trip

With PROBE_CA_FILE set, the connection is TLS, the server's certificate
checked against that CA and the host name (an amqps listener, a Kafka
SASL_SSL one: ApiVersions needs no authentication); PROBE_PASSWORD_FILE
holds the AMQP password instead of the URL (so it is not on a command line).

Exit 0 when the service answered; else 1, with one line on stderr saying
what it did not do.
"""

import os
import socket
import ssl
import struct
import sys
import time
import urllib.parse


class Failed(Exception):
    pass


class Conn:
    def __init__(self, host, port, deadline):
        self.deadline = deadline
        self.sock = socket.create_connection((host, port), timeout=self.left())
        ca_file = os.environ.get("PROBE_CA_FILE")
        if ca_file:
            context = ssl.create_default_context(cafile=ca_file)
            try:
                self.sock = context.wrap_socket(self.sock, server_hostname=host)
            except ssl.SSLError as e:
                raise Failed(f"the TLS handshake failed: {e}") from None

    def left(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Failed("no answer before the deadline")
        return left

    def send(self, data):
        self.sock.settimeout(self.left())
        self.sock.sendall(data)

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            self.sock.settimeout(self.left())
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise Failed("the connection was closed")
            buf += chunk
        return buf


# AMQP 0-9-1: just the frames a declare and a delete need.

def shortstr(s):
    b = s.encode()
    return struct.pack("B", len(b)) + b


def longstr(b):
    return struct.pack(">I", len(b)) + b


def method_frame(channel, class_id, method_id, args=b""):
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


def read_method(conn):
    """The next method frame (heartbeats skipped): (class, method, args)."""
    while True:
        kind, _channel, size = struct.unpack(">BHI", conn.recv_exact(7))
        payload = conn.recv_exact(size)
        if conn.recv_exact(1) != b"\xce":
            raise Failed("a frame did not end with 0xCE")
        if kind == 1:
            class_id, method_id = struct.unpack(">HH", payload[:4])
            return class_id, method_id, payload[4:]


def expect(conn, class_id, method_id, what):
    got_class, got_method, args = read_method(conn)
    if (got_class, got_method) in ((10, 50), (20, 40)):
        code = struct.unpack(">H", args[:2])[0]
        text = args[3 : 3 + args[2]].decode(errors="replace")
        raise Failed(f"the broker closed the {'connection' if got_class == 10 else 'channel'} at {what}: {code} {text}")
    if (got_class, got_method) != (class_id, method_id):
        raise Failed(f"expected {what}, got method {got_class}.{got_method}")
    return args


def probe_amqp(url, seconds):
    u = urllib.parse.urlparse(url)
    user = urllib.parse.unquote(u.username or "guest")
    password = urllib.parse.unquote(u.password or "guest")
    password_file = os.environ.get("PROBE_PASSWORD_FILE")
    if password_file:
        with open(password_file, encoding="utf-8") as f:
            password = f.read().strip()
    vhost = urllib.parse.unquote(u.path[1:]) if u.path and u.path != "/" else "/"
    default_port = 5671 if u.scheme == "amqps" else 5672
    conn = Conn(u.hostname or "127.0.0.1", u.port or default_port, time.monotonic() + seconds)
    step = "the protocol header"
    try:
        conn.send(b"AMQP\x00\x00\x09\x01")
        step = "connection.start"
        expect(conn, 10, 10, step)
        response = b"\x00" + user.encode() + b"\x00" + password.encode()
        conn.send(method_frame(0, 10, 11, struct.pack(">I", 0) + shortstr("PLAIN") + longstr(response) + shortstr("en_US")))
        step = "connection.tune"
        tune = expect(conn, 10, 30, step)
        channel_max, frame_max, _ = struct.unpack(">HIH", tune[:8])
        conn.send(method_frame(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0)))
        conn.send(method_frame(0, 10, 40, shortstr(vhost) + shortstr("") + b"\x00"))
        step = "connection.open"
        expect(conn, 10, 41, step)
        conn.send(method_frame(1, 20, 10, shortstr("")))
        step = "channel.open"
        expect(conn, 20, 11, step)
        queue = f"consumer-rs.probe.{os.getpid()}"
        # exclusive + auto-delete: nothing outlives this connection.
        conn.send(method_frame(1, 50, 10, struct.pack(">H", 0) + shortstr(queue) + b"\x0c" + struct.pack(">I", 0)))
        step = f"the declare of queue {queue}"
        expect(conn, 50, 11, step)
        conn.send(method_frame(1, 50, 40, struct.pack(">H", 0) + shortstr(queue) + b"\x00"))
        step = f"the delete of queue {queue}"
        expect(conn, 50, 41, step)
        conn.send(method_frame(0, 10, 50, struct.pack(">H", 200) + shortstr("probe done") + struct.pack(">HH", 0, 0)))
        step = "connection.close"
        expect(conn, 10, 51, step)
    except (Failed, OSError) as e:
        raise Failed(f"{step}: {e}") from None


def probe_kafka(hostport, seconds):
    host, _, port = hostport.rpartition(":")
    conn = Conn(host or "127.0.0.1", int(port), time.monotonic() + seconds)
    try:
        client = b"consumer-rs-probe"
        # ApiVersions (key 18) v0, correlation id 7.
        body = struct.pack(">hhih", 18, 0, 7, len(client)) + client
        conn.send(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", conn.recv_exact(4))[0]
        answer = conn.recv_exact(size)
        correlation, error = struct.unpack(">ih", answer[:6])
        if correlation != 7:
            raise Failed(f"answered correlation id {correlation}, not 7")
        if error != 0:
            raise Failed(f"answered ApiVersions with error code {error}")
    except (Failed, OSError) as e:
        raise Failed(f"ApiVersions: {e}") from None


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("amqp", "kafka"):
        sys.exit(__doc__)
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    try:
        (probe_amqp if sys.argv[1] == "amqp" else probe_kafka)(sys.argv[2], seconds)
    except Failed as e:
        print(e, file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        print(f"could not connect: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
