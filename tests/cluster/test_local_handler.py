"""The local / remote grouping handlers (C8) without I/O: decisions, their
journal records, when answers go out, and what a remote node asks when."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.cluster.local_handler import (
    BOUND_TO_HEADER,
    DECISION_RECEIPT,
    GROUP_HEADER,
    IDLE_HEADER,
    MOVED_RECEIPT,
    PROPOSAL_HEADER,
    PROPOSE_DESTINATION,
    QUEUE_HEADER,
    RELEASE_DESTINATION,
    RELEASED_FROM_HEADER,
    RELEASED_HEADER,
    RELEASED_RECEIPT,
    TOUCH_DESTINATION,
    TOUCHED_RECEIPT,
    LocalDecisions,
    other_handlers,
    read_proposal,
)
from shoal.errors import ProtocolError
from shoal.records import GroupBound
from shoal.server.cluster.handlers import LocalHandler, RemoteHandler
from shoal.store.memory import MemoryStore


def test_the_first_proposal_wins_and_only_a_new_binding_is_journaled():
    d = LocalDecisions()
    assert d.decide("q", "g", "n2") == ("n2", GroupBound("q", "g", "n2"))
    assert d.decide("q", "g", "n3") == ("n2", None)
    assert d.decide("r", "g", "n3") == ("n3", GroupBound("r", "g", "n3"))


def test_restored_bindings_stand_and_a_release_is_journaled_once():
    d = LocalDecisions({("q", "g"): "n1"})
    assert d.decide("q", "g", "n2") == ("n1", None)
    assert d.release("q", "g") == GroupBound("q", "g", "")
    assert d.release("q", "g") is None
    assert d.decide("q", "g", "n2") == ("n2", GroupBound("q", "g", "n2"))


def test_decisions_replayed_from_the_store_are_the_ones_given():
    store = MemoryStore()
    store.open()
    d = LocalDecisions()
    for q, g, p in [("q", "a", "n1"), ("q", "b", "n2"), ("q", "a", "n3")]:
        _node, record = d.decide(q, g, p)
        if record is not None:
            store.append([record])
    store.sync()
    store.crash()
    assert LocalDecisions(store.open().bindings).bindings == d.bindings


@pytest.mark.parametrize("missing", [QUEUE_HEADER, GROUP_HEADER, PROPOSAL_HEADER])
def test_a_proposal_without_its_headers_is_refused_naming_the_header(missing):
    headers = {QUEUE_HEADER: "q", GROUP_HEADER: "g", PROPOSAL_HEADER: "n2"}
    assert read_proposal(headers) == ("q", "g", "n2")
    del headers[missing]
    with pytest.raises(ProtocolError, match=missing):
        read_proposal(headers)


class FakePersistence:
    """SyncPipeline's interface: appends get sequence numbers, waiters wait for sync."""

    def __init__(self) -> None:
        self.appended_seq = 0
        self.synced_seq = 0
        self.records: list[Any] = []
        self.waiters: list[tuple[int, Any]] = []

    def append(self, records: list[Any]) -> int:
        self.records += records
        self.appended_seq += 1
        return self.appended_seq

    def when_synced(self, seq: int, waiter: Any, *, fail_fast: bool = True) -> None:
        assert not fail_fast  # a failing disk delays a decision, never refuses it
        self.waiters.append((seq, waiter))

    def sync(self) -> None:
        self.synced_seq = self.appended_seq
        ready = [w for s, w in self.waiters if s <= self.synced_seq]
        self.waiters = [(s, w) for s, w in self.waiters if s > self.synced_seq]
        for w in ready:
            w(None)


class FakeServer:
    def __init__(self) -> None:
        self.persistence = FakePersistence()


class FakeSession:
    def __init__(self, origin: str = "n3") -> None:
        self.origin = origin
        self.decisions: list[tuple[str, str, str]] = []
        self.receipts: list[tuple[str, dict[str, str]]] = []  # touches, releases, notices

    def send_decision(self, queue: str, group: str, node: str) -> None:
        self.decisions.append((queue, group, node))

    def send_handler_receipt(self, receipt_id: str, headers: dict[str, str]) -> None:
        self.receipts.append((receipt_id, headers))


