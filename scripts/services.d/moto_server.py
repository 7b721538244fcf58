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

This launcher runs each receive as passes of moto's own loop without
waiting (a fresh snapshot each pass), one pass at a time across threads,
forgets every timed-out message before each pass, and waits between passes
itself. The tests that kill consumers then see SQS's order, not moto's.
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


models.SQSBackend.receive_message = receive_message

from moto.server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
