"""The official CloudEvents Python SDK as an outside producer and reader, for
the interop tests (tests/cloudevents_sdk.rs). Runs on the python
`scripts/tools cloudevents-sdk` prints.

  read-kafka BROKERS TOPIC COUNT      parse COUNT records with the SDK's
                                      kafka binding (from_kafka: binary or
                                      structured), one JSON line each
  write-kafka BROKERS TOPIC MODE ID   produce one event with the SDK,
                                      MODE binary | structured
  read-rabbitmq URL QUEUE COUNT       the same with the SDK's rabbitmq
  write-rabbitmq URL QUEUE MODE ID    binding, through pika

Each event read is printed as {"attributes": {...}, "data": ...} on stdout;
a message the SDK refuses fails the script with the SDK's error.
"""

import json
import sys
import time
import uuid
from datetime import datetime, timezone

from cloudevents.core.bindings import kafka, rabbitmq
from cloudevents.core.v1.event import CloudEvent

TYPE = "com.example.sdk.OrderPlaced"
SOURCE = "/python-sdk"


def show(event):
    attributes = {
        k: (v.isoformat() if isinstance(v, datetime) else v)
        for k, v in event.get_attributes().items()
    }
    data = event.get_data()
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    print(json.dumps({"attributes": attributes, "data": data}), flush=True)


def event(event_id):
    return CloudEvent(
        attributes={
            "id": event_id,
            "type": TYPE,
            "source": SOURCE,
            "subject": "order-1",
            "time": datetime.now(timezone.utc),
            "datacontenttype": "application/json",
        },
        data={"order": event_id, "total": 42},
    )


def read_kafka(brokers, topic, count):
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": f"cloudevents-sdk-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    seen = 0
    try:
        while seen < count:
            if time.monotonic() > deadline:
                sys.exit(f"read {seen} of {count} records from {topic} within 60 s")
            record = consumer.poll(1.0)
            if record is None:
                continue
            if record.error():
                sys.exit(f"kafka: {record.error()}")
            message = kafka.KafkaMessage(
                headers={k: (v or b"") for k, v in (record.headers() or [])},
                key=record.key(),
                value=record.value() or b"",
            )
            show(kafka.from_kafka_event(message))
            seen += 1
    finally:
        consumer.close()


def write_kafka(brokers, topic, mode, event_id):
    from confluent_kafka import Producer

    ce = event(event_id)
    if mode == "binary":
        message = kafka.to_binary_event(ce)
    else:
        message = kafka.to_structured_event(ce)
    producer = Producer({"bootstrap.servers": brokers})
    failures = []
    producer.produce(
        topic,
        value=message.value,
        key=message.key,
        headers=list(message.headers.items()),
        on_delivery=lambda err, _msg: err and failures.append(err),
    )
    if producer.flush(30) != 0 or failures:
        sys.exit(f"kafka: the record was not delivered: {failures}")


def read_rabbitmq(url, queue, count):
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    deadline = time.monotonic() + 60
    seen = 0
    while seen < count:
        if time.monotonic() > deadline:
            sys.exit(f"read {seen} of {count} messages from {queue} within 60 s")
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            time.sleep(0.2)
            continue
        headers = {
            k: (v.decode("utf-8") if isinstance(v, bytes) else str(v))
            for k, v in (properties.headers or {}).items()
        }
        message = rabbitmq.RabbitMQMessage(
            headers=headers, content_type=properties.content_type, body=body
        )
        show(rabbitmq.from_rabbitmq_event(message))
        seen += 1
    connection.close()


def write_rabbitmq(url, queue, mode, event_id):
    import pika

    ce = event(event_id)
    if mode == "binary":
        message = rabbitmq.to_binary_event(ce)
    else:
        message = rabbitmq.to_structured_event(ce)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish(
        exchange="",
        routing_key=queue,
        body=message.body,
        properties=pika.BasicProperties(
            headers=message.headers,
            content_type=message.content_type,
            delivery_mode=2,
        ),
        mandatory=True,
    )
    connection.close()


def main(argv):
    commands = {
        "read-kafka": lambda b, t, n: read_kafka(b, t, int(n)),
        "write-kafka": write_kafka,
        "read-rabbitmq": lambda u, q, n: read_rabbitmq(u, q, int(n)),
        "write-rabbitmq": write_rabbitmq,
    }
    if len(argv) < 2 or argv[1] not in commands:
        sys.exit(__doc__)
    commands[argv[1]](*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