def local_handler(
    server: FakeServer, decided: list[Any], events: list[Any] | None = None
) -> LocalHandler:
    """n1's handler: its own core's answers in ``decided``, the rest in ``events``."""
    out = [] if events is None else events
    return LocalHandler(
        server,
        "n1",
        {},
        lambda q, g, n: decided.append((q, g, n)),
        lambda q, g, n: out.append(("touched", q, g, n)),
        lambda q, g, r: out.append(("released", q, g, r)),
        lambda q, g, n: out.append(("moved", q, g, n)),
    )


def test_the_local_handler_answers_only_once_its_decision_is_synced():
    server = FakeServer()
    decided: list[tuple[str, str, str]] = []
    h = local_handler(server, decided)
    h.propose("q", "g", "n1")
    session = FakeSession()
    h.propose_from_link(session, {QUEUE_HEADER: "q", GROUP_HEADER: "g", PROPOSAL_HEADER: "n3"})
    assert server.persistence.records == [GroupBound("q", "g", "n1")]
    assert decided == [] and session.decisions == []  # not on disk yet
    server.persistence.sync()
    assert decided == [("q", "g", "n1")]
    assert session.decisions == [("q", "g", "n1")]  # the first proposal won
    h.propose_from_link(session, {QUEUE_HEADER: "q", GROUP_HEADER: "g", PROPOSAL_HEADER: "n3"})
    assert session.decisions[-1] == ("q", "g", "n1")  # already synced: at once
    assert h.bindings() == {"q": {"g": "n1"}}


class FakeLink:
    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.asked: list[tuple[str, str, str]] = []
        self.frames: list[tuple[str, dict[str, str]]] = []  # touches and releases

    def control(self, destination: str, headers: dict[str, str]) -> bool:
        if self.up and destination == PROPOSE_DESTINATION:
            self.asked.append(
                (headers[QUEUE_HEADER], headers[GROUP_HEADER], headers[PROPOSAL_HEADER])
            )
        elif self.up:
            self.frames.append((destination, headers))
        return self.up


def remote(links: dict[str, FakeLink], pending: set[tuple[str, str]]):
    decided: list[tuple[str, str, str]] = []
    h = RemoteHandler(
        "n2", links, lambda q, g, n: decided.append((q, g, n)), lambda q, g: (q, g) in pending
    )
    return h, decided


def test_a_remote_node_asks_the_member_that_runs_the_local_handler():
    links = {"n1": FakeLink(), "n3": FakeLink()}
    h, decided = remote(links, {("q", "g")})
    h.propose("q", "g", "n2")  # no local handler known yet: waits
    assert links["n1"].asked == []
    h.members_changed({"n1": {"grouping": "local"}, "n3": {"grouping": "remote"}})
    assert links["n1"].asked == [("q", "g", "n2")] and links["n3"].asked == []
    h.receipt_from_link(
        "n1", DECISION_RECEIPT, {QUEUE_HEADER: "q", GROUP_HEADER: "g", BOUND_TO_HEADER: "n3"}
    )
    assert decided == [("q", "g", "n3")] and h.asked == {}


def test_while_the_local_node_is_down_proposals_wait_and_are_asked_again_when_it_is_back():
    link = FakeLink(up=False)
    pending = {("q", "a"), ("q", "b")}
    h, decided = remote({"n1": link}, pending)
    h.members_changed({"n1": {"grouping": "local"}})
    h.propose("q", "a", "n2")
    h.propose("q", "b", "n2")
    h.members_changed({})  # n1's membership entry expired: it stays the one to ask
    assert h.local == "n1" and link.asked == []
    pending.discard(("q", "a"))  # timed out meanwhile (C3): not asked again, forgotten
    h.members_changed({})
    assert list(h.asked) == [("q", "b")]
    link.up = True
    h.link_up("n3")  # another node's link: nothing to ask there
    assert link.asked == []
    h.link_up("n1")
    assert link.asked == [("q", "b", "n2")] and list(h.asked) == [("q", "b")]
    assert decided == []


