"""Send orders for a few symbols, one message group per symbol.

    python examples/grouped_producer.py --count 100 --symbols AAPL,IBM,MSFT

Every order carries its symbol as the group id (JMSXGroupID) and a
per-symbol sequence number (JMSXGroupSeq, numbered by the Producer), is
persistent, and is sent with a receipt: when this script exits 0, every
order is on the broker's disk.
"""

from __future__ import annotations

import argparse
import json

import shoal.client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="stomp://127.0.0.1:61613")
    parser.add_argument("--queue", default="/queue/orders")
    parser.add_argument("--count", type=int, default=30, help="orders in total")
    parser.add_argument("--symbols", default="AAPL,IBM,MSFT")
    args = parser.parse_args()

    symbols = args.symbols.split(",")
    with shoal.client.connect(args.url) as c:
        producers = {s: shoal.client.Producer(c, group=s, persistent=True) for s in symbols}
        for i in range(args.count):
            symbol = symbols[i % len(symbols)]
            order = {"symbol": symbol, "n": i, "qty": 10 + i}
            producers[symbol].send(args.queue, json.dumps(order), receipt=True,
                                   content_type="application/json")
    print(f"sent {args.count} orders for {len(symbols)} symbols to {args.queue}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
