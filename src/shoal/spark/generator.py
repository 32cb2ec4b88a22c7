"""The order generator of ``shoal pipeline matching``: deterministic, resumable, receipted.

Orders go to the broker over STOMP with :mod:`shoal.client`, persistent, one
receipt per window: the receipt of a window's last order means the broker
has stored the whole window (a connection delivers in order).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from shoal.spark.client import log_end_total
from shoal.spark.jobs import ORDERS_ARCHIVE_QUEUE, ORDERS_TOPIC


def stomp_url(addr: str) -> str:
    """``host:port`` (as the CLI takes it) -> a ``stomp://`` URL; URLs pass through."""
    if "://" in addr and not addr.startswith("tcp://"):
        return addr
    return "stomp://" + addr.removeprefix("tcp://").rstrip("/")


def connect_producer(addr: str, user: str | None = None, password: str | None = None) -> Any:
    """A connected :class:`shoal.client.Client` for bulk sends (no heart-beats, no group)."""
    import shoal.client

    creds: dict[str, Any] = {}
    if user is not None:
        creds = {"login": user, "passcode": password or ""}
    return shoal.client.connect(stomp_url(addr), heartbeat=(0, 0), timeout=120.0, **creds)


def publish_orders(
    stomp: str,
    orders: int,
    symbols: int,
    *,
    seed: int = 7,
    start: int = 0,
    destination: str = "/topic/" + ORDERS_TOPIC,
    window: int = 2000,
    rate: float = 0.0,
    user: str | None = None,
    password: str | None = None,
    progress: list[int] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Publish orders ``start..orders-1`` (persistent, receipted per window); returns the count.

    ``rate`` > 0 paces the generator (orders per second). ``progress[0]``
    is updated with the number of orders the broker has confirmed.
    """
    from shoal.spark.matching import encode_order, generate_orders

    sent = 0
    t0 = time.monotonic()
    with connect_producer(stomp, user, password) as client:
        for i, (sym, gseq, oid, side, price, qty) in enumerate(
            generate_orders(orders, symbols, seed, start), start
        ):
            if stop is not None and stop.is_set():
                break
            last = (i + 1) % window == 0 or i + 1 == orders
            client.send(
                destination,
                encode_order(oid, side, price, qty),
                group=sym,
                group_seq=gseq,
                persistent=True,
                receipt=last,
            )
            sent += 1
            if last:
                if progress is not None:
                    progress[0] = i + 1
                if rate > 0:
                    ahead = (i + 1 - start) / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
    return sent


def generate_resuming(
    args: argparse.Namespace,
    http: Any,
    progress: list[int],
    stop: threading.Event,
    *,
    give_up_after: float = 120.0,
) -> None:
    """Publish until the broker holds ``args.orders`` orders, resuming after broker restarts.

    The generator is deterministic, so after a lost connection it asks the
    broker how many orders it kept (the end offsets of ``orders.archive``)
    and goes on from there: no order is lost or published twice, even if the
    broker lost its unsynced tail.
    """
    from shoal.client import ClientError

    deadline = None
    while not stop.is_set():
        try:
            start = log_end_total(http, ORDERS_ARCHIVE_QUEUE)
            progress[0] = start
            if start >= args.orders:
                return
            publish_orders(
                args.stomp,
                args.orders,
                args.symbols,
                seed=args.seed,
                start=start,
                rate=args.rate,
                user=args.user,
                password=args.password,
                progress=progress,
                stop=stop,
            )
            deadline = None
        except (OSError, RuntimeError, ClientError) as exc:  # BrokerUnavailable, lost STOMP, ...
            now = time.monotonic()
            deadline = deadline or now + give_up_after
            if now > deadline:
                raise
            print(f"generator: {exc}; resuming when the broker is back", flush=True)
            time.sleep(1.0)
