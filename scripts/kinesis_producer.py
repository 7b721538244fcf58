"""An outside producer for the Kinesis tests: boto3, as the standard's
producer sends (`put_record` with `PartitionKey` = the aggregate id), with
no framework envelope at all.

    python kinesis_producer.py ENDPOINT STREAM KEYS PER_KEY

Sends KEYS x PER_KEY JSON jobs ({"id", "key", "seq"}) to the stream, one
`put_record` each, partition key = the job's key, interleaving the keys,
each key's next record sent after the previous one is stored (so a key's
order on the stream is its `seq`). Prints one line per ten sent, then
"done N".
"""

import json
import sys
import uuid

import boto3


def main() -> None:
    endpoint, stream, keys, per_key = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    kinesis = boto3.client(
        "kinesis",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    sent = 0
    for seq in range(per_key):
        for k in range(keys):
            job = {"id": str(uuid.uuid4()), "key": f"k{k}", "seq": seq}
            kinesis.put_record(StreamName=stream, Data=json.dumps(job).encode(), PartitionKey=job["key"])
            sent += 1
            if sent % 10 == 0:
                print(f"sent {sent}", flush=True)
    print(f"done {sent}", flush=True)


if __name__ == "__main__":
    main()
