"""Pins how the SQS emulator hands a FIFO group out again after its
visibility times out, with a plain client (boto3, no framework code)
against moto in this process, on a clock that moves forward a little at
every read, so that the interleaving that broke a group's order in CI is
made on purpose instead of waited for.

    python sqs_fifo_probe.py moto       # moto 5.2.6 as published
    python sqs_fifo_probe.py launcher   # with scripts/services.d/moto_server.py's changes

For each of a range of instants around the moment a group's messages time
out, it sends a group of five messages to a fresh queue, receives all five
together (visibility 1 s), moves the clock to that instant and receives
again. SQS hands the group out again starting with its first message, or
not at all. Prints one line per instant where the emulator handed a later
message out first, then "inversions N of M".

moto reads the clock once per message it looks at: five messages received
together time out a little apart, and a receive running while the last
one times out skips the first four (their group still counts one in
flight) and then hands out the last one, which it has just found timed out
(CI saw a group's 11 to 15, then 10). tests/sqs_emulator.rs expects
inversions from `moto` and none from `launcher`.
"""

import json
import os
import sys
import time

from moto.sqs import models

# A clock that moves 0.25 ms at every read: what a busy server's threads
# see, made repeatable.
_now = [time.time() * 1000]


def _ticking_clock():
    _now[0] += 0.25
    return _now[0]


models.unix_time_millis = _ticking_clock

if len(sys.argv) != 2 or sys.argv[1] not in ("moto", "launcher"):
    sys.exit(__doc__)
if sys.argv[1] == "launcher":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "services.d"))
    import moto_server  # noqa: E402,F401  (applies the launcher's changes)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

GROUP = 5


def one_trial(sqs, backend, trial, offset):
    name = f"probe{trial}.fifo"
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
    sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(s), "MessageBody": json.dumps({"seq": s}), "MessageGroupId": "g", "MessageDeduplicationId": f"{trial}-{s}"}
            for s in range(GROUP)
        ],
    )
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=1, WaitTimeSeconds=0)
    assert len(first.get("Messages", [])) == GROUP, "the first receive takes the whole group"
    queue = backend.get_queue(name)
    last_timeout = max(m.visible_at for m in queue._messages)
    _now[0] = last_timeout + offset
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30, WaitTimeSeconds=0)
    seqs = [json.loads(m["Body"])["seq"] for m in again.get("Messages", [])]
    sqs.delete_queue(QueueUrl=url)
    return seqs


def main():
    inversions = trials = 0
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
        backend = models.sqs_backends["123456789012"]["us-east-1"]
        # Instants from 5 ms before the group's last timeout to 2 ms after,
        # in quarter milliseconds.
        for step in range(-20, 9):
            trials += 1
            seqs = one_trial(sqs, backend, trials, step / 4)
            if seqs and seqs != list(range(len(seqs))):
                inversions += 1
                print(f"{step / 4:+.2f} ms from the last timeout: the group came back as {seqs}", flush=True)
    print(f"inversions {inversions} of {trials}", flush=True)


if __name__ == "__main__":
    main()
