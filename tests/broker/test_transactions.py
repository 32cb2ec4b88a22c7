"""Transactions: sends enter at COMMIT, acks settle at COMMIT, ABORT returns."""

from __future__ import annotations

import pytest

from shoal.errors import Conflict, InvalidHeader, NotFound


def test_sends_enter_at_commit_in_send_order(h):
    h.sub(2, "a")
    h.connect(1)
    h.b.begin(1, "t1", h.now)
    h.send("t0", tx="t1", group="g")
    h.send("outside", group="g")
    h.send("t1", tx="t1", group="g")
    assert h.got(2, "a") == ["outside"]
    h.b.commit(1, "t1", h.now)
    h.pump()
    assert h.got(2, "a") == ["outside", "t0", "t1"]
    ids = [d.message.id for d in h.by_sub[(2, "a")]]
    assert ids == sorted(ids)  # ids are assigned when messages enter the queue


def test_abort_drops_sends(h):
    h.connect(1)
    h.sub(2, "a")
    h.b.begin(1, "t", h.now)
    h.send("x", tx="t")
    h.b.abort(1, "t", h.now)
    h.pump()
    h.send("y")
    assert h.got(2, "a") == ["y"]


def test_acks_settle_at_commit(h):
    h.sub(2, "a")
    d = h.send("x")[0]
    h.b.begin(2, "t", h.now)
    h.ack(d, tx="t")
    assert h.b.queue_infos()[0]["in_flight"] == 1
    with pytest.raises(NotFound):
        h.ack(d)  # already acked in the transaction
    h.b.commit(2, "t", h.now)
    h.pump()
    info = h.b.queue_infos()[0]
    assert info["in_flight"] == 0 and info["acked"] == 1


def test_abort_returns_acked_messages_to_group_heads_in_order(h):
    h.sub(2, "a", prefetch_count=3)
    h.sub(3, "b")
    ds = [h.send(str(i), group="g")[0] for i in range(3)]
    h.send("3", group="g")
    h.b.begin(2, "t", h.now)
    h.ack(ds[1], tx="t")
    h.ack(ds[0], tx="t")
    h.ack(ds[2], tx="t")
    assert h.got(2, "a") == ["0", "1", "2", "3"]  # credit freed by tx acks
    h.ack(h.by_sub[(2, "a")][3])
    h.b.abort(2, "t", h.now)
    h.pump()
    assert h.got(2, "a")[4:] == ["0", "1", "2"]
    assert all(d.redelivered for d in h.by_sub[(2, "a")][4:])
    assert h.got(3, "b") == []


def test_group_stays_owned_until_tx_resolves(h):
    h.sub(2, "a")
    d = h.send("0", group="g")[0]
    h.b.begin(2, "t", h.now)
    h.ack(d, tx="t")
    h.unsub(2, "a")  # the consumer goes, its transaction is still open
    h.sub(3, "b")
    h.send("1", group="g")
    assert h.got(3, "b") == []  # G2: "0" may still be committed as processed
    h.b.commit(2, "t", h.now)
    h.pump()
    assert h.got(3, "b") == ["1"]


def test_disconnect_aborts_open_transactions(h):
    h.sub(2, "a")
    d = h.send("0", group="g")[0]
    h.b.begin(2, "t", h.now)
    h.ack(d, tx="t")
    h.disconnect(2)
    h.sub(3, "b")
    assert h.got(3, "b") == ["0"]
    assert h.by_sub[(3, "b")][0].redelivered


def test_nack_in_transaction_applies_at_commit(h):
    h.sub(2, "a")
    d = h.send("0")[0]
    h.b.begin(2, "t", h.now)
    h.nack(d, tx="t")
    assert h.got(2, "a") == ["0"]
    h.b.commit(2, "t", h.now)
    h.pump()
    assert h.got(2, "a") == ["0", "0"]


def test_client_mode_cumulative_ack_in_transaction(h):
    h.sub(2, "a", ack="client")
    ds = [h.send(str(i))[0] for i in range(3)]
    h.b.begin(2, "t", h.now)
    h.ack(ds[1], tx="t")
    h.b.abort(2, "t", h.now)
    h.pump()
    assert h.got(2, "a") == ["0", "1", "2", "0", "1"]


def test_unknown_and_duplicate_transactions(h):
    h.connect(1)
    with pytest.raises(NotFound):
        h.b.commit(1, "nope", h.now)
    with pytest.raises(NotFound):
        h.b.abort(1, "nope", h.now)
    with pytest.raises(NotFound):
        h.send("x", tx="nope")
    h.b.begin(1, "t", h.now)
    with pytest.raises(Conflict):
        h.b.begin(1, "t", h.now)


def test_bad_header_in_transaction_rejected_at_send(h):
    h.connect(1)
    h.b.begin(1, "t", h.now)
    with pytest.raises(InvalidHeader):
        h.send("x", tx="t", seq="nope")
    h.sub(2, "a")
    h.send("ok", tx="t")
    h.b.commit(1, "t", h.now)
    h.pump()
    assert h.got(2, "a") == ["ok"]


def test_persistent_tx_send_is_recorded_at_commit(h):
    h.connect(1)
    h.b.begin(1, "t", h.now)
    h.send("p", tx="t", persistent="true")
    assert h.store._state.messages.get("q") in (None, {})
    h.b.commit(1, "t", h.now)
    h.pump()
    assert len(h.store._state.messages["q"]) == 1
