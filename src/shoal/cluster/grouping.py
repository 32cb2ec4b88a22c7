"""Clustered grouping, the pure part: which node holds each (queue, group).

No I/O and no clock of its own: the broker core (``broker/routing.py``)
asks it where a group's message goes, and the server's adapters
(``server/cluster/zookeeper.py``, ``server/cluster/link.py``) feed it what
ZooKeeper and the other nodes said, as commands with ``now`` passed in. See
docs/cluster.md for the contract (C1-C10 in DESIGN.md).

- A binding, once known, is cached until the handler says it moved
  (``binding_moved``: a ZooKeeper watch fired). With ``group-timeout`` on,
  a cached binding of another node is also a lease: used only while
  confirmed in ZooKeeper within group-timeout/2, refreshed from
  group-timeout/4 on (C5), so the holder's reaper never removes a binding
  another node may still route through.
- Bindings this node holds carry their last use (a message of the group
  entered the local queue); the reaper (``reap``) picks the ones to release.
- Fencing: a node that may have lost its ZooKeeper session delivers none
  of its groups (``fenced``) until it has a session again whose bindings it
  has re-checked; ``FenceClock`` says when (docs/cluster.md "Partitions and
  fencing").
- A group without a known binding holds its messages, in arrival order,
  while one proposal is out (C2); they are routed together when the
  decision comes, or refused together when ``timeout_ms`` passes first (C3).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

FORWARD_PREFIX = "$cluster.forward."  # + node id: the store-and-forward queue for that node
# Headers a forwarded message carries over the link (and keeps on its target).
ORIGIN_NODE = "x-shoal-origin-node"
ORIGIN_ID = "x-shoal-origin-id"
DESTINATION = "x-shoal-destination"  # on a forward-queue entry: where it goes on the target
# The origin's incarnation (its start time, ms), stamped on a forward-queue
# entry when it is made: origin ids are unique only within one incarnation
# (a crash may reuse the ids of messages it never journaled).
ORIGIN_EPOCH = "x-shoal-origin-epoch"
# On a link SEND: the origin may have sent this entry before (a link dropped,
# or the origin crashed). If the target accepts it anyway (it lost the first
# copy in a crash), it may have reached a consumer already: it is delivered
# with redelivered:true, never twice unflagged.
RESENT = "x-shoal-resent"
# Fence this long before the earliest moment ZooKeeper may expire our session:
# covers clock-rate differences and the event loop's check interval.
FENCE_MARGIN_MS = 1500
WATERMARK_PREFIX = "$cluster.origin."  # + node.epoch: the journal's exactly-once sink key
MOVE_PERIOD_MS = 250  # how often a planned move (cluster rebalance) checks its group drained


def rebalance_plan(holders: dict[str, str], targets: list[str]) -> dict[str, str]:
    """Cluster rebalance of one queue: which groups move where (group ->
    node). ``holders`` maps each bound group to its node, ``targets`` are the
    nodes whose queue has consumers. Groups on other nodes move to a target;
    then groups move from the target with the most to the one with the
    fewest until counts differ by at most one (the single-node
    group-rebalance rule). Deterministic: ties go to the lowest node id, the
    moved groups are the last in name order."""
    if not targets:
        return {}
    targets = sorted(set(targets))
    owned: dict[str, list[str]] = {n: [] for n in targets}
    moves: dict[str, str] = {}
    for group in sorted(holders):
        node = holders[group]
        if node in owned:
            owned[node].append(group)
    for group in sorted(holders):
        if holders[group] not in owned:
            to = min(targets, key=lambda n: (len(owned[n]), n))
            owned[to].append(group)
            moves[group] = to
    while True:
        hi = max(targets, key=lambda n: len(owned[n]))
        lo = min(targets, key=lambda n: len(owned[n]))
        if len(owned[hi]) - len(owned[lo]) <= 1:
            return moves
        group = owned[hi].pop()
        owned[lo].append(group)
        if holders[group] == lo:
            del moves[group]  # back where it is
        else:
            moves[group] = lo


def forward_queue(node: str) -> str:
    return FORWARD_PREFIX + node


def watermark_key(origin: str, epoch: str) -> str:
    """C4 dedup at the target: the highest origin id seen from ``origin`` in
    incarnation ``epoch``. A link sends a forward queue's entries in id order
    and resends the unacked ones in that order, so anything at or below it
    was seen. Kept in the core's ``sink_batches`` and journaled as a
    ``SinkBatchPublished`` record with the message, so it survives a crash."""
    return f"{WATERMARK_PREFIX}{origin}.{epoch}"


@dataclass(slots=True)
class HeldSend:
    """A SEND of a group whose binding is not known yet."""

    conn_id: int
    hold_id: int
    queue: Any  # the broker's Queue
    base: str
    headers: dict[str, str]
    body: bytes
    seq: int
    expires: int
    priority: int
    persistent: bool | None
    # a forward-queue entry taken back for a fresh decision (C6): (queue,
    # message); it leaves that queue only when routed anew. conn_id is 0:
    # no producer waits for it, so it never times out.
    source: Any = None


@dataclass(slots=True)
class Pending:
    proposal: str
    asked_ms: int
    deadline_ms: int
    held: list[HeldSend] = field(default_factory=list)


class FenceClock:
    """When a node must fence itself: a pure rule over what the ZooKeeper
    adapter reports, times in ms of a monotonic clock passed in.

    ZooKeeper expires a session ``session_ms`` after the last request it
    received from the client. ``answered(sent_ms)`` records the send time of a
    request that got an answer: the servers heard from us at or after it, so
    the session lives at least until ``sent_ms + session_ms``. Fencing
    ``FENCE_MARGIN_MS`` before that means no other node can have been given
    our groups (that needs our session gone) while we still deliver them.
    A session that survived a disconnection keeps its bindings: only a new
    session needs the bindings re-checked before unfencing.
    """

    def __init__(self, session_ms: int) -> None:
        self.session_ms = session_ms
        self.contact_ms: int | None = None  # send time of the last answered request
        self.session: int | None = None  # the session whose bindings were checked

    def answered(self, sent_ms: int, session: int) -> None:
        if session == self.session and (self.contact_ms is None or sent_ms > self.contact_ms):
            self.contact_ms = sent_ms

    def checked(self, sent_ms: int, session: int) -> None:
        """The bindings were re-checked in ``session`` by a request sent at ``sent_ms``."""
        self.session = session
        self.contact_ms = sent_ms

    def lost(self) -> None:
        """ZooKeeper said the session expired (kazoo's LOST)."""
        self.session = None
        self.contact_ms = None

    def needs_check(self, session: int) -> bool:
        return session != self.session

    def safe_until_ms(self) -> int | None:
        """Deliver groups until then; None: fenced now (no checked session)."""
        if self.contact_ms is None:
            return None
        return self.contact_ms + self.session_ms - FENCE_MARGIN_MS

    def must_fence(self, now_ms: int) -> bool:
        until = self.safe_until_ms()
        return until is None or now_ms >= until


class ClusterGrouping:
    """One node's view of the cluster's group bindings."""

    def __init__(
        self,
        node: str,
        timeout_ms: int,
        epoch: int = 0,
        *,
        group_timeout_ms: int = -1,
        reaper_period_ms: int = 30_000,
        consumerless_ms: int = -1,
        load_balancing: str = "ON_DEMAND",
    ) -> None:
        self.node = node
        self.timeout_ms = timeout_ms
        self.group_timeout_ms = group_timeout_ms  # C5; -1: bindings never expire
        self.reaper_period_ms = reaper_period_ms
        self.consumerless_ms = consumerless_ms  # C7; -1: off
        self.moving = group_timeout_ms > 0 or consumerless_ms > 0  # track last use
        self.load_balancing = load_balancing  # C9: ON_DEMAND, STRICT or OFF
        self._balance_rr: dict[str, int] = {}  # queue -> round-robin cursor (C9)
        self.balanced = 0  # ungrouped messages sent to another node (C9)
        # cluster rebalance (C7): bindings this node holds -> the node they
        # move to once drained; released as they drain
        self.moves: dict[tuple[str, str], str] = {}
        self.handing_over: dict[tuple[str, str], str] = {}  # released for a move, unanswered
        self.next_move_ms = 0
        self.moved_out = 0
        # C5 leases on other nodes' bindings: key -> when last confirmed (ms)
        self.confirmed: dict[tuple[str, str], int] = {}
        self.touch_sent: dict[tuple[str, str], int] = {}  # refreshes out, when sent
        # bindings this node holds -> last use (a message entered the local queue)
        self.last_use: dict[tuple[str, str], int] = {}
        self.releasing: set[tuple[str, str]] = set()  # a release is out (reaper, C7)
        self.consumerless_since: dict[str, int] = {}  # queue -> when it lost its consumers
        self.next_reap_ms = 0
        self.released = 0
        self.rerouted = 0
        self.stranded_sent = 0  # held here while fenced, sent to a new holder
        self.epoch = str(epoch)  # this incarnation (ORIGIN_EPOCH)
        # forward entries with lower ids were recovered after a crash: they may
        # have been sent before it (the server's redelivered_below)
        self.resend_below = 0
        self.bindings: dict[tuple[str, str], str] = {}  # (queue, group) -> node
        self.pending: dict[tuple[str, str], Pending] = {}
        # other nodes as membership last reported them: node -> queues with consumers
        self.members: dict[str, frozenset[str]] = {}
        # no group of this node is delivered while fenced (the server starts
        # a node fenced: a restarted node's journaled groups may have moved on)
        self.fenced = False
        self.fences = 0  # times this node fenced itself
        self._rr = 0
        self._hold_ids = 0
        # counters for status and metrics
        self.decisions = 0
        self.timeouts = 0
        self.forwarded = 0
        self.duplicates = 0
        self.decision_ms: deque[int] = deque(maxlen=1000)  # recent decision latencies
        self.new_latencies: list[int] = []  # not yet taken by the metrics (take_latencies)

    # --- routing ------------------------------------------------------------

    def route_of(self, queue: str, group: str) -> str | None:
        return self.bindings.get((queue, group))

    def propose(self, queue: str, local_has_consumers: bool) -> str:
        """C2: this node if its queue has consumers, else the next node (round
        robin, in id order) whose queue has consumers, else this node."""
        if local_has_consumers:
            return self.node
        others = sorted(
            n for n, queues in self.members.items() if n != self.node and queue in queues
        )
        if not others:
            return self.node
        self._rr += 1
        return others[self._rr % len(others)]

    def balance(self, queue: str, local_has_consumers: bool) -> str:
        """C9, for an ungrouped message of ``queue``: ON_DEMAND this node if
        its queue has consumers, else round robin over the nodes whose queue
        has some, else this node; STRICT round robin over every node in
        membership; OFF this node."""
        mode = self.load_balancing
        if mode == "ON_DEMAND":
            if local_has_consumers:
                return self.node
            nodes = sorted(n for n, qs in self.members.items() if n != self.node and queue in qs)
        elif mode == "STRICT":
            nodes = sorted(set(self.members) | {self.node})
        else:
            return self.node
        if not nodes:
            return self.node
        i = self._balance_rr.get(queue, 0)
        self._balance_rr[queue] = i + 1
        node = nodes[i % len(nodes)]
        if node != self.node:
            self.balanced += 1
        return node

    def hold(self, key: tuple[str, str], send: HeldSend, proposal: str | None, now_ms: int) -> bool:
        """Hold ``send`` until ``key`` is decided; True if this starts a new
        proposal (``proposal`` must then be given). While this node's own
        release of ``key`` is out, the proposal waits for its answer
        (``Pending.proposal`` empty)."""
        p = self.pending.get(key)
        if p is not None:
            p.held.append(send)
            return False
        assert proposal is not None
        if key in self.releasing:
            proposal = ""
        self.pending[key] = Pending(proposal, now_ms, now_ms + self.timeout_ms, [send])
        return bool(proposal)

    def next_hold_id(self) -> int:
        self._hold_ids += 1
        return self._hold_ids

    def decided(self, key: tuple[str, str], node: str, now_ms: int) -> Pending | None:
        """The handler's answer: cache it; returns what was held, if still pending."""
        self.bindings[key] = node
        if node == self.node:
            self.last_use.setdefault(key, now_ms)
        else:
            self.confirmed[key] = self.touch_sent.pop(key, now_ms)
        p = self.pending.pop(key, None)
        if p is not None:
            self.decisions += 1
            latency = max(0, now_ms - p.asked_ms)
            self.decision_ms.append(latency)
            self.new_latencies.append(latency)
        return p

    def learn(self, key: tuple[str, str], node: str) -> None:
        """A binding learnt on the way (a forwarded message names its target)."""
        self.bindings.setdefault(key, node)

    # --- bindings that move (C5, C6, C7) ---------------------------------------

    def lease(self, key: tuple[str, str], now_ms: int) -> int:
        """C5, for another node's binding: 0 usable, 1 usable but refresh it
        now, 2 expired (ask again before routing through it)."""
        gt = self.group_timeout_ms
        if gt <= 0:
            return 0
        age = now_ms - self.confirmed.get(key, -gt)
        if age >= gt // 2:
            return 2
        if age >= gt // 4 and now_ms - self.touch_sent.get(key, -gt) >= gt // 4:
            self.touch_sent[key] = now_ms
            return 1
        return 0

    def refresh_due(self, key: tuple[str, str], now_ms: int) -> bool:
        """C5: a lease on a binding with messages still queued towards its node
        is refreshed from group-timeout/4 on, whether or not it is used."""
        gt = self.group_timeout_ms
        if gt <= 0 or now_ms - self.confirmed.get(key, -gt) < gt // 4:
            return False
        if now_ms - self.touch_sent.get(key, -gt) < gt // 4:
            return False
        self.touch_sent[key] = now_ms
        return True

    def moved(self, key: tuple[str, str]) -> str | None:
        """The binding changed or went (a watch fired): forget it; the old node."""
        self.confirmed.pop(key, None)
        self.touch_sent.pop(key, None)
        self.last_use.pop(key, None)
        return self.bindings.pop(key, None)

    def used(self, key: tuple[str, str], now_ms: int) -> None:
        """A message of a group this node holds entered its queue."""
        self.last_use[key] = now_ms

    def reap_due(self, now_ms: int) -> bool:
        if self.moves and now_ms >= self.next_move_ms:
            return True  # planned moves (cluster rebalance) ride the reaper's pass
        if self.group_timeout_ms <= 0 and self.consumerless_ms <= 0:
            return False
        if now_ms < self.next_reap_ms:
            return False
        period = self.reaper_period_ms
        if self.group_timeout_ms > 0:  # leases are refreshed from this pass too
            period = min(period, max(1, self.group_timeout_ms // 4))
        self.next_reap_ms = now_ms + period
        return True

    def reap(
        self,
        now_ms: int,
        drained: Callable[[str, str], bool],
        has_consumers: Callable[[str], bool],
    ) -> list[tuple[tuple[str, str], int]]:
        """The bindings this node holds that should go now, each with the idle
        time ZooKeeper must confirm (others' lease refreshes): C5 unused for
        ``group_timeout_ms``; C7 its queue without consumers here for
        ``consumerless_ms`` while another node's has some. Only groups
        ``drained`` here (nothing pending or in flight). They leave the cache
        and are marked releasing until the handler answers."""
        for queue in {q for q, _g in self.last_use}:
            if has_consumers(queue):
                self.consumerless_since.pop(queue, None)
            else:
                self.consumerless_since.setdefault(queue, now_ms)
        out: list[tuple[tuple[str, str], int]] = []
        gt, ct = self.group_timeout_ms, self.consumerless_ms
        for key, last in list(self.last_use.items()):
            if self.bindings.get(key) != self.node or key in self.pending:
                continue
            queue, group = key
            idle = 0
            if gt > 0 and now_ms - last >= gt:
                idle = gt
            elif not (
                ct > 0
                and now_ms - self.consumerless_since.get(queue, now_ms) >= ct
                and any(queue in qs for n, qs in self.members.items() if n != self.node)
            ):
                continue
            if not drained(queue, group):
                continue
            del self.bindings[key]
            del self.last_use[key]
            self.releasing.add(key)
            out.append((key, idle))
        return out

    def plan_moves(self, queue: str, moves: dict[str, str], now_ms: int) -> int:
        """Cluster rebalance: of ``moves`` (group -> target node), keep the
        groups this node holds; they replace any earlier plan for ``queue``.
        How many are this node's."""
        for key in [k for k in self.moves if k[0] == queue]:
            del self.moves[key]
        for group, target in moves.items():
            key = (queue, group)
            if target != self.node and self.bindings.get(key) == self.node:
                self.moves[key] = target
        self.next_move_ms = now_ms
        return sum(1 for k in self.moves if k[0] == queue)

    def due_moves(
        self, now_ms: int, drained: Callable[[str, str], bool]
    ) -> list[tuple[tuple[str, str], str]]:
        """The planned moves whose group is drained here now, taken out of the
        cache and marked releasing (the same release as the reaper's). A
        group not drained waits for the next pass; one no longer held here
        is dropped from the plan."""
        if not self.moves or now_ms < self.next_move_ms:
            return []
        self.next_move_ms = now_ms + MOVE_PERIOD_MS
        out: list[tuple[tuple[str, str], str]] = []
        for key, target in list(self.moves.items()):
            if self.bindings.get(key) != self.node:
                del self.moves[key]  # moved meanwhile (reaper, C7, forget)
                continue
            if key in self.pending or key in self.releasing or not drained(*key):
                continue
            del self.moves[key]
            del self.bindings[key]
            self.last_use.pop(key, None)
            self.releasing.add(key)
            self.handing_over[key] = target
            out.append((key, target))
        return out

    def release_answered(self, key: tuple[str, str], released: bool, now_ms: int) -> None:
        """The handler's answer to a release: gone, or still ours (used meanwhile)."""
        self.releasing.discard(key)
        target = self.handing_over.pop(key, None)
        if released:
            if target is None:
                self.released += 1
            else:
                self.moved_out += 1
        else:
            self.bindings[key] = self.node
            self.last_use[key] = now_ms
            if target is not None:  # e.g. a lease refresh raced the delete: try again
                self.moves[key] = target

    def expired(self, now_ms: int) -> list[tuple[tuple[str, str], Pending]]:
        """C3: the pending decisions past their deadline, removed."""
        out = [(k, p) for k, p in self.pending.items() if p.deadline_ms <= now_ms]
        for k, _p in out:
            del self.pending[k]
        self.timeouts += len(out)
        return out

    def next_deadline_ms(self) -> int | None:
        reap = None
        if self.last_use or self.confirmed:
            if self.group_timeout_ms > 0 or self.consumerless_ms > 0:
                reap = self.next_reap_ms
        if self.moves and (reap is None or self.next_move_ms < reap):
            reap = self.next_move_ms
        if not self.pending:
            return reap
        first = min(p.deadline_ms for p in self.pending.values())
        return first if reap is None else min(first, reap)

    def take_latencies(self) -> list[int]:
        out = self.new_latencies
        self.new_latencies = []
        return out

    def is_pending(self, key: tuple[str, str]) -> bool:
        return key in self.pending

    # --- membership and forwarding -------------------------------------------

    def set_members(self, members: dict[str, frozenset[str]]) -> None:
        self.members = dict(members)

    def held_by(self) -> dict[str, int]:
        """node -> bindings this node knows it holds."""
        out: dict[str, int] = {}
        for node in self.bindings.values():
            out[node] = out.get(node, 0) + 1
        return out
