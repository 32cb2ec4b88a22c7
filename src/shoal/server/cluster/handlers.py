"""The ``local`` and ``remote`` grouping handlers' adapters (C8).

``LocalHandler`` journals ``LocalDecisions``' records through the server's
persistence and answers once they are synced, to this node's core or over a
remote node's link session; ``RemoteHandler`` asks the local node over this
node's link clients. ``node.py`` drives both; the protocol and the decisions
are :mod:`shoal.cluster.local_handler`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from shoal.cluster.local_handler import (
    BOUND_TO_HEADER,
    DECISION_RECEIPT,
    GROUP_HEADER,
    IDLE_HEADER,
    MOVED_RECEIPT,
    PROPOSE_DESTINATION,
    QUEUE_HEADER,
    RELEASE_DESTINATION,
    RELEASED_FROM_HEADER,
    RELEASED_HEADER,
    RELEASED_RECEIPT,
    TOUCH_DESTINATION,
    TOUCHED_RECEIPT,
    LocalDecisions,
    decision_headers,
    proposal_headers,
    read_names,
    read_proposal,
)
from shoal.errors import ProtocolError
from shoal.records import GroupBound

log = logging.getLogger("shoal.cluster.grouping")

Decided = Callable[[str, str, str], None]  # (queue, group, node)


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
