"""confluent-kafka's schema-registry serializers as an outside producer, for
the registry interop tests (tests/registry_codecs.rs). Runs on the python
`scripts/tools registry-clients` prints.

  kafka BROKERS TOPIC FORMAT REGISTRY FIRST COUNT [VERSION]
      produce COUNT orders (ids FIRST..FIRST+COUNT) to TOPIC with the
      FORMAT serializer (avro | protobuf | json), subject TOPIC-value
      (TopicNameStrategy), as the standard's example does
  rabbitmq URL QUEUE FORMAT REGISTRY FIRST COUNT [VERSION]
      the same bytes, serialized for subject QUEUE-value, published with
      pika to QUEUE (persistent, message_id order-N)

  read-kafka BROKERS TOPIC FORMAT REGISTRY COUNT
      read COUNT records from TOPIC's start with the FORMAT deserializer
      (avro | protobuf), printing each as one JSON line:
      {"key": ..., "value": {...}, "headers": {...}}

Order N is {"id": "order-N", "amount": N}, keyed "customer-(N % 7)".
VERSION v2 (Avro only) writes a second version of the schema, with a
field `currency` (default "EUR") the v1 reader does not know. Prints the
schema id the serializer used.
"""

import json
import sys
import time

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

AVRO_V1 = {
    "type": "record",
    "name": "OrderPlaced",
    "namespace": "com.example.orders",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "amount", "type": "long"},
    ],
}
AVRO_V2 = dict(
    AVRO_V1,
    fields=AVRO_V1["fields"] + [{"name": "currency", "type": "string", "default": "EUR"}],
)
JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "OrderPlaced",
    "type": "object",
    "properties": {"id": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["id", "amount"],
}


def protobuf_class():
    """OrderPlaced built from its descriptor (no protoc here): string id = 1;
    int64 amount = 2."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(
        name="orders.proto", package="orders", syntax="proto3"
    )
    message = proto.message_type.add(name="OrderPlaced")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(
        name="id", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL
    )
    message.field.add(
        name="amount", number=2, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("orders.OrderPlaced"))


def serializer(fmt, registry, version):
    client = SchemaRegistryClient({"url": registry})
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        schema = AVRO_V2 if version == "v2" else AVRO_V1

        def to_dict(order, _ctx):
            if version == "v2":
                return dict(order, currency="USD")
            return order

        return AvroSerializer(client, json.dumps(schema), to_dict)
    if fmt == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        cls = protobuf_class()
        inner = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
        return lambda order, ctx: inner(cls(id=order["id"], amount=order["amount"]), ctx)
    if fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        return JSONSerializer(json.dumps(JSON_SCHEMA), client)
    sys.exit(f"unknown format {fmt!r}: avro | protobuf | json")


def orders(first, count):
    for n in range(first, first + count):
        yield f"customer-{n % 7}", {"id": f"order-{n}", "amount": n}


def schema_id(framed):
    return int.from_bytes(framed[1:5], "big")


def kafka(brokers, topic, fmt, registry, first, count, version=None):
    from confluent_kafka import Producer

    serialize = serializer(fmt, registry, version)
    producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True})
    failures = []
    ids = set()

    def delivered(err, _msg):
        if err is not None:
            failures.append(str(err))

    for key, order in orders(int(first), int(count)):
        value = serialize(order, SerializationContext(topic, MessageField.VALUE))
        ids.add(schema_id(value))
        producer.produce(
            topic,
            key=key.encode(),
            value=value,
            headers={"ce_id": order["id"]},
            on_delivery=delivered,
        )
        producer.poll(0)
    left = producer.flush(30)
    if left or failures:
        sys.exit(f"{left} record(s) not delivered, failures: {failures[:3]}")
    print(json.dumps({"schema_ids": sorted(ids)}), flush=True)


def rabbitmq(url, queue, fmt, registry, first, count, version=None):
    import pika

    serialize = serializer(fmt, registry, version)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    ids = set()
    for key, order in orders(int(first), int(count)):
        value = serialize(order, SerializationContext(queue, MessageField.VALUE))
        ids.add(schema_id(value))
        channel.basic_publish(
            exchange="",
            routing_key=queue,
            body=value,
            properties=pika.BasicProperties(
                message_id=order["id"], delivery_mode=2, headers={"partition_key": key}
            ),
            mandatory=True,
        )
    connection.close()
    print(json.dumps({"schema_ids": sorted(ids)}), flush=True)


def read_kafka(brokers, topic, fmt, registry, count):
    from confluent_kafka import Consumer

    client = SchemaRegistryClient({"url": registry})
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        # No reader's schema: the writer's, fetched by the payload's id.
        deserialize = AvroDeserializer(client)
    elif fmt == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
        from google.protobuf.json_format import MessageToDict

        inner = ProtobufDeserializer(protobuf_class(), {"use.deprecated.format": False})

        def deserialize(value, ctx):
            return MessageToDict(inner(value, ctx), preserving_proto_field_name=True)
    else:
        sys.exit(f"unknown format {fmt!r}: avro | protobuf")
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": f"registry-reader-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    read = 0
    deadline = time.time() + 30
    while read < int(count) and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            sys.exit(f"reading {topic}: {msg.error()}")
        value = deserialize(msg.value(), SerializationContext(topic, MessageField.VALUE))
        headers = {k: v.decode("utf-8", "replace") for k, v in (msg.headers() or [])}
        key = msg.key().decode("utf-8", "replace") if msg.key() else None
        print(json.dumps({"key": key, "value": value, "headers": headers}), flush=True)
        read += 1
    consumer.close()
    if read < int(count):
        sys.exit(f"read {read} of {count} records from {topic} in 30 s")


if __name__ == "__main__":
    commands = {"kafka": kafka, "rabbitmq": rabbitmq, "read-kafka": read_kafka}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
