"""Delivery basics: destinations, credit, ack modes, NACK, disconnect, back-pressure."""

from __future__ import annotations

import pytest

from shoal.errors import Conflict, InvalidDestination, InvalidHeader, InvalidSetting, NotFound


def test_queue_is_auto_created_and_delivers(h):
    h.sub(2, "a")
    [d] = h.send("hello")
    assert (d.conn_id, d.sub_id, d.message.body) == (2, "a", b"hello")
    assert d.ack_id == str(d.message.id)
    assert d.redelivered is False and d.first_key is None
    assert d.message.destination == "/queue/q"


def test_messages_wait_for_a_consumer(h):
    for i in range(3):
        h.send(str(i))
    assert h.sub(2, "a") and h.got(2, "a") == ["0", "1", "2"]


def test_ungrouped_round_robin_between_consumers(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.sub(4, "c")
    for i in range(6):
        h.send(str(i))
    assert h.got(2, "a") == ["0", "3"]
    assert h.got(3, "b") == ["1", "4"]
    assert h.got(4, "c") == ["2", "5"]


def test_prefetch_limits_unsettled_deliveries(h):
    h.sub(2, "a", prefetch_count=2)
    for i in range(5):
        h.send(str(i))
    assert h.got(2, "a") == ["0", "1"]
    h.ack(h.by_sub[(2, "a")][0])
    assert h.got(2, "a") == ["0", "1", "2"]


def test_activemq_prefetch_size_header(h):
    h.sub(2, "a", **{"activemq.prefetchSize": 1})
    h.send("0")
    h.send("1")
    assert h.got(2, "a") == ["0"]


def test_default_prefetch_is_1000(h):
    h.sub(2, "a")
    for i in range(1005):
        h.send(str(i))
    assert len(h.got(2, "a")) == 1000


def test_byte_window_limits_deliveries(h):
    h.sub(2, "a", consumer_window_size=10)
    for _ in range(5):
        h.send("x" * 6)
    # 6 bytes fit, 4 are left: one more goes (Artemis: while credit > 0), then none.
    assert len(h.got(2, "a")) == 2
    h.ack(h.by_sub[(2, "a")][0])  # window back to 4: one more
    assert len(h.got(2, "a")) == 3
    h.ack(h.by_sub[(2, "a")][1])  # -2 + 6 = 4: one more
    assert len(h.got(2, "a")) == 4


def test_auto_ack_settles_at_delivery_and_uses_no_credit(h):
    h.sub(2, "a", ack="auto", prefetch_count=1)
    for i in range(5):
        h.send(str(i))
    assert h.got(2, "a") == ["0", "1", "2", "3", "4"]
    [info] = h.b.queue_infos()
    assert info["depth"] == 0 and info["in_flight"] == 0 and info["acked"] == 5
    with pytest.raises(NotFound):
        h.ack(h.by_sub[(2, "a")][0])


def test_client_ack_is_cumulative(h):
    h.sub(2, "a", ack="client")
    for i in range(4):
        h.send(str(i))
    ds = h.by_sub[(2, "a")]
    h.ack(ds[2])
    [info] = h.b.queue_infos()
    assert info["acked"] == 3 and info["in_flight"] == 1
    with pytest.raises(NotFound):
        h.ack(ds[1])
    h.ack(ds[3])
    assert h.b.queue_infos()[0]["in_flight"] == 0


def test_client_individual_ack_is_just_that_one(h):
    h.sub(2, "a")
    for i in range(3):
        h.send(str(i))
    ds = h.by_sub[(2, "a")]
    h.ack(ds[2])
    info = h.b.queue_infos()[0]
    assert info["acked"] == 1 and info["in_flight"] == 2


def test_ack_unknown_or_foreign_id_is_not_found(h):
    h.sub(2, "a")
    [d] = h.send("x")
    with pytest.raises(NotFound):
        h.b.ack(2, "999", h.now)
    with pytest.raises(NotFound):
        h.b.ack(2, "not-a-number", h.now)
    h.connect(3)
    with pytest.raises(NotFound):
        h.b.ack(3, d.ack_id, h.now)  # acks are per connection
    h.ack(d)
    with pytest.raises(NotFound):
        h.ack(d)


def test_nack_redelivers_at_head_with_redelivered_flag(h):
    h.sub(2, "a", prefetch_count=1)
    h.send("0")
    h.send("1")
    [d0] = h.by_sub[(2, "a")]
    [again] = h.nack(d0)
    assert again.message.body == b"0" and again.redelivered
    assert again.message.delivery_count == 1
    h.ack(again)
    assert h.got(2, "a") == ["0", "0", "1"]
    assert h.by_sub[(2, "a")][-1].redelivered is False


def test_disconnect_returns_unsettled_in_original_order(h):
    h.sub(2, "a", prefetch_count=3)
    for i in range(5):
        h.send(str(i))
    assert h.got(2, "a") == ["0", "1", "2"]
    h.disconnect(2)
    h.sub(3, "b", prefetch_count=10)
    assert h.got(3, "b") == ["0", "1", "2", "3", "4"]
    assert [d.redelivered for d in h.by_sub[(3, "b")]] == [True, True, True, False, False]


def test_unsubscribe_returns_unsettled(h):
    h.sub(2, "a")
    h.send("0")
    h.unsub(2, "a")
    h.sub(2, "b")
    assert h.got(2, "b") == ["0"]
    assert h.by_sub[(2, "b")][0].redelivered


def test_writability_pauses_delivery_to_that_connection_only(h):
    h.sub(2, "a")
    h.sub(3, "b")
    h.writable(2, False)
    for i in range(4):
        h.send(str(i))
    assert h.got(2, "a") == []
    assert h.got(3, "b") == ["0", "1", "2", "3"]
    h.writable(2, True)
    h.send("4")
    assert h.got(2, "a") == ["4"]


def test_writability_holds_groups_of_that_consumer(h):
    h.sub(2, "a")
    h.send("0", group="g")
    h.writable(2, False)
    h.send("1", group="g")
    h.sub(3, "b")
    h.send("2", group="g")
    assert h.got(3, "b") == []
    h.writable(2, True)
    assert h.got(2, "a") == ["0", "1", "2"]


def test_duplicate_subscription_id_conflicts(h):
    h.sub(2, "a")
    with pytest.raises(Conflict):
        h.sub(2, "a", dest="/queue/other")


def test_bad_ack_mode(h):
    with pytest.raises(InvalidHeader) as ei:
        h.sub(2, "a", ack="sometimes")
    assert ei.value.header == "ack"


def test_bad_prefetch_header(h):
    with pytest.raises(InvalidHeader) as ei:
        h.sub(2, "a", prefetch_count="lots")
    assert ei.value.header == "prefetch-count"


def test_unknown_destination_kind(h):
    with pytest.raises(InvalidDestination):
        h.send("x", dest="/exchange/x")
    with pytest.raises(InvalidDestination):
        h.send("x", dest="/queue/")


def test_unknown_destination_parameter_names_it(h):
    with pytest.raises(InvalidSetting) as ei:
        h.send("x", dest="/queue/q?group-bukets=2")
    assert ei.value.name == "group-bukets"
    assert "q" not in h.b.queues  # nothing was created


def test_bad_parameter_value(h):
    with pytest.raises(InvalidSetting) as ei:
        h.sub(2, "a", dest="/queue/q?group-buckets=many")
    assert ei.value.name == "group-buckets"


def test_creating_frame_fixes_settings(h):
    h.send("x", dest="/queue/orders?group-buckets=2&group-rebalance=true")
    h.send("y", dest="/queue/orders?group-buckets=8")  # ignored: the queue exists
    info = next(i for i in h.b.queue_infos() if i["name"] == "orders")
    assert info["settings"]["group-buckets"] == 2
    assert info["settings"]["group-rebalance"] is True


def test_settings_resolution_order(make):
    h = make(
        address_settings={
            "#": {"max-delivery-attempts": 3, "group-buckets": 16},
            "orders.#": {"max-delivery-attempts": 5},
            "orders.eu": {"default-group-mode": "shared"},
        }
    )
    h.send("x", dest="/queue/orders.eu?max-delivery-attempts=7")
    h.send("x", dest="/queue/orders.us")
    h.send("x", dest="/queue/other")
    s = {i["name"]: i["settings"] for i in h.b.queue_infos()}
    assert s["orders.eu"]["max-delivery-attempts"] == 7
    assert s["orders.eu"]["group-mode"] == "shared"
    assert s["orders.eu"]["group-buckets"] == 16
    assert s["orders.us"]["max-delivery-attempts"] == 5
    assert s["other"]["max-delivery-attempts"] == 3


def test_invalid_group_seq_raises_and_loses_nothing(h):
    h.sub(2, "a", prefetch_count=1)
    h.send("0", group="g")
    h.send("1", group="g")
    with pytest.raises(InvalidHeader) as ei:
        h.send("bad", group="g", seq="one")
    assert ei.value.header == "JMSXGroupSeq"
    h.ack(h.by_sub[(2, "a")][0])
    h.ack(h.by_sub[(2, "a")][1])
    assert h.got(2, "a") == ["0", "1"]
    assert h.b.queue_infos()[0]["enqueued"] == 2


def test_invalid_expires_header(h):
    with pytest.raises(InvalidHeader) as ei:
        h.send("x", expires="soon")
    assert ei.value.header == "expires"


def test_headers_are_kept_on_the_message(h):
    h.sub(2, "a")
    [d] = h.send("x", group="g", seq=3, **{"content-type": "text/plain", "x-custom": "1"})
    assert d.message.headers["JMSXGroupID"] == "g"
    assert d.message.headers["JMSXGroupSeq"] == "3"
    assert d.message.headers["content-type"] == "text/plain"
    assert d.message.group == "g" and d.message.group_seq == 3


def test_unknown_connection_is_not_found(h):
    with pytest.raises(NotFound):
        h.b.send(42, "/queue/q", {}, b"", h.now)


def test_duplicate_connection_conflicts(h):
    h.connect(5)
    with pytest.raises(Conflict):
        h.connect(5)


def test_message_ids_unique_and_timestamp_from_now(h):
    h.sub(2, "a")
    a = h.send("x")[0].message
    h.now += 1.5
    b = h.send("y")[0].message
    assert b.id > a.id
    assert b.timestamp - a.timestamp == 1500


def test_unbounded_consumers_get_bounded_rounds(h):
    for i in range(2500):
        h.send(str(i))
    h.sub(2, "a", ack="auto")
    assert len(h.got(2, "a")) == 1000  # one round
    deadline = h.b.tick(h.now)  # pump() drained the effects: a new round began
    h.pump()
    assert len(h.got(2, "a")) == 2000
    assert deadline == h.now  # more to do: call again at once
    h.advance(0)
    assert h.got(2, "a") == [str(i) for i in range(2500)]
    assert h.b.tick(h.now) is None


def test_rounds_do_not_throttle_a_live_flow(h):
    h.sub(2, "a", ack="auto")
    for i in range(3000):
        h.send(str(i))  # each command's effects are drained: a new round each time
    assert len(h.got(2, "a")) == 3000


def test_prefetch_zero_means_unbounded_credit(h):
    h.sub(2, "a", prefetch_count=0)
    for i in range(1500):
        h.send(str(i))
    assert len(h.got(2, "a")) == 1500
