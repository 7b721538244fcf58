"""An outside producer for the SQS tests: boto3, as another team's service
would send, with no framework attributes at all.

    python sqs_producer.py ENDPOINT QUEUE_URL GROUPS PER_GROUP

Sends GROUPS x PER_GROUP JSON jobs ({"id", "key", "seq"}) to a FIFO queue,
group = key, deduplication id = the job id, interleaving the groups, in
batches of ten, each message with a Number and a Binary attribute (what
other clients send; the consumer must read them, never crash). Prints one
line per batch sent, then "done N".
"""

import json
import sys
import uuid

import boto3


def main() -> None:
    endpoint, queue_url, groups, per_group = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    jobs = []
    for seq in range(per_group):
        for g in range(groups):
            jobs.append({"id": str(uuid.uuid4()), "key": f"g{g}", "seq": seq})
    sent = 0
    for start in range(0, len(jobs), 10):
        entries = []
        for i, job in enumerate(jobs[start : start + 10]):
            entries.append(
                {
                    "Id": str(i),
                    "MessageBody": json.dumps(job),
                    "MessageGroupId": job["key"],
                    "MessageDeduplicationId": job["id"],
                    "MessageAttributes": {
                        "amount": {"DataType": "Number", "StringValue": str(job["seq"]) + ".5"},
                        "blob": {"DataType": "Binary", "BinaryValue": bytes([0, 255, job["seq"] % 256])},
                    },
                }
            )
        out = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        if out.get("Failed"):
            print(f"failed {out['Failed']}", flush=True)
            sys.exit(1)
        sent += len(entries)
        print(f"sent {sent}", flush=True)
    print(f"done {sent}", flush=True)


if __name__ == "__main__":
    main()
