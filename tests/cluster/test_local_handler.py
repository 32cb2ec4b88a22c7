"""The local / remote grouping handlers (C8) without I/O: decisions, their
journal records, when answers go out, and what a remote node asks when."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.cluster.local_handler import (
    BOUND_TO_HEADER,
    GROUP_HEADER,
    PROPOSAL_HEADER,
    QUEUE_HEADER,
    LocalDecisions,
    LocalHandler,
    RemoteHandler,
    other_handlers,
    read_proposal,
)
from shoal.errors import ProtocolError
from shoal.records import GroupBound
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
    def __init__(self) -> None:
        self.decisions: list[tuple[str, str, str]] = []

    def send_decision(self, queue: str, group: str, node: str) -> None:
        self.decisions.append((queue, group, node))


def test_the_local_handler_answers_only_once_its_decision_is_synced():
    server = FakeServer()
    decided: list[tuple[str, str, str]] = []
    h = LocalHandler(server, {}, lambda q, g, n: decided.append((q, g, n)))
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

    def propose(self, queue: str, group: str, proposal: str) -> bool:
        if self.up:
            self.asked.append((queue, group, proposal))
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
    h.decision_from_link("n1", {QUEUE_HEADER: "q", GROUP_HEADER: "g", BOUND_TO_HEADER: "n3"})
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
    h.decision_from_link("n1", {QUEUE_HEADER: "q"})
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
