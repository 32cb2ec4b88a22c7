"""An asyncio worker: read orders, add a price, forward them, atomically.

    python examples/async_enricher.py --timeout 2

Each order is forwarded to /queue/priced and acknowledged in one STOMP
transaction, so a crash never loses an order nor forwards it twice. The
forwarded message keeps the order's group, so downstream consumers see
each symbol in order too.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import shoal.client.aio

PRICES = {"AAPL": 190.5, "IBM": 170.25, "MSFT": 410.0}


async def run(url: str, source: str, target: str, timeout: float) -> int:
    forwarded = 0
    async with (
        shoal.client.aio.connect(url) as c,
        c.subscribe(source, ack="client-individual", prefetch=20) as sub,
    ):
        while (msg := await sub.receive(timeout)) is not None:
            order = json.loads(msg.body)
            order["price"] = PRICES.get(order["symbol"])
            async with c.transaction() as tx:
                await tx.send(target, json.dumps(order), group=msg.group,
                              group_seq=msg.group_seq, persistent=True)
                await tx.ack(msg)
            forwarded += 1
    return forwarded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="stomp://127.0.0.1:61613")
    parser.add_argument("--source", default="/queue/orders")
    parser.add_argument("--target", default="/queue/priced")
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args()
    n = asyncio.run(run(args.url, args.source, args.target, args.timeout))
    print(f"forwarded {n} orders to {args.target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
