"""Consume a Shoal queue over AMQP 1.0 with Qpid Proton, checking the group promise.

    python examples/amqp_group_consumer.py --url amqp://127.0.0.1:5672 --queue orders

Shoal's own Python client speaks STOMP; AMQP applications use Proton (or
any AMQP 1.0 client) directly. Group fields are native in AMQP: the
message's ``group-id`` and ``group-sequence`` are STOMP's ``JMSXGroupID`` and
``JMSXGroupSeq``, so this consumer reads groups that grouped_producer.py
sends over STOMP. Run two at once, started before the producer: each group
goes to one of them, in order. The link's credit is the consumer's prefetch;
``accept`` is the ACK. It waits up to --wait seconds for the first message
and stops --timeout seconds after the last one.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from proton import Timeout
from proton.utils import BlockingConnection


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://127.0.0.1:5672")
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--credit", type=int, default=10, help="prefetch: the link's credit")
    parser.add_argument("--wait", type=float, default=30.0,
                        help="seconds to wait for the first message")
    parser.add_argument("--timeout", type=float, default=2.0,
                        help="then stop after this many seconds without a message")
    args = parser.parse_args()

    last_seq: dict[str, int] = defaultdict(int)
    handled: dict[str, int] = defaultdict(int)
    out_of_order = 0
    conn = BlockingConnection(args.url)
    try:
        receiver = conn.create_receiver(args.queue, credit=args.credit)
        wait = args.wait
        while True:
            try:
                msg = receiver.receive(timeout=wait)
            except Timeout:
                break
            wait = args.timeout
            group, seq = msg.group_id, msg.group_sequence
            if msg.first_acquirer and seq != last_seq[group] + 1:
                out_of_order += 1
            last_seq[group] = max(last_seq[group], seq)
            handled[group] += 1
            body = msg.body if isinstance(msg.body, str) else bytes(msg.body).decode()
            assert json.loads(body)["symbol"] == group
            receiver.accept()
    finally:
        conn.close()
    print(json.dumps({"groups": dict(handled), "out_of_order": out_of_order}))
    return 1 if out_of_order else 0


if __name__ == "__main__":
    raise SystemExit(main())
