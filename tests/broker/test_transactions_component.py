"""Transactions: BEGIN, COMMIT and ABORT over a connection's open transactions."""

from __future__ import annotations

import pytest

from shoal.broker.core import Broker
from shoal.broker.model import CoreLimits
from shoal.broker.settings import AddressSettings
from shoal.errors import Conflict, LimitExceeded, NotFound

T0 = 1_700_000_000.0


def broker(**limits: int) -> Broker:
    b = Broker(AddressSettings(), T0, limits=CoreLimits(**limits))
    b.connect(1, T0)
    return b


def test_begin_opens_once_within_the_limit() -> None:
    b = broker(max_transactions_per_connection=1)
    conn = b.connection(1)
    b.transactions.begin(conn, "t")
    with pytest.raises(Conflict):
        b.transactions.begin(conn, "t")
    with pytest.raises(LimitExceeded):
        b.transactions.begin(conn, "u")


def test_of_names_an_open_transaction_with_room() -> None:
    b = broker(max_transaction_size=1)
    conn = b.connection(1)
    with pytest.raises(NotFound):
        b.transactions.of(conn, "t")
    b.begin(1, "t", T0)
    b.send(1, "/queue/q", {}, b"x", T0, transaction="t")
    with pytest.raises(LimitExceeded):
        b.transactions.of(conn, "t")


def test_commit_routes_the_sends_and_abort_drops_them() -> None:
    b = broker()
    b.begin(1, "t", T0)
    b.send(1, "/queue/q", {}, b"x", T0, transaction="t")
    assert b.queues["q"].depth == 0
    assert b.commit(1, "t", T0) == []  # no cluster: no holds
    assert b.queues["q"].depth == 1
    b.begin(1, "u", T0)
    b.send(1, "/queue/q", {}, b"y", T0, transaction="u")
    b.abort(1, "u", T0)
    assert b.queues["q"].depth == 1
    with pytest.raises(NotFound):
        b.transactions.commit(b.connection(1), "u")


def test_roll_back_returns_what_was_acked_in_the_transaction() -> None:
    b = broker()
    b.subscribe(1, "s", "/queue/q", "client-individual", {}, T0)
    b.send(1, "/queue/q", {}, b"x", T0)
    (mid,) = b.connection(1).acks
    b.begin(1, "t", T0)
    b.ack(1, str(mid), T0, transaction="t")
    t = b.connection(1).txs["t"]
    assert len(t.acks) == 1
    b.transactions.roll_back(t)
    assert b.queues["q"].depth == 1  # back in its queue, redelivered on the next dispatch
