"""Ordered per-group state (without Spark) and the matching engine against its reference."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from shoal.spark.group_order import ordered
from shoal.spark.matching import (
    OrderBook,
    decode_order,
    decode_trade,
    encode_order,
    encode_trade,
    generate_orders,
    reference_trades,
)


class FakeState:
    """The parts of pyspark's GroupState the wrapper uses."""

    def __init__(self, value=None) -> None:
        self.value = value
        self.hasTimedOut = False

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, value) -> None:
        self.value = value


def collect(key, rows, seen):
    seen = (seen or []) + rows["seq"].tolist()
    return pd.DataFrame({"k": [key[0]] * len(rows), "seq": rows["seq"]}), seen


def test_chunks_are_concatenated_sorted_and_deduplicated() -> None:
    fn = ordered(collect, "seq")
    state = FakeState()
    chunks = [pd.DataFrame({"seq": [7, 5]}), pd.DataFrame({"seq": [6, 4, 5]})]
    out = list(fn(("A",), iter(chunks), state))
    assert out[0]["seq"].tolist() == [4, 5, 6, 7]
    # the next batch: rows at or below the last sequence seen are dropped
    out = list(fn(("A",), iter([pd.DataFrame({"seq": [9, 3, 7, 8]})]), state))
    assert out[0]["seq"].tolist() == [8, 9]
    import pickle

    last, blob = state.value
    assert last == 9 and pickle.loads(blob) == [4, 5, 6, 7, 8, 9]
    # nothing new: no output, state unchanged
    assert list(fn(("A",), iter([pd.DataFrame({"seq": [2, 9]})]), state)) == []
    assert state.value[0] == 9
    # already in order (the common case): only the seen prefix goes
    out = list(fn(("A",), iter([pd.DataFrame({"seq": [8, 10, 11]})]), state))
    assert out[0]["seq"].tolist() == [10, 11] and state.value[0] == 11


def test_price_time_priority_by_hand() -> None:
    book = OrderBook()
    assert book.submit("X", 1, "S", 101, 10) == []
    assert book.submit("X", 2, "S", 100, 5) == []
    assert book.submit("X", 3, "S", 100, 5) == []  # same price, later
    # a bid at 101 for 12 takes the best price first (100), earliest first (oid 2, then 3)
    trades = book.submit("X", 4, "B", 101, 12)
    assert trades == [
        ("X", 1, 4, 4, 2, 100, 5),
        ("X", 2, 4, 4, 3, 100, 5),
        ("X", 3, 4, 4, 1, 101, 2),
    ]
    assert book.depth() == (0, 1)  # 8 left of oid 1
    assert book.submit("X", 5, "B", 99, 3) == []  # does not cross: rests
    trades = book.submit("X", 6, "S", 98, 4)
    assert trades == [("X", 4, 6, 5, 6, 99, 3)]  # at the resting bid's price
    assert book.depth() == (0, 2)


orders_st = st.lists(
    st.tuples(
        st.sampled_from(["A", "B"]),
        st.sampled_from(["B", "S"]),
        st.integers(95, 105),
        st.integers(1, 20),
    ),
    max_size=200,
)


@given(orders_st)
def test_engine_equals_reference(orders) -> None:
    books: dict[str, OrderBook] = {}
    got = []
    ref_in = []
    for oid, (sym, side, price, qty) in enumerate(orders, 1):
        got += books.setdefault(sym, OrderBook()).submit(sym, oid, side, price, qty)
        ref_in.append((sym, oid, side, price, qty))
    assert got == reference_trades(ref_in)


def test_generator_is_deterministic_and_resumable() -> None:
    full = list(generate_orders(2000, 13, seed=3))
    assert list(generate_orders(2000, 13, seed=3, start=1234)) == full[1234:]
    per_symbol: dict[str, int] = {}
    for sym, seq, oid, *_ in full:
        per_symbol[sym] = per_symbol.get(sym, 0) + 1
        assert seq == per_symbol[sym]
    assert [o[2] for o in full] == list(range(1, 2001))


def test_wire_formats_round_trip() -> None:
    assert decode_order(encode_order(5, "B", 101, 7)) == (5, "B", 101, 7)
    t = ("S0001", 3, 10, 10, 4, 99, 6)
    assert decode_trade("S0001", 3, encode_trade(t).encode()) == t