def test_two_local_handlers_decide_nothing_until_one_is_left():
    links = {"n1": FakeLink(), "n4": FakeLink()}
    h, _decided = remote(links, {("q", "g")})
    h.members_changed({"n1": {"grouping": "local"}, "n4": {"grouping": "local"}})
    h.propose("q", "g", "n2")
    assert h.local is None and links["n1"].asked == links["n4"].asked == []
    h.members_changed({"n4": {"grouping": "local"}})
    assert links["n4"].asked == [("q", "g", "n2")]


def test_a_decision_without_its_headers_is_ignored():
    h, decided = remote({"n1": FakeLink()}, set())
    h.receipt_from_link("n1", DECISION_RECEIPT, {QUEUE_HEADER: "q"})
    assert decided == []


def test_nodes_whose_handler_cannot_work_with_ours_are_named():
    members = {
        "n1": {"grouping": "local"},
        "n2": {"grouping": "remote"},
        "n3": {"grouping": "zookeeper"},
        "n4": {},  # predates the key: a zookeeper node
    }
    assert other_handlers("remote", members) == ["n3", "n4"]
    assert other_handlers("local", members) == ["n3", "n4"]
    assert other_handlers("zookeeper", members) == ["n1", "n2"]


# --- bindings that move with the local handler (C5-C7) -------------------------


def test_a_release_is_refused_while_another_node_used_the_binding_and_only_to_its_holder():
    d = LocalDecisions(now_ms=0)
    d.decide("q", "g", "n2", now_ms=1000)
    d.answered("q", "g", 1000)
    assert d.release_idle("q", "g", "n2", 500, 1400) == (False, None)  # used 400 ms ago
    assert d.touch("q", "g", 1400) == "n2"
    d.answered("q", "g", 1400)
    assert d.release_idle("q", "g", "n2", 500, 1800) == (False, None)  # the touch counts
    assert d.release_idle("q", "g", "n3", 500, 5000) == (True, None)  # not n3's: nothing to do
    assert d.bindings == {("q", "g"): "n2"}
    assert d.release_idle("q", "g", "n2", 500, 5000) == (True, GroupBound("q", "g", ""))
    assert d.touch("q", "g", 5000) == ""
    assert d.decide("q", "g", "n3", 5000) == ("n3", GroupBound("q", "g", "n3"))


def test_no_release_while_an_answer_naming_the_binding_waits_for_its_sync():
    d = LocalDecisions(now_ms=0)
    d.decide("q", "g", "n2", now_ms=0)
    d.answered("q", "g", 0)
    assert d.decide("q", "g", "n3", now_ms=1000) == ("n2", None)  # n3 asks; not out yet
    assert d.touch("q", "g", 1000) == "n2"
    assert d.release_idle("q", "g", "n2", 500, 9000) == (False, None)  # both still out
    d.answered("q", "g", 9000)
    assert d.release_idle("q", "g", "n2", 500, 9600) == (False, None)  # one still out
    d.answered("q", "g", 9700)  # out: a use, the asker routes through it from now
    assert d.release_idle("q", "g", "n2", 500, 10_000) == (False, None)
    assert d.release_idle("q", "g", "n2", 0, 10_000)[0]  # C7 waits for neither
    assert d.answering == {}


def test_restored_bindings_count_as_used_at_the_restart():
    d = LocalDecisions({("q", "g"): "n2"}, now_ms=10_000)
    assert d.release_idle("q", "g", "n2", 5000, 12_000) == (False, None)
    assert d.release_idle("q", "g", "n2", 5000, 15_000)[0]


