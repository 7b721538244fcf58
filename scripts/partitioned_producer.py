"""An outside producer for a partitioned RabbitMQ queue (`PartitionedTopology`),
written with pika alone: what a service in another language must do so that
our consumers keep each key in order.

  1. Pick the partition as our publishers do: Kafka's murmur2 of the key's
     UTF-8 bytes, made positive, modulo the partition count N.
  2. Publish to the default exchange ("") with the partition queue's name,
     `<name>.p<partition>`, as routing key.
  3. Say the key in the `ce-partitionkey` header: the consumer runs the
     messages of one key one at a time, in queue order, and different keys
     in parallel. (Without it every message of a partition waits for the one
     before it.)
  4. Turn publisher confirms on and treat a message as sent only once
     RabbitMQ confirmed it: an unconfirmed publish can be lost by the broker
     without anyone being told. Waiting for each confirm in turn is slow on
     quorum queues; this script keeps up to 256 unconfirmed at a time.

Runs on the python `scripts/tools cloudevents-sdk` prints (it has pika); the
churn test (tests/amqp_churn.rs) drives it as its outside producer.

  partition N KEY...        print `KEY PARTITION` for each key
  publish URL NAME N KEYS PER_KEY [--confirm all|none|even-keys]
                            [--rate MSGS_PER_S] [--progress-every K]
                            publish PER_KEY messages for each of KEYS keys
                            (`order-0` ..), a JSON body {"id", "key", "seq"} each,
                            seq 0, 1, ... in order per key, keys interleaved;
                            --confirm even-keys confirms the keys with an even
                            index and sends the others without confirms

While publishing it prints `published COUNT` every K messages and, at the
end, `done CONFIRMED UNCONFIRMED`; a message RabbitMQ refused (nack, or
returned as unroutable) is printed as `refused ID REASON` and not counted.
"""

import json
import sys
import time

import pika


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as an
    unsigned 32-bit value."""
    m, r = 0x5BD1E995, 24
    mask = 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def partition_for(key: str, partitions: int) -> int:
    """The partition of `key`: murmur2 made positive (the sign bit cleared,
    as Kafka's toPositive does), modulo the partition count."""
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


def queue_for(name: str, key: str, partitions: int) -> str:
    return f"{name}.p{partition_for(key, partitions)}"


def properties(message_id: str, key: str) -> pika.BasicProperties:
    """A CloudEvent in binary mode, with the key as `ce-partitionkey`."""
    return pika.BasicProperties(
        content_type="application/json",
        delivery_mode=pika.DeliveryMode.Persistent,
        message_id=message_id,
        headers={
            "ce-specversion": "1.0",
            "ce-id": message_id,
            "ce-type": "Job",
            "ce-source": "/scripts/partitioned_producer",
            "ce-partitionkey": key,
        },
    )


class Producer:
    """Publishes `messages` on one connection: those to confirm on a channel
    in confirm mode, at most WINDOW of them unconfirmed at a time, the others
    on a plain channel."""

    WINDOW = 256

    def __init__(self, url, messages, rate, progress_every):
        self.url = url
        self.messages = iter(messages)
        self.rate = rate
        self.progress_every = progress_every
        self.pending = {}  # delivery tag on the confirming channel -> message id
        self.tags = 0
        self.returned = set()
        self.sent = 0
        self.confirmed = 0
        self.unconfirmed = 0
        self.last_queue = None
        self.finishing = False
        self.error = None

    def run(self):
        self.connection = pika.SelectConnection(
            pika.URLParameters(self.url),
            on_open_callback=self.opened,
            on_open_error_callback=self.failed,
            on_close_callback=self.closed,
        )
        self.connection.ioloop.start()
        if self.error is not None:
            sys.exit(f"error {self.error!r}")
        print(f"done {self.confirmed} {self.unconfirmed}", flush=True)

    def opened(self, connection):
        connection.channel(on_open_callback=self.confirming_opened)

    def confirming_opened(self, channel):
        self.confirming = channel
        # A mandatory message no queue took comes back before its ack.
        channel.add_on_return_callback(
            lambda _ch, _method, props, _body: self.returned.add(props.message_id)
        )
        channel.confirm_delivery(
            self.on_confirm,
            callback=lambda _frame: self.connection.channel(on_open_callback=self.plain_opened),
        )

    def plain_opened(self, channel):
        self.plain = channel
        self.started = time.monotonic()
        self.pump()

    def pump(self):
        while not self.finishing and len(self.pending) < self.WINDOW:
            if self.rate:
                # Spreads the publishing over time (load shaping, so that the
                # consumers can be killed while it goes on).
                ahead = self.started + self.sent / self.rate - time.monotonic()
                if ahead > 0:
                    self.connection.ioloop.call_later(ahead, self.pump)
                    return
            message = next(self.messages, None)
            if message is None:
                self.finishing = True
                break
            message_id, key, queue, body, with_confirm = message
            channel = self.confirming if with_confirm else self.plain
            channel.basic_publish("", queue, body, properties(message_id, key), mandatory=True)
            if with_confirm:
                self.tags += 1
                self.pending[self.tags] = message_id
            else:
                self.unconfirmed += 1
            self.last_queue = queue
            self.sent += 1
            if self.sent % self.progress_every == 0:
                print(f"published {self.sent}", flush=True)
        if self.finishing and not self.pending:
            if self.last_queue is None:
                self.connection.close()
                return
            # Unconfirmed publishes were only written to the socket: a round
            # trip on their channel makes sure the broker has taken them all.
            self.plain.queue_declare(self.last_queue, passive=True, callback=self.flushed)

    def on_confirm(self, frame):
        method = frame.method
        nacked = isinstance(method, pika.spec.Basic.Nack)
        if method.multiple:
            tags = [t for t in self.pending if t <= method.delivery_tag]
        else:
            tags = [method.delivery_tag]
        for tag in tags:
            message_id = self.pending.pop(tag, None)
            if message_id is None:
                continue
            if nacked:
                print(f"refused {message_id} nack", flush=True)
            elif message_id in self.returned:
                print(f"refused {message_id} unroutable", flush=True)
            else:
                self.confirmed += 1
        if not self.finishing or not self.pending:
            self.pump()

    def flushed(self, _frame):
        self.connection.close()

    def failed(self, _connection, error):
        self.error = error
        self.connection.ioloop.stop()

    def closed(self, _connection, reason):
        if not self.finishing or self.pending:
            self.error = reason
        self.connection.ioloop.stop()


def messages(name, partitions, keys, per_key, confirm):
    """Each key's messages in order, the keys interleaved."""
    for seq in range(per_key):
        for k in range(keys):
            key = f"order-{k}"
            message_id = f"{key}-{seq}"
            body = json.dumps({"id": message_id, "key": key, "seq": seq}).encode()
            with_confirm = confirm == "all" or (confirm == "even-keys" and k % 2 == 0)
            yield message_id, key, queue_for(name, key, partitions), body, with_confirm


def main(argv):
    if len(argv) >= 3 and argv[0] == "partition":
        n = int(argv[1])
        for key in argv[2:]:
            print(key, partition_for(key, n))
        return
    if len(argv) >= 6 and argv[0] == "publish":
        url, name, n, keys, per_key = argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
        options = dict(zip(argv[6::2], argv[7::2]))
        Producer(
            url,
            messages(name, n, keys, per_key, options.get("--confirm", "all")),
            rate=float(options.get("--rate", "0")),
            progress_every=int(options.get("--progress-every", "1000")),
        ).run()
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
