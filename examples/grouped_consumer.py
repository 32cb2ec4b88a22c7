"""Consume orders and check Shoal's group promise as they arrive.

    python examples/grouped_consumer.py --timeout 2

Run several at once, started before the orders arrive: each symbol's orders
go to one consumer at a time and arrive in the order they were sent (their
JMSXGroupSeq goes 1, 2, 3, ... per symbol). The script waits up to --wait
seconds for the first order, stops --timeout seconds after the last one,
prints which groups it handled and exits 1 if it ever saw a group's
messages out of order.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import shoal.client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="stomp://127.0.0.1:61613")
    parser.add_argument("--queue", default="/queue/orders")
    parser.add_argument("--wait", type=float, default=30.0,
                        help="seconds to wait for the first message")
    parser.add_argument("--timeout", type=float, default=2.0,
                        help="then stop after this many seconds without a message")
    args = parser.parse_args()

    last_seq: dict[str, int] = defaultdict(int)
    handled: dict[str, int] = defaultdict(int)
    out_of_order = 0
    with shoal.client.connect(args.url) as c:
        sub = c.subscribe(args.queue, ack="client-individual", prefetch=10)
        wait = args.wait
        while (msg := sub.receive(wait)) is not None:
            wait = args.timeout
            order = json.loads(msg.body)
            seq = msg.group_seq or 0
            if not msg.redelivered and seq != last_seq[msg.group] + 1:
                out_of_order += 1
            last_seq[msg.group] = max(last_seq[msg.group], seq)
            handled[msg.group] += 1
            assert order["symbol"] == msg.group
            msg.ack()
    summary = {"groups": dict(handled), "out_of_order": out_of_order}
    print(json.dumps(summary))
    return 1 if out_of_order else 0


if __name__ == "__main__":
    raise SystemExit(main())
