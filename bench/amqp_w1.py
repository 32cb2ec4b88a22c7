"""AW1: W1's shape over AMQP 1.0 (Qpid Proton clients) against Shoal, one run.

    .venv/bin/python -m bench.amqp_w1 --messages 50000

W1 (bench/workloads.py): 256-byte non-persistent messages in 100 groups,
4 consumers acknowledging each message (AMQP: accepted), prefetch 1000
(AMQP: link credit 1000, topped up by Proton's MessagingHandler), one
producer that does not wait for answers (AMQP: pre-settled transfers, as
W1's STOMP producer sends without receipts). Producer and consumers are
separate processes using Proton's reactor. Prints one JSON object:
msg/s (first send to last receive), broker CPU seconds per message (its
process's utime+stime over the run), and an order check per group.

The STOMP figure for the same shape and count comes from the load generator:
    .venv/bin/python -m bench.loadgen --broker shoal --messages 50000 --groups 100 \
        --consumers 4 --ack client-individual --prefetch 1000 --size 256 --no-persistent
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

IDLE_STOP = 2.0  # s without a message: a consumer is done


def _consume(port: int, address: str, prefetch: int) -> None:
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Consumer(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=prefetch, auto_accept=True)
            self.count = 0
            self.first = self.last = 0.0
            self.last_seq: dict[str, int] = {}
            self.out_of_order = 0

        def on_start(self, event) -> None:
            conn = event.container.connect(f"amqp://127.0.0.1:{port}", reconnect=False)
            event.container.create_receiver(conn, address)
            event.container.schedule(IDLE_STOP, self)
            print("ready", flush=True)

        def on_message(self, event) -> None:
            now = time.time()
            if not self.count:
                self.first = now
            self.count += 1
            self.last = now
            m = event.message
            seq = m.group_sequence
            if seq <= self.last_seq.get(m.group_id, 0):
                self.out_of_order += 1
            self.last_seq[m.group_id] = seq

        def on_timer_task(self, event) -> None:
            if self.count and time.time() - self.last >= IDLE_STOP:
                event.container.stop()
                return
            event.container.schedule(0.5, self)

    c = Consumer()
    Container(c).run()
    print(
        json.dumps(
            {
                "count": c.count,
                "first": c.first,
                "last": c.last,
                "out_of_order": c.out_of_order,
                "groups": len(c.last_seq),
            }
        ),
        flush=True,
    )


def _produce(port: int, address: str, messages: int, groups: int, size: int) -> None:
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import AtMostOnce, Container

    body = b"x" * size

    class Producer(MessagingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.sent = 0
            self.seqs = [0] * groups
            self.start = self.end = 0.0

        def on_start(self, event) -> None:
            conn = event.container.connect(f"amqp://127.0.0.1:{port}", reconnect=False)
            event.container.create_sender(conn, address, options=AtMostOnce())

        def on_sendable(self, event) -> None:
            if not self.start:
                self.start = time.time()
            sender = event.sender
            while sender.credit and self.sent < messages:
                g = self.sent % groups
                self.seqs[g] += 1
                sender.send(Message(body=body, group_id=f"g{g}", group_sequence=self.seqs[g]))
                self.sent += 1
            if self.sent == messages:
                self.end = time.time()
                event.connection.close()

    p = Producer()
    Container(p).run()
    print(json.dumps({"sent": p.sent, "start": p.start, "end": p.end}), flush=True)


def run(messages: int, groups: int, consumers: int, prefetch: int, size: int) -> dict:
    from bench.peers.common import free_port
    from bench.peers.shoal import start_shoal

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="shoal-aw1-") as d:
        h = start_shoal(d, extra_args=["--amqp", f"127.0.0.1:{port}"])
        try:
            return drive(port, h.cpu_s, messages, groups, consumers, prefetch, size)
        finally:
            h.stop()


def drive(
    port: int,
    cpu_s: Callable[[], float],
    messages: int,
    groups: int,
    consumers: int,
    prefetch: int,
    size: int,
) -> dict:
    """AW1's clients against a broker listening for AMQP on ``port``; ``cpu_s``
    reads the broker's CPU seconds so far."""
    me = [sys.executable, "-m", "bench.amqp_w1"]
    cons = [
        subprocess.Popen(
            [*me, "consume", str(port), "aw1", str(prefetch)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(consumers)
    ]
    for c in cons:
        assert c.stdout is not None and c.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # the links are attached and have credit
    cpu0 = cpu_s()
    prod = subprocess.run(
        [*me, "produce", str(port), "aw1", str(messages), str(groups), str(size)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    sent = json.loads(prod.stdout.strip().splitlines()[-1])
    reports = [json.loads(c.communicate(timeout=600)[0].strip().splitlines()[-1]) for c in cons]
    cpu = cpu_s() - cpu0
    received = sum(r["count"] for r in reports)
    last = max(r["last"] for r in reports if r["count"])
    elapsed = last - sent["start"]
    return {
        "workload": "AW1 (W1 over AMQP 1.0, Proton clients)",
        "messages": messages,
        "received": received,
        "groups": groups,
        "consumers": consumers,
        "prefetch": prefetch,
        "size": size,
        "msg_per_s": round(received / elapsed, 1),
        "broker_cpu_us_per_msg": round(cpu / max(1, received) * 1e6, 1),
        "out_of_order": sum(r["out_of_order"] for r in reports),
        "groups_per_consumer": [r["groups"] for r in reports],
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "consume":
        _consume(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "produce":
        _produce(int(sys.argv[2]), sys.argv[3], *map(int, sys.argv[4:7]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--prefetch", type=int, default=1000)
    p.add_argument("--size", type=int, default=256)
    a = p.parse_args()
    print(json.dumps(run(a.messages, a.groups, a.consumers, a.prefetch, a.size), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
