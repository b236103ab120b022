"""A producer or consumer process on the embedded filesystem broker (kombu only, no Django).

Usage:
  python -m tests.scripts.broker_peer produce BROKER_DIR FIRST COUNT
  python -m tests.scripts.broker_peer consume BROKER_DIR IDLE_SECONDS   (prints the received numbers, JSON)
"""

import json
import sys
import time
from pathlib import Path

from kombu import Connection, Consumer, Exchange, Producer, Queue

from engram_site.broker import transport_options

QUEUE = Queue("peers", Exchange("peers", type="direct"), routing_key="peers")


def connection(root: str) -> Connection:
    options = transport_options(Path(root))
    options["polling_interval"] = 0.01
    return Connection("filesystem://", transport="engram_site.broker:Transport", transport_options=options)


def produce(root: str, first: int, count: int) -> None:
    with connection(root) as conn:
        producer = Producer(conn.default_channel)
        for i in range(first, first + count):
            # A payload large enough that a reader could catch a half-written file.
            producer.publish(
                {"i": i, "padding": "x" * 50_000}, exchange=QUEUE.exchange, routing_key="peers", declare=[QUEUE]
            )


def consume(root: str, idle_seconds: float) -> None:
    received: list[int] = []
    with connection(root) as conn:

        def on_message(body, message):
            received.append(body["i"])
            message.ack()

        with Consumer(conn, [QUEUE], callbacks=[on_message], accept=["json"]):
            last = time.time()
            while time.time() - last < idle_seconds:
                try:
                    conn.drain_events(timeout=0.05)
                    last = time.time()
                except TimeoutError:
                    pass
    print(json.dumps(received))


if __name__ == "__main__":
    mode, root, *rest = sys.argv[1:]
    if mode == "produce":
        produce(root, int(rest[0]), int(rest[1]))
    else:
        consume(root, float(rest[0]))