def test_forget_releases_only_the_nodes_bindings():
    d = LocalDecisions({("q", "a"): "n2", ("q", "b"): "n3", ("r", "a"): "n2"})
    assert d.forget("n2") == [GroupBound("q", "a", ""), GroupBound("r", "a", "")]
    assert d.bindings == {("q", "b"): "n3"}


def test_a_release_is_journaled_then_pushed_to_every_other_node_after_earlier_answers():
    server = FakeServer()
    decided: list[Any] = []
    events: list[Any] = []
    h = local_handler(server, decided, events)
    holder, other = FakeSession("n2"), FakeSession("n3")
    h.session_up("n2", holder)
    h.session_up("n3", other)
    h.propose_from_link(holder, {QUEUE_HEADER: "q", GROUP_HEADER: "g", PROPOSAL_HEADER: "n2"})
    server.persistence.sync()
    h.propose("q", "g", "n1")  # n1's own core caches n2's binding
    h.propose_from_link(other, {QUEUE_HEADER: "q", GROUP_HEADER: "g", PROPOSAL_HEADER: "n3"})
    h.release_from_link(holder, {QUEUE_HEADER: "q", GROUP_HEADER: "g", IDLE_HEADER: "0"})
    assert server.persistence.records[-1] == GroupBound("q", "g", "")
    assert other.decisions == [] and other.receipts == []  # nothing before the sync
    server.persistence.sync()
    assert decided == [("q", "g", "n2")]
    assert other.decisions == [("q", "g", "n2")]
    # the notice comes after the answer on the same connection, so n3 drops what it cached
    assert other.receipts == [
        (
            MOVED_RECEIPT,
            {QUEUE_HEADER: "q", GROUP_HEADER: "g", BOUND_TO_HEADER: "", RELEASED_FROM_HEADER: "n2"},
        )
    ]
    assert holder.receipts == [
        (RELEASED_RECEIPT, {QUEUE_HEADER: "q", GROUP_HEADER: "g", RELEASED_HEADER: "true"})
    ]
    assert events == [("moved", "q", "g", "n2")]  # n1's own cache too


def test_a_reaper_asking_while_an_answer_waits_for_the_sync_keeps_the_binding():
    server = FakeServer()
    h = local_handler(server, [])
    holder, asker = FakeSession("n2"), FakeSession("n3")
    h.propose_from_link(holder, {QUEUE_HEADER: "q", GROUP_HEADER: "g", PROPOSAL_HEADER: "n2"})
    server.persistence.sync()
    h.propose_from_link(asker, {QUEUE_HEADER: "q", GROUP_HEADER: "g", PROPOSAL_HEADER: "n3"})
    h.decisions.used[("q", "g")] -= 10**6  # as if the answer had waited that long for a sync
    h.release_from_link(holder, {QUEUE_HEADER: "q", GROUP_HEADER: "g", IDLE_HEADER: "1000"})
    server.persistence.sync()
    assert asker.decisions == [("q", "g", "n2")]  # n3 routes to n2 from now on
    assert holder.receipts == [
        (RELEASED_RECEIPT, {QUEUE_HEADER: "q", GROUP_HEADER: "g", RELEASED_HEADER: "false"})
    ]
    assert h.bindings() == {"q": {"g": "n2"}} and h.decisions.answering == {}


def test_the_local_nodes_own_reaper_and_touch_and_forget():
    server = FakeServer()
    decided: list[Any] = []
    events: list[Any] = []
    h = local_handler(server, decided, events)
    remote_node = FakeSession("n2")
    h.session_up("n2", remote_node)
    h.propose("q", "a", "n1")
    h.propose_from_link(remote_node, {QUEUE_HEADER: "q", GROUP_HEADER: "b", PROPOSAL_HEADER: "n3"})
    server.persistence.sync()
    h.touch("q", "b")
    h.touch_from_link(remote_node, {QUEUE_HEADER: "q", GROUP_HEADER: "x"})
    h.release("q", "a", 0)
    server.persistence.sync()
    assert events[:2] == [("touched", "q", "b", "n3"), ("released", "q", "a", True)]
    assert (TOUCHED_RECEIPT, {QUEUE_HEADER: "q", GROUP_HEADER: "x", BOUND_TO_HEADER: ""}) in (
        remote_node.receipts
    )
    assert remote_node.receipts[-1][0] == MOVED_RECEIPT  # n1's release of a
    done: list[int] = []
    h.forget("n3", done.append)
    assert done == []
    server.persistence.sync()
    assert done == [1] and h.bindings() == {}
    assert events[-1] == ("moved", "q", "b", "n3")


