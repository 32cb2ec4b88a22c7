"""A network partition of one node (issue 15), with real processes in network
namespaces (tests/netns.py, iproute2, as root): ZooKeeper and each node in
a namespace of its own, joined by a bridge; n3's port is set down.

The cut-off node fences itself before ZooKeeper can expire its session (so
before its groups could be given to another node), keeps accepting SENDs,
and after healing re-checks its bindings and delivers everything, in order.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.cluster.faults import partition_rebind_run, partition_run
from tests.netns import NetnsLab, unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    with NetnsLab(["zk", "n1", "n2", "n3"]) as lab:
        yield lab


def test_a_partitioned_node_fences_its_groups_and_after_healing_everything_arrives_in_order(
    tmp_path, lab
):
    f = partition_run(tmp_path, lab)
    print(f)
    assert f.sends_refused == 0  # bound groups: every SEND receipted, cut off or not
    assert f.lost == 0 and f.recover_s is not None
    assert f.duplicates_unflagged == 0
    assert f.order_violations == 0
    assert f.groups_on_two_nodes == 0
    x = f.extra
    # fenced before ZooKeeper expired its session: its groups could not move yet
    assert x["fence_after_s"] < x["session_expired_after_s"]
    assert x["delivered_of_cut_groups_while_fenced"] == 0  # stopped, not served twice
    assert x["delivered_elsewhere_while_fenced"] > 0  # the other nodes' groups flowed
    assert x["sends_accepted_by_cut_node_while_fenced"] > 0  # stored while fenced
    assert x["fences_of_cut_node"] == 1


def test_with_rebind_after_a_partitioned_nodes_groups_move_and_are_never_served_twice_at_once(
    tmp_path, lab
):
    """rebind-after gives n3's groups new holders once its session expired,
    while n3 is still cut off: the fence keeps it from serving them too."""
    f, x = partition_rebind_run(tmp_path, lab)
    print(f, x)
    assert f.sends_refused == 0
    assert x["fence_after_s"] < x["forgotten_after_s"]  # fenced before they could move
    assert x["overlapping_groups"] == []  # never consumed on two nodes at once
    assert x["delivered_of_cut_groups_on_n3_after_fence"] == 0
    assert f.duplicates_unflagged == 0 and f.order_violations == 0
    # after the heal n3 found them bound elsewhere: what it stored of them
    # while cut off went to their new holders (C6), after what those had
    # consumed meanwhile but in order per producer; nothing parked or lost
    assert x["parked_on_n3"] == {} and x["lost_groups"] == []
    assert f.lost == 0
    assert x["stranded_sent_by_n3"] > 0
