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

This launcher runs each receive as passes of moto's own loop without
waiting (a fresh snapshot each pass), one pass at a time across threads,
forgets every timed-out message before each pass, and waits between passes
itself; and a visibility change that hides a message counts it in flight
again. The tests that kill consumers then see SQS's order, not moto's.
"""

import sys
import threading
import time

from moto.sqs import models

_receive = models.SQSBackend.receive_message
_one_pass = threading.Lock()


def receive_message(
    self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None
):
    queue = self.get_queue(queue_name)
    deadline = time.monotonic() + (wait_seconds_timeout or 0)
    while True:
        with _one_pass:
            for message in list(queue.pending_messages):
                if message.visible:
                    queue.pending_messages.remove(message)
            got = _receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
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


models.SQSBackend.receive_message = receive_message
# The batch call goes through this one for each entry.
models.SQSBackend.change_message_visibility = change_message_visibility

from moto.server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
