"""Order matching with price-time priority, and a plain-Python reference.

The example from the seeds: bids and offers for stock symbols, the group id
is the symbol, and one consumer keeps each symbol's order book in memory.

An order is ``(order id, side, price, qty)`` with side ``"B"`` (bid) or
``"S"`` (offer) and integer prices (ticks). An incoming order trades against
the opposite side while the prices cross: best price first, and at one price
the order that arrived first (price-time priority). Each trade is at the
resting order's price. What is left of the incoming order rests in the book
(limit orders, no cancels).

Two independent implementations:

* :class:`OrderBook` (heaps) is what the Spark job keeps as per-symbol state;
* :func:`reference_trades` (sorted lists, one pass over all orders) is the
  plain-Python reference the audit compares the job's output with.

A trade is ``(symbol, trade_seq, aggressor_oid, buy_oid, sell_oid, price, qty)``;
``trade_seq`` counts a symbol's trades from 1.
"""

from __future__ import annotations

import heapq
import random
from bisect import insort
from collections.abc import Iterable, Iterator
from typing import Any

Trade = tuple[str, int, int, int, int, int, int]
TRADE_FIELDS = ("symbol", "trade_seq", "aggressor_oid", "buy_oid", "sell_oid", "price", "qty")


class OrderBook:
    """One symbol's book: heaps of [key price, arrival, oid, remaining qty]."""

    __slots__ = ("bids", "asks", "arrivals", "trades")

    def __init__(self) -> None:
        self.bids: list[list[int]] = []  # [-price, arrival, oid, qty]
        self.asks: list[list[int]] = []  # [price, arrival, oid, qty]
        self.arrivals = 0
        self.trades = 0  # trades so far: the last trade_seq

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.bids, self.asks, self.arrivals, self.trades)

    def __setstate__(self, s: tuple[Any, ...]) -> None:
        self.bids, self.asks, self.arrivals, self.trades = s

    def submit(self, symbol: str, oid: int, side: str, price: int, qty: int) -> list[Trade]:
        out: list[Trade] = []
        if side == "B":
            book = self.asks
            while qty > 0 and book and book[0][0] <= price:
                best = book[0]
                q = min(qty, best[3])
                self.trades += 1
                out.append((symbol, self.trades, oid, oid, best[2], best[0], q))
                qty -= q
                best[3] -= q
                if best[3] == 0:
                    heapq.heappop(book)
            if qty > 0:
                self.arrivals += 1
                heapq.heappush(self.bids, [-price, self.arrivals, oid, qty])
        elif side == "S":
            book = self.bids
            while qty > 0 and book and -book[0][0] >= price:
                best = book[0]
                q = min(qty, best[3])
                self.trades += 1
                out.append((symbol, self.trades, oid, best[2], oid, -best[0], q))
                qty -= q
                best[3] -= q
                if best[3] == 0:
                    heapq.heappop(book)
            if qty > 0:
                self.arrivals += 1
                heapq.heappush(self.asks, [price, self.arrivals, oid, qty])
        else:
            raise ValueError(f"side must be 'B' or 'S', not {side!r}")
        return out

    def depth(self) -> tuple[int, int]:
        return len(self.bids), len(self.asks)


def reference_trades(orders: Iterable[tuple[str, int, str, int, int]]) -> list[Trade]:
    """All trades of ``orders`` = (symbol, oid, side, price, qty), in each symbol's order.

    Deliberately simple and separate from :class:`OrderBook`: each side is a
    list kept sorted by (price priority, arrival) with ``bisect.insort``.
    """
    books: dict[str, tuple[list[list[int]], list[list[int]], list[int]]] = {}
    trades: list[Trade] = []
    for symbol, oid, side, price, qty in orders:
        book = books.get(symbol)
        if book is None:
            book = books[symbol] = ([], [], [0, 0])  # bids, asks, [arrival, trade count]
        bids, asks, counters = book
        if side == "B":
            while qty and asks and asks[0][0] <= price:
                best = asks[0]
                q = min(qty, best[3])
                counters[1] += 1
                trades.append((symbol, counters[1], oid, oid, best[2], best[0], q))
                qty -= q
                best[3] -= q
                if not best[3]:
                    asks.pop(0)
            if qty:
                counters[0] += 1
                insort(bids, [-price, counters[0], oid, qty])
        else:
            while qty and bids and -bids[0][0] >= price:
                best = bids[0]
                q = min(qty, best[3])
                counters[1] += 1
                trades.append((symbol, counters[1], oid, best[2], oid, -best[0], q))
                qty -= q
                best[3] -= q
                if not best[3]:
                    bids.pop(0)
            if qty:
                counters[0] += 1
                insort(asks, [price, counters[0], oid, qty])
    return trades


# --- the order generator ------------------------------------------------------------


def symbol_name(i: int) -> str:
    return f"S{i:04d}"


def generate_orders(
    n: int, symbols: int, seed: int = 7, start: int = 0
) -> Iterator[tuple[str, int, int, str, int, int]]:
    """Orders ``start..n-1`` as (symbol, group_seq, oid, side, price, qty).

    Deterministic: order i is the same for a given seed whatever ``start``
    is, so a generator can resume where a previous one stopped. ``group_seq``
    counts each symbol's orders from 1, ``oid`` is i + 1.
    """
    rng = random.Random(seed)
    mids = [100 + rng.randrange(0, 900) for _ in range(symbols)]
    seqs = [0] * symbols
    for i in range(n):
        s = rng.randrange(symbols)
        side = "B" if rng.random() < 0.5 else "S"
        price = mids[s] + rng.randint(-5, 5)
        qty = rng.randint(1, 100)
        seqs[s] += 1
        if i >= start:
            yield symbol_name(s), seqs[s], i + 1, side, price, qty


def encode_order(oid: int, side: str, price: int, qty: int) -> bytes:
    return f"{oid},{side},{price},{qty}".encode()


def decode_order(body: bytes | str) -> tuple[int, str, int, int]:
    text = body.decode() if isinstance(body, bytes | bytearray) else body
    oid, side, price, qty = text.split(",")
    return int(oid), side, int(price), int(qty)


def encode_trade(t: Trade) -> str:
    """The body of a published trade: aggressor_oid,buy_oid,sell_oid,price,qty."""
    return f"{t[2]},{t[3]},{t[4]},{t[5]},{t[6]}"


def decode_trade(symbol: str, trade_seq: int, body: bytes | str) -> Trade:
    text = body.decode() if isinstance(body, bytes | bytearray) else body
    a, b, s, p, q = (int(x) for x in text.split(","))
    return (symbol, int(trade_seq), a, b, s, p, q)
