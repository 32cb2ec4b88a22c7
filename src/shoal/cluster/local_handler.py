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

Bindings move (C5-C7) by release only, decided by the local node too:

- a holder's reaper (C5, C7) asks it to release (``RELEASE_DESTINATION``,
  ``x-shoal-idle-ms``): released only if the binding still names the
  holder and no other node used it for that long (proposals answered and
  lease refreshes count, on the local node's clock); answer: a RECEIPT
  ``receipt-id:released`` with ``x-shoal-released:true|false``;
- a lease refresh (C5) or a check of a cached binding is a SEND to
  ``TOUCH_DESTINATION``; answer: ``receipt-id:touched`` with
  ``x-shoal-bound-to`` (empty: no binding);
- every release (the reaper's, C7's, ``forget``, rebind-after) is journaled
  (``GroupBound`` with an empty node) and, once synced, pushed to every
  connected remote node as ``receipt-id:moved`` with ``x-shoal-bound-to``
  empty and ``x-shoal-released-from`` (the old node). All answers to one
  remote node go out on its own link connection in the order the local
  node decided them (each waits for the sync of everything journaled
  before it), so a remote never caches a binding after its release notice;
- a remote node whose link to the local node (re)connects checks every
  binding it caches (a touch each): notices sent while it was away are lost.

``LocalDecisions`` is the pure part; ``LocalHandler`` and ``RemoteHandler``
are the server-side adapters ``server/cluster/node.py`` drives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from shoal.errors import ProtocolError
from shoal.records import GroupBound

log = logging.getLogger("shoal.cluster.grouping")

PROPOSE_DESTINATION = "/cluster/propose"  # a link SEND carrying a proposal
TOUCH_DESTINATION = "/cluster/touch"  # a lease refresh or check of a cached binding
RELEASE_DESTINATION = "/cluster/release"  # a holder's reaper asks to release
DECISION_RECEIPT = "binding"  # receipt-id of the RECEIPT carrying a decision
TOUCHED_RECEIPT = "touched"  # the answer to a touch: the binding now ("" none)
RELEASED_RECEIPT = "released"  # the answer to a release
MOVED_RECEIPT = "moved"  # pushed: a binding was released
HANDLER_DESTINATIONS = (PROPOSE_DESTINATION, TOUCH_DESTINATION, RELEASE_DESTINATION)
# receipt-ids the link client hands to the grouping handler, not to its acks
HANDLER_RECEIPTS = (DECISION_RECEIPT, TOUCHED_RECEIPT, RELEASED_RECEIPT, MOVED_RECEIPT)
IDLE_HEADER = "x-shoal-idle-ms"
RELEASED_HEADER = "x-shoal-released"
RELEASED_FROM_HEADER = "x-shoal-released-from"
QUEUE_HEADER = "x-shoal-queue"
GROUP_HEADER = "x-shoal-group"
PROPOSAL_HEADER = "x-shoal-proposal"
BOUND_TO_HEADER = "x-shoal-bound-to"

Decided = Callable[[str, str, str], None]  # (queue, group, node)


class LocalDecisions:
    """The local handler's bindings: (queue, group) -> node; no I/O.

    ``decide`` returns the winner and the record to journal when the
    proposal made a new binding; the caller answers only once it is synced.
    Each binding's last use by any node (a proposal answered, a lease
    refreshed; ms, the caller's clock) guards the holder's reaper (C5).
    An answer waits for a sync, so it is a use twice: when given and when it
    goes out (``answered``); in between, the binding is not released, or the
    asker could route to a holder that let it go. Not journaled: after a
    restart every binding counts as used then.
    """

    def __init__(self, bindings: dict[tuple[str, str], str] | None = None, now_ms: int = 0) -> None:
        self.bindings: dict[tuple[str, str], str] = dict(bindings or {})
        self.used: dict[tuple[str, str], int] = dict.fromkeys(self.bindings, now_ms)
        self.answering: dict[tuple[str, str], int] = {}  # answers given, not yet out

    def decide(
        self, queue: str, group: str, proposal: str, now_ms: int = 0
    ) -> tuple[str, GroupBound | None]:
        key = (queue, group)
        self.used[key] = now_ms
        self.answering[key] = self.answering.get(key, 0) + 1
        node = self.bindings.get(key)
        if node is not None:
            return node, None
        self.bindings[key] = proposal
        return proposal, GroupBound(queue, group, proposal)

    def touch(self, queue: str, group: str, now_ms: int) -> str:
        """A lease refresh (C5): the binding now, "" if none."""
        key = (queue, group)
        node = self.bindings.get(key, "")
        if node:
            self.used[key] = now_ms
        self.answering[key] = self.answering.get(key, 0) + 1  # "" as well: one per answer
        return node

    def answered(self, queue: str, group: str, now_ms: int) -> None:
        """An answer ``decide`` or ``touch`` gave went out (its sync came)."""
        key = (queue, group)
        left = self.answering.pop(key, 0) - 1
        if left > 0:
            self.answering[key] = left
        if key in self.bindings:
            self.used[key] = now_ms

    def release(self, queue: str, group: str) -> GroupBound | None:
        """Forget a binding (``forget``, the reaper, a rebind): the record to journal."""
        self.used.pop((queue, group), None)
        if self.bindings.pop((queue, group), None) is None:
            return None
        return GroupBound(queue, group, "")

    def release_idle(
        self, queue: str, group: str, holder: str, idle_ms: int, now_ms: int
    ) -> tuple[bool, GroupBound | None]:
        """The holder's reaper asks (C5, C7): (released, record to journal).
        A binding that no longer names ``holder`` is not its to keep: True,
        nothing to journal. One another node used within ``idle_ms``, or with
        an answer still to go out: False (C7, ``idle_ms`` 0, waits for neither)."""
        key = (queue, group)
        if self.bindings.get(key) != holder:
            return True, None
        if idle_ms > 0 and (key in self.answering or now_ms - self.used.get(key, now_ms) < idle_ms):
            return False, None
        return True, self.release(queue, group)

    def forget(self, node: str) -> list[GroupBound]:
        """C6: release every binding of ``node``; the records to journal."""
        keys = [k for k, n in self.bindings.items() if n == node]
        return [r for k in keys if (r := self.release(*k)) is not None]


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


def read_names(headers: dict[str, str]) -> tuple[str, str]:
    """(queue, group) of a touch or release frame, or ProtocolError naming what is missing."""
    queue, group = headers.get(QUEUE_HEADER), headers.get(GROUP_HEADER)
    if not queue:
        raise ProtocolError(f"cluster link: a binding frame needs the header {QUEUE_HEADER}")
    if group is None:
        raise ProtocolError(f"cluster link: a binding frame needs the header {GROUP_HEADER}")
    return queue, group


def _now_ms() -> int:
    return int(time.time() * 1000)


class LocalHandler:
    """``type = "local"``: this node decides, for itself and for the remote nodes.

    Callbacks into this node's core: ``on_decided`` (an answer to its own
    proposal), ``on_touched(queue, group, node or "")`` (its lease refresh),
    ``on_released(queue, group, released)`` (its reaper's release) and
    ``on_moved(queue, group, old node)`` (another node's binding released).
    """

    def __init__(
        self,
        server: Any,
        node: str,
        bindings: dict[tuple[str, str], str],
        on_decided: Decided,
        on_touched: Decided,
        on_released: Callable[[str, str, bool], None],
        on_moved: Decided,
    ) -> None:
        self.server = server
        self.node = node
        self.decisions = LocalDecisions(bindings, _now_ms())
        self.on_decided = on_decided
        self.on_touched = on_touched
        self.on_released = on_released
        self.on_moved = on_moved
        self.sessions: dict[str, Any] = {}  # remote node -> its link session to this node
        self.proposals = 0  # asked by this node or over the link
        self.remote_proposals = 0

    def session_up(self, node: str, session: Any) -> None:
        self.sessions[node] = session

    def session_down(self, node: str, session: Any) -> None:
        if self.sessions.get(node) is session:
            del self.sessions[node]

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
        node, record = self.decisions.decide(queue, group, proposal, _now_ms())
        self._after(record, lambda: self._answer(queue, group, lambda: answer(node)))

    def _answer(self, queue: str, group: str, send: Callable[[], None]) -> None:
        self.decisions.answered(queue, group, _now_ms())
        send()

    def _after(self, record: GroupBound | None, then: Callable[[], None]) -> None:
        """Run ``then`` once everything journaled so far (and ``record``) is
        synced: even an old binding may not be synced yet, and answers keep
        the order of the decisions. A failing disk delays them (C3 applies)."""
        persistence = self.server.persistence
        seq = persistence.append([record]) if record is not None else persistence.appended_seq
        persistence.when_synced(seq, lambda _error: then(), fail_fast=False)

    # --- bindings that move (C5-C7) ----------------------------------------------

    def touch(self, queue: str, group: str) -> None:
        node = self.decisions.touch(queue, group, _now_ms())
        self._after(
            None, lambda: self._answer(queue, group, lambda: self.on_touched(queue, group, node))
        )

    def touch_from_link(self, session: Any, headers: dict[str, str]) -> None:
        queue, group = read_names(headers)
        node = self.decisions.touch(queue, group, _now_ms())
        answer = decision_headers(queue, group, node)
        self._after(
            None,
            lambda: self._answer(
                queue, group, lambda: session.send_handler_receipt(TOUCHED_RECEIPT, answer)
            ),
        )

    def release(self, queue: str, group: str, idle_ms: int) -> None:
        """This node's own reaper asks (it holds the binding)."""
        released, record = self.decisions.release_idle(queue, group, self.node, idle_ms, _now_ms())

        def then() -> None:
            self.on_released(queue, group, released)
            if record is not None:
                self._notify(queue, group, self.node)

        self._after(record, then)

    def release_from_link(self, session: Any, headers: dict[str, str]) -> None:
        queue, group = read_names(headers)
        try:
            idle_ms = int(headers.get(IDLE_HEADER, ""))
        except ValueError:
            raise ProtocolError(
                f"cluster link: a release needs the header {IDLE_HEADER} (ms)"
            ) from None
        holder = session.origin
        released, record = self.decisions.release_idle(queue, group, holder, idle_ms, _now_ms())

        def then() -> None:
            answer = {QUEUE_HEADER: queue, GROUP_HEADER: group}
            answer[RELEASED_HEADER] = "true" if released else "false"
            session.send_handler_receipt(RELEASED_RECEIPT, answer)
            if record is not None:
                self._notify(queue, group, holder)

        self._after(record, then)

    def forget(self, node: str, done: Callable[[int], None]) -> None:
        """C6: release every binding of ``node``; ``done(count)`` once synced."""
        records = self.decisions.forget(node)
        if not records:
            self._after(None, lambda: done(0))
            return
        persistence = self.server.persistence
        seq = persistence.append(list(records))

        def then(_error: Any) -> None:
            for r in records:
                self._notify(r.queue, r.group, node)
            done(len(records))

        persistence.when_synced(seq, then, fail_fast=False)

    def _notify(self, queue: str, group: str, old: str) -> None:
        """A binding of ``old`` was released (and synced): tell every node
        but ``old`` itself (its reaper asked, or it is gone)."""
        headers = {**decision_headers(queue, group, ""), RELEASED_FROM_HEADER: old}
        for node, session in list(self.sessions.items()):
            if node != old:
                session.send_handler_receipt(MOVED_RECEIPT, headers)
        if old != self.node:
            self.on_moved(queue, group, old)

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
        *,
        cached: Callable[[], list[tuple[str, str]]] = list,
        on_touched: Decided | None = None,
        on_released: Callable[[str, str, bool], None] | None = None,
        on_moved: Decided | None = None,
    ) -> None:
        self.node = node
        self.links = links  # target node -> LinkClient (owned by ClusterNode)
        self.on_decided = on_decided
        self.still_pending = still_pending
        self.cached = cached  # the bindings this node's core caches
        self.on_touched = on_touched
        self.on_released = on_released
        self.on_moved = on_moved
        self.local: str | None = None  # the local handler's node, from membership
        self.conflict: list[str] = []  # more than one node claims to be the local handler
        self.asked: dict[tuple[str, str], str] = {}  # (queue, group) -> proposal, unanswered
        self.releasing: dict[tuple[str, str], int] = {}  # releases out -> idle ms
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
        """A link (re)connected: ask again whatever the local node may not
        have answered, and check every cached binding (release notices sent
        while the link was down are lost)."""
        if target == self.local:
            self._ask_all()
            for key, idle in list(self.releasing.items()):
                self._send_release(key, idle)
            for queue, group in self.cached():
                self.touch(queue, group)

    def touch(self, queue: str, group: str) -> None:
        """A lease refresh (C5) or a check; unanswered while the link is down."""
        link = self.links.get(self.local) if self.local is not None else None
        if link is not None:
            link.control(TOUCH_DESTINATION, {QUEUE_HEADER: queue, GROUP_HEADER: group})

    def release(self, queue: str, group: str, idle_ms: int) -> None:
        """This node's reaper (C5, C7): asked until answered, the link down or not;
        meanwhile the group's new messages wait (C3 applies)."""
        self.releasing[(queue, group)] = idle_ms
        self._send_release((queue, group), idle_ms)

    def _send_release(self, key: tuple[str, str], idle_ms: int) -> None:
        link = self.links.get(self.local) if self.local is not None else None
        if link is not None:
            headers = {QUEUE_HEADER: key[0], GROUP_HEADER: key[1], IDLE_HEADER: str(idle_ms)}
            link.control(RELEASE_DESTINATION, headers)

    def receipt_from_link(self, target: str, receipt_id: str, headers: dict[str, str]) -> None:
        """The local node's answers and notices (HANDLER_RECEIPTS)."""
        queue = headers.get(QUEUE_HEADER)
        group = headers.get(GROUP_HEADER)
        if queue is None or group is None or target != self.local:
            log.warning("cluster link to %r: a %r receipt out of place", target, receipt_id)
            return
        node = headers.get(BOUND_TO_HEADER, "")
        if receipt_id == DECISION_RECEIPT:
            if not node:
                log.warning("cluster link to %r: a decision without a node", target)
                return
            self.asked.pop((queue, group), None)
            self.on_decided(queue, group, node)
        elif receipt_id == TOUCHED_RECEIPT:
            if self.on_touched is not None:
                self.on_touched(queue, group, node)
        elif receipt_id == RELEASED_RECEIPT:
            if self.releasing.pop((queue, group), None) is not None and self.on_released:
                self.on_released(queue, group, headers.get(RELEASED_HEADER) == "true")
        elif receipt_id == MOVED_RECEIPT and self.on_moved is not None:
            self.on_moved(queue, group, headers.get(RELEASED_FROM_HEADER, ""))

    def _ask_all(self) -> None:
        for (queue, group), proposal in list(self.asked.items()):
            if self.still_pending(queue, group):
                self._ask(queue, group, proposal)
            else:  # timed out (C3) meanwhile: the SENDs got their ERROR
                del self.asked[(queue, group)]

    def _ask(self, queue: str, group: str, proposal: str) -> None:
        link = self.links.get(self.local) if self.local is not None else None
        if link is not None and link.control(
            PROPOSE_DESTINATION, proposal_headers(queue, group, proposal)
        ):
            self.sent += 1
