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

This module is the pure part: ``LocalDecisions``, the frames' headers and
their checks. The adapters that journal the decisions and send them over the
link, ``LocalHandler`` and ``RemoteHandler``, are in
``server/cluster/handlers.py``; ``server/cluster/node.py`` drives them.
"""

from __future__ import annotations

from typing import Any

from shoal.errors import ProtocolError
from shoal.records import GroupBound

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
