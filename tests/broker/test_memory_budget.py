"""MemoryBudget: global-max-size, producers blocked on it, paging, on its own."""

from __future__ import annotations

import pytest

from shoal.broker.core import Broker
from shoal.broker.effects import ProducerFlow
from shoal.broker.memory import GLOBAL_LIMIT, check_room
from shoal.broker.settings import AddressSettings
from shoal.errors import ResourceFull

T0 = 1_700_000_000.0


def broker(policy: str, global_max: int) -> Broker:
    settings = AddressSettings.from_raw({"#": {"address-full-policy": policy}})
    b = Broker(settings, T0, global_max_size=global_max)
    b.connect(1, T0)
    return b


def test_past_global_max_a_producer_is_blocked_once_and_freed_by_acks() -> None:
    b = broker("block", 10)
    b.subscribe(1, "s", "/queue/q", "client-individual", {"prefetch-count": "0"}, T0)
    b.take_effects()
    for _ in range(3):
        b.send(1, "/queue/q", {}, b"x" * 6, T0)
    assert b.memory.blocked == {1: None}
    flows = [e for e in b.take_effects() if isinstance(e, ProducerFlow)]
    assert flows == [ProducerFlow(1, True)]  # once, however many sends past it
    assert GLOBAL_LIMIT in b.connection(1).blocked_on
    assert b.send_blocked(1, "/queue/q") and b.send_blocked(1, "/queue/other")
    for mid in list(b.connection(1).acks):
        b.ack(1, str(mid), T0)
    assert b.memory.blocked == {}
    assert ProducerFlow(1, False) in b.take_effects()


def test_fail_policy_refuses_the_send_that_would_pass_global_max() -> None:
    b = broker("fail", 10)
    b.send(1, "/queue/q", {}, b"x" * 8, T0)
    with pytest.raises(ResourceFull, match="global-max-size 10"):
        b.send(1, "/queue/q", {}, b"x" * 8, T0)
    assert b.memory.blocked == {}


def test_check_room_is_the_queues_own_limit() -> None:
    b = Broker(AddressSettings.from_raw({"#": {"max-size-bytes": 4}}), T0)
    q = b.addresses.queue_for("q", {})
    check_room(q, 4)
    with pytest.raises(ResourceFull, match="max-size-bytes 4"):
        check_room(q, 5)


def test_a_disconnect_forgets_a_producer_blocked_on_global_max() -> None:
    b = broker("block", 1)
    b.send(1, "/queue/q", {}, b"xx", T0)
    assert 1 in b.memory.blocked
    b.disconnect(1, T0)
    assert b.memory.blocked == {}
