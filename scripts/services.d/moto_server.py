"""moto's server, with its SQS FIFO receive made to keep a group's order
(moto 5.2.6). Everything else is moto's.

moto slips a FIFO group's order in two ways that SQS does not:

* When several messages of a group become visible again at once (their
  visibility timed out: a consumer died holding them), its receive loop
  forgets them one at a time as it meets them, and skips each while the
  group's later ones still count as in flight: it hands out the group's
  last message first.
* A long poll takes its snapshot of the groups in flight once, when it
  starts, and keeps it while it waits: a receive left waiting by a consumer
  that died can hand out a group's next message while another consumer
  holds the one before.

* A message whose visibility timed out, and that its holder then extends
  (`ChangeMessageVisibility` with its receipt, before anyone received it
  again), is in flight again on SQS, and its group locked behind it. moto
  makes it invisible but no longer counts it in flight: when its holder
  dies, the group's later messages, timing out sooner, are handed out
  before it (seen in CI: a group's 15 to 21, then 14).

* Within one pass moto reads the clock again for every message. When a
  group's messages time out a few milliseconds apart (they were received
  in one call, each stamped as moto reached it), a pass could skip the
  group's first ones, still counted in flight, and then meet its last one
  just timed out: moto forgets it, finds the group free, and hands it out
  ahead of the others (seen in CI: a group's 11 to 15, then 10; recorded
  here: 6 to 9 skipped, 10 to 13 handed out, all five received together
  3 s before).

* moto takes no lock around a delete or a send. A delete takes the
  message out of the in-flight set, then rebuilds the queue's list: a
  receive in between finds the group free while the message is still on
  the queue; a send in between can be lost; two deletes at once can bring
  one of the messages back.

This launcher runs each receive as passes of moto's own loop without
waiting (a fresh snapshot each pass), one pass at a time across threads,
with the clock stopped for the pass (every message is judged visible or
not at one instant), forgets every timed-out message before each pass, and
waits between passes itself; a visibility change that hides a message
counts it in flight again; and passes, visibility changes, deletes and
sends take one lock, so each sees the queue whole. A receive that still
hands a group's message out ahead of an earlier one is written to
MOTO_FIFO_AUDIT (scripts/services.d/sqs.sh sets it). The tests that kill consumers then see SQS's
order, not moto's (scripts/sqs_fifo_probe.py checks it with a plain
client).
"""

import json
import os
import sys
import threading
import time

from moto.sqs import models

_receive = models.SQSBackend.receive_message
# Held by a receive's pass, a visibility change, a delete and a send: moto
# itself takes no lock around them, and a delete rebuilds the queue's list
# of messages (a send meanwhile can be lost, two deletes at once can bring
# a message back) after taking the message out of the in-flight set (a
# pass meanwhile finds its group free while it is still on the queue).
# Reentrant: a pass that moves a message to the dead-letter queue sends it.
_one_pass = threading.RLock()

# The instant a pass runs at, for the thread running it; every other
# thread reads the clock.
_pass_clock = threading.local()
_clock = models.unix_time_millis


def _unix_time_millis():
    frozen = getattr(_pass_clock, "now", None)
    return _clock() if frozen is None else frozen


models.unix_time_millis = _unix_time_millis


# Where a receive that broke a group's order is written, one JSON line
# each (the tests that check a group's order read it, to tell the
# emulator's fault from the consumer's): MOTO_FIFO_AUDIT, or stderr.
_audit_path = os.environ.get("MOTO_FIFO_AUDIT")


def _audit(queue_name, queue, got):
    """Records each message of `got` handed out while an earlier message of
    its group is still on the queue and not handed out before it in `got`:
    SQS never does that."""
    handed = {m.id: i for i, m in enumerate(got)}
    groups = {m.group_id for m in got}
    # The earliest message of each group not handed out by this receive.
    waiting = {}
    broken = []
    for m in queue._messages:
        if m.group_id not in groups:
            continue
        i = handed.get(m.id)
        if i is None:
            waiting.setdefault(m.group_id, m)
        elif m.group_id in waiting:
            broken.append({"handed": _body(m), "earlier": _body(waiting[m.group_id])})
    if not broken:
        return
    line = json.dumps({"queue": queue_name, "at_ms": int(_clock()), "broken": broken})
    if _audit_path:
        with open(_audit_path, "a") as f:
            f.write(line + "\n")
    else:
        sys.stderr.write(f"FIFO order broken: {line}\n")


def _body(message):
    return message.body if len(message.body) <= 200 else message.body[:200] + "..."


def receive_message(
    self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None
):
    queue = self.get_queue(queue_name)
    deadline = time.monotonic() + (wait_seconds_timeout or 0)
    while True:
        with _one_pass:
            _pass_clock.now = _clock()
            try:
                for message in list(queue.pending_messages):
                    if message.visible:
                        queue.pending_messages.remove(message)
                got = _receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
                if got and queue.fifo_queue:
                    _audit(queue_name, queue, got)
            finally:
                _pass_clock.now = None
        if got or time.monotonic() >= deadline:
            return got
        time.sleep(0.02)


_change_visibility = models.SQSBackend.change_message_visibility


def change_message_visibility(self, queue_name, receipt_handle, visibility_timeout):
    with _one_pass:
        _change_visibility(self, queue_name, receipt_handle, visibility_timeout)
        if int(visibility_timeout) > 0:
            queue = self.get_queue(queue_name)
            for message in queue._messages:
                if message.had_receipt_handle(receipt_handle):
                    queue.pending_messages.add(message)
                    break


_delete = models.SQSBackend.delete_message


def delete_message(self, queue_name, receipt_handle):
    with _one_pass:
        _delete(self, queue_name, receipt_handle)


_add = models.Queue.add_message


def add_message(self, message):
    with _one_pass:
        _add(self, message)


models.SQSBackend.receive_message = receive_message
# The batch calls go through these for each entry.
models.SQSBackend.delete_message = delete_message
models.Queue.add_message = add_message
models.SQSBackend.change_message_visibility = change_message_visibility

from moto.server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
