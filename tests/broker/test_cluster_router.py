"""ClusterRouter: present only in a cluster; routes a grouped SEND by its binding."""

from __future__ import annotations

import pytest

from shoal.broker.cluster_routing import ClusterRouter, group_of
from shoal.broker.core import Broker
from shoal.broker.effects import ProposeBinding, SendDecided
from shoal.broker.settings import AddressSettings
from shoal.cluster.grouping import ClusterGrouping, forward_queue
from shoal.errors import Conflict

T0 = 1_700_000_000.0


def test_a_single_node_has_no_router() -> None:
    b = Broker(AddressSettings(), T0)
    assert b.router is None and b.cluster is None
    with pytest.raises(Conflict):
        b.cluster_fence(T0)
    b.ensure_forward_queue("n2")  # forward queues need no cluster (management lists them)
    assert forward_queue("n2") in b.queues


def test_setting_the_grouping_makes_the_router_and_unsetting_drops_it() -> None:
    b = Broker(AddressSettings(), T0)
    grouping = ClusterGrouping("n1", 5000)
    b.cluster = grouping
    assert isinstance(b.router, ClusterRouter) and b.router.grouping is grouping
    assert b.cluster is grouping
    b.cluster = None
    assert b.router is None


def test_a_grouped_send_waits_for_its_binding_then_goes_where_it_is_bound() -> None:
    b = Broker(AddressSettings(), T0)
    b.cluster = ClusterGrouping("n1", 5000)
    b.connect(1, T0)
    hold = b.send(1, "/queue/q", {"JMSXGroupID": "g"}, b"x", T0)
    assert hold is not None
    (proposal,) = [e for e in b.take_effects() if isinstance(e, ProposeBinding)]
    assert (proposal.queue, proposal.group) == ("q", "g")
    b.binding_decided("q", "g", "n2", T0)
    assert [e for e in b.take_effects() if isinstance(e, SendDecided)] == [
        SendDecided(1, hold, None)
    ]
    assert b.queues[forward_queue("n2")].depth == 1 and b.queues["q"].depth == 0


def test_group_of_reads_the_queues_group_header() -> None:
    b = Broker(AddressSettings.from_raw({"q": {"group-header": "k"}}), T0)
    q = b.addresses.queue_for("q", {})
    assert group_of(q, {"k": "a"}) == "a"
    assert group_of(q, {"JMSXGroupID": "a"}) is None


def test_fence_marks_the_fenceable_queues_and_unfence_clears_them() -> None:
    b = Broker(AddressSettings(), T0)
    b.cluster = ClusterGrouping("n1", 5000)
    q = b.addresses.queue_for("q", {})
    b.cluster_fence(T0)
    assert q.fenced and b.router is not None and b.router.grouping.fenced
    made_while_fenced = b.addresses.queue_for("r", {})
    assert made_while_fenced.fenced
    assert b.cluster_unfence(T0, {}) == []
    assert not q.fenced and not made_while_fenced.fenced