def test_a_release_frame_needs_its_idle_header():
    h = local_handler(FakeServer(), [])
    with pytest.raises(ProtocolError, match=IDLE_HEADER):
        h.release_from_link(FakeSession(), {QUEUE_HEADER: "q", GROUP_HEADER: "g"})


def test_a_remote_node_releases_through_the_local_node_and_checks_its_cache_when_back():
    link = FakeLink()
    events: list[Any] = []
    cache = [("q", "a"), ("q", "b")]
    h = RemoteHandler(
        "n2",
        {"n1": link},
        lambda q, g, n: events.append(("decided", q, g, n)),
        lambda q, g: False,
        cached=lambda: cache,
        on_touched=lambda q, g, n: events.append(("touched", q, g, n)),
        on_released=lambda q, g, r: events.append(("released", q, g, r)),
        on_moved=lambda q, g, n: events.append(("moved", q, g, n)),
    )
    h.members_changed({"n1": {"grouping": "local"}})
    link.up = False
    h.release("q", "a", 500)  # the link is down: asked again when it is back
    link.up = True
    h.link_up("n1")
    assert link.frames == [
        (RELEASE_DESTINATION, {QUEUE_HEADER: "q", GROUP_HEADER: "a", IDLE_HEADER: "500"}),
        (TOUCH_DESTINATION, {QUEUE_HEADER: "q", GROUP_HEADER: "a"}),
        (TOUCH_DESTINATION, {QUEUE_HEADER: "q", GROUP_HEADER: "b"}),
    ]
    answer = {QUEUE_HEADER: "q", GROUP_HEADER: "a", RELEASED_HEADER: "true"}
    h.receipt_from_link("n1", RELEASED_RECEIPT, answer)
    h.receipt_from_link("n1", RELEASED_RECEIPT, answer)  # a repeat: answered once
    h.receipt_from_link("n3", MOVED_RECEIPT, answer)  # not the local node: ignored
    notice = {QUEUE_HEADER: "q", GROUP_HEADER: "b", BOUND_TO_HEADER: "", RELEASED_FROM_HEADER: "n3"}
    h.receipt_from_link("n1", MOVED_RECEIPT, notice)
    h.receipt_from_link("n1", TOUCHED_RECEIPT, {QUEUE_HEADER: "q", GROUP_HEADER: "b"})
    assert events == [
        ("released", "q", "a", True),
        ("moved", "q", "b", "n3"),
        ("touched", "q", "b", ""),
    ]


def test_a_node_releases_a_reaped_binding_only_once_what_drained_it_is_synced():
    from types import SimpleNamespace

    from shoal.broker.effects import ReleaseBinding
    from shoal.server.cluster.node import ClusterNode

    server = FakeServer()
    server.redelivered_below = 0  # type: ignore[attr-defined]
    from shoal.server.config import ClusterConfig

    config = ClusterConfig(node="n2", zookeeper="127.0.0.1:1", group_timeout_ms=1000)
    node = ClusterNode(server, config)
    asked: list[tuple[str, str, int]] = []
    node.handler = SimpleNamespace(release=lambda q, g, idle: asked.append((q, g, idle)))  # type: ignore[assignment]
    server.persistence.append(["the ack that drained the group"])
    node.release(ReleaseBinding("q", "g", 1000))
    assert asked == []  # a crash now would bring the message back: keep the binding
    server.persistence.sync()
    assert asked == [("q", "g", 1000)]
