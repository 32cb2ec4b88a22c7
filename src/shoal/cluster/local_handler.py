"""The ``local`` and ``remote`` grouping handlers (C8): Artemis' topology.

One node of the cluster runs ``[cluster.grouping] type = "local"``: it
decides every binding (the first proposal wins, as in ZooKeeper), journals
it as a ``GroupBound`` record and gives the answer only once that record is
synced, so a decision it gave never changes, not even across its restart.
Every other node runs ``type = "remote"`` and asks it over the cluster link:

- proposal: a SEND to ``PROPOSE_DESTINATION`` on the remote's link to the
  local node, headers ``x-shoal-queue``, ``x-shoal-group``,
  ``x-shoal-proposal`` (a node id), no receipt, empty body;
- decision: a RECEIPT with ``receipt-id:binding`` on the same connection,
  the same queue and group headers and ``x-shoal-bound-to`` (the winner).

A remote node finds the local one through membership (the local node's
entry says ``"grouping": "local"``; membership stays in ZooKeeper). While
the local node is down, proposals wait for its link to come back up and are
asked again then; a group not decided within ``timeout`` gets C3's ERROR on
the node that received its SEND, and bound groups keep flowing.

``LocalDecisions`` is the pure part; ``LocalHandler`` and ``RemoteHandler``
are the server-side adapters ``cluster/node.py`` drives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from shoal.errors import ProtocolError
from shoal.records import GroupBound

log = logging.getLogger("shoal.cluster.grouping")

PROPOSE_DESTINATION = "/cluster/propose"  # a link SEND carrying a proposal
DECISION_RECEIPT = "binding"  # receipt-id of the RECEIPT carrying a decision
QUEUE_HEADER = "x-shoal-queue"
GROUP_HEADER = "x-shoal-group"
PROPOSAL_HEADER = "x-shoal-proposal"
BOUND_TO_HEADER = "x-shoal-bound-to"

Decided = Callable[[str, str, str], None]  # (queue, group, node)


class LocalDecisions:
    """The local handler's bindings: (queue, group) -> node; no I/O.

    ``decide`` returns the winner and the record to journal when the
    proposal made a new binding; the caller answers only once it is synced.
    """

    def __init__(self, bindings: dict[tuple[str, str], str] | None = None) -> None:
        self.bindings: dict[tuple[str, str], str] = dict(bindings or {})

    def decide(self, queue: str, group: str, proposal: str) -> tuple[str, GroupBound | None]:
        key = (queue, group)
        node = self.bindings.get(key)
        if node is not None:
            return node, None
        self.bindings[key] = proposal
        return proposal, GroupBound(queue, group, proposal)

    def release(self, queue: str, group: str) -> GroupBound | None:
        """Forget a binding (``forget``, the reaper, a rebind): the record to journal."""
        if self.bindings.pop((queue, group), None) is None:
            return None
        return GroupBound(queue, group, "")


def other_handlers(kind: str, members: dict[str, dict[str, Any]]) -> list[str]:
    """Members whose grouping handler cannot work with ``kind``: ``zookeeper``
    nodes decide in ZooKeeper, ``local``/``remote`` ones on the local node;
    mixed, they would bind one group twice. (Entries without the key are
    from zookeeper nodes that predate it.)"""
    family = ("zookeeper",) if kind == "zookeeper" else ("local", "remote")
    return sorted(n for n, m in members.items() if m.get("grouping", "zookeeper") not in family)


def proposal_headers(queue: str, group: str, proposal: str) -> dict[str, str]:
    return {QUEUE_HEADER: queue, GROUP_HEADER: group, PROPOSAL_HEADER: proposal}


def read_proposal(headers: dict[str, str]) -> tuple[str, str, str]:
    """(queue, group, proposal) of a proposal frame, or ProtocolError naming what is missing."""
    values = []
    for name in (QUEUE_HEADER, GROUP_HEADER, PROPOSAL_HEADER):
        value = headers.get(name)
        if value is None or (name != GROUP_HEADER and not value):
            raise ProtocolError(f"cluster link: a proposal needs the header {name}")
        values.append(value)
    return values[0], values[1], values[2]


def decision_headers(queue: str, group: str, node: str) -> dict[str, str]:
    return {QUEUE_HEADER: queue, GROUP_HEADER: group, BOUND_TO_HEADER: node}


class LocalHandler:
    """``type = "local"``: this node decides, for itself and for the remote nodes."""

    def __init__(
        self, server: Any, bindings: dict[tuple[str, str], str], on_decided: Decided
    ) -> None:
        self.server = server
        self.decisions = LocalDecisions(bindings)
        self.on_decided = on_decided
        self.proposals = 0  # asked by this node or over the link
        self.remote_proposals = 0

    def propose(self, queue: str, group: str, proposal: str) -> None:
        """This node's own core asks."""
        self._decide(queue, group, proposal, lambda node: self.on_decided(queue, group, node))

    def propose_from_link(self, session: Any, headers: dict[str, str]) -> None:
        """A remote node asks over its link; the answer goes back on that connection."""
        queue, group, proposal = read_proposal(headers)
        self.remote_proposals += 1
        self._decide(queue, group, proposal, lambda node: session.send_decision(queue, group, node))

    def _decide(self, queue: str, group: str, proposal: str, answer: Callable[[str], None]) -> None:
        self.proposals += 1
        node, record = self.decisions.decide(queue, group, proposal)
        persistence = self.server.persistence
        # Even an old binding may not be synced yet: answer once everything
        # journaled so far is. A failing disk delays the answer (C3 applies).
        seq = persistence.append([record]) if record is not None else persistence.appended_seq
        persistence.when_synced(seq, lambda _error: answer(node), fail_fast=False)

    def bindings(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for (queue, group), node in self.decisions.bindings.items():
            out.setdefault(queue, {})[group] = node
        return out


class RemoteHandler:
    """``type = "remote"``: ask the local node over the link, until answered or timed out."""

    def __init__(
        self,
        node: str,
        links: dict[str, Any],
        on_decided: Decided,
        still_pending: Callable[[str, str], bool],
    ) -> None:
        self.node = node
        self.links = links  # target node -> LinkClient (owned by ClusterNode)
        self.on_decided = on_decided
        self.still_pending = still_pending
        self.local: str | None = None  # the local handler's node, from membership
        self.conflict: list[str] = []  # more than one node claims to be the local handler
        self.asked: dict[tuple[str, str], str] = {}  # (queue, group) -> proposal, unanswered
        self.proposals = 0
        self.sent = 0

    def members_changed(self, members: dict[str, dict[str, Any]]) -> None:
        # Every membership read (0.5 s): forget what timed out meanwhile (C3).
        for key in [k for k in self.asked if not self.still_pending(*k)]:
            del self.asked[key]
        locals_ = sorted(n for n, m in members.items() if m.get("grouping") == "local")
        if len(locals_) > 1:
            if locals_ != self.conflict:
                log.error(
                    "nodes %s all run the local grouping handler; a cluster needs exactly "
                    "one: no new group is decided until only one is left",
                    ", ".join(locals_),
                )
            self.conflict = locals_
            self.local = None
            return
        self.conflict = []
        # None seen: keep the last one known (it is down; its link keeps trying)
        if locals_ and locals_[0] != self.local:
            self.local = locals_[0]
            log.info("local grouping handler: node %r", self.local)
            self._ask_all()

    def propose(self, queue: str, group: str, proposal: str) -> None:
        self.proposals += 1
        self.asked[(queue, group)] = proposal
        self._ask(queue, group, proposal)

    def link_up(self, target: str) -> None:
        """A link (re)connected: ask again whatever the local node may not have answered."""
        if target == self.local:
            self._ask_all()

    def decision_from_link(self, target: str, headers: dict[str, str]) -> None:
        queue = headers.get(QUEUE_HEADER)
        group = headers.get(GROUP_HEADER)
        node = headers.get(BOUND_TO_HEADER)
        if queue is None or group is None or not node:
            log.warning("cluster link to %r: a decision without queue, group or node", target)
            return
        self.asked.pop((queue, group), None)
        self.on_decided(queue, group, node)

    def _ask_all(self) -> None:
        for (queue, group), proposal in list(self.asked.items()):
            if self.still_pending(queue, group):
                self._ask(queue, group, proposal)
            else:  # timed out (C3) meanwhile: the SENDs got their ERROR
                del self.asked[(queue, group)]

    def _ask(self, queue: str, group: str, proposal: str) -> None:
        link = self.links.get(self.local) if self.local is not None else None
        if link is not None and link.propose(queue, group, proposal):
            self.sent += 1
