"""The consumers of one classic queue (``ConsumerSet``): who joined, who
may receive (G13's exclusive choice; the others wait in the set, inactive),
the round-robin cursor for ungrouped messages (G10), the fewest-groups
choice for a new group (G6) and the G8 choice of groups to hand a newcomer.

It only chooses and keeps count: what a choice sets off (a group placed, a
waiting group given back, a draining group reset) is the queue's
(queue.py, dispatch.py).

``lineup`` lists the consumers that may receive, in subscription order; a
consumer that left stays there (closed, never ready) until the list is
compacted, so joining and leaving cost O(1) amortised. ``pickable`` is a
heap of (bound groups, turn, consumer) over the active consumers with
credit, each consumer with one live entry (``Consumer.pick_entry``, others
are stale): a new group goes to its top, the consumer with the fewest
groups, ties to the one that was given a group least recently (``turn``;
initially subscription order), in O(log consumers).
"""

from __future__ import annotations

from collections import deque
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Literal

from shoal.broker.model import F_PARKED, F_RELEASE

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from shoal.broker.model import Consumer, Group, PickEntry


def groups_of(c: Consumer) -> list[Group]:
    """The groups bound to ``c`` (its intrusive list), oldest binding first."""
    out = []
    g = c.ghead
    while g is not None:
        out.append(g)
        g = g.cnext
    return out


class ConsumerSet:
    """The consumers of one queue, in subscription order."""

    __slots__ = (
        "members",
        "exclusive",
        "exclusive_members",
        "with_selector",
        "lineup",
        "nactive",
        "pickable",
        "turns",
        "round_robin_at",
    )

    def __init__(self, *, exclusive: bool = False) -> None:
        # a dict: O(1) removal, subscription order
        self.members: dict[Consumer, None] = {}
        self.exclusive = exclusive  # the queue setting: the first consumer alone receives
        self.exclusive_members: dict[Consumer, None] = {}  # those that asked to be (G13)
        self.with_selector = 0  # members with a selector
        self.lineup: list[Consumer] = []  # who may receive (and closed ones, until compacted)
        self.nactive = 0
        self.pickable: list[PickEntry] = []
        self.turns = 0  # counts bindings and entries, for G6 ties
        self.round_robin_at = 0

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[Consumer]:
        return iter(self.members)

    def __contains__(self, c: object) -> bool:
        return c in self.members

    # -- joining and leaving ------------------------------------------------------

    def add(self, c: Consumer) -> None:
        self.members[c] = None
        if c.exclusive:
            self.exclusive_members[c] = None
        if c.accepts is not None:
            self.with_selector += 1

    def remove(self, c: Consumer) -> None:
        """``c`` leaves the set (the lineup drops it with ``leave_lineup``)."""
        if c in self.members:
            del self.members[c]
            if c.accepts is not None:
                self.with_selector -= 1
        self.exclusive_members.pop(c, None)

    # -- who may receive (G13), in O(1) unless the exclusive choice changes -------

    def sole_consumer(self) -> Consumer | None:
        """G13: the one consumer that may receive, or None when all may."""
        if self.exclusive_members:
            return next(iter(self.exclusive_members))
        if self.exclusive and self.members:
            return next(iter(self.members))
        return None

    def active_consumers(self) -> list[Consumer]:
        return [c for c in self.lineup if c.active]

    def enter_lineup(self, c: Consumer) -> None:
        """``c`` may receive from now on (the caller gives it what waits)."""
        c.active = True
        self.nactive += 1
        self.lineup.append(c)
        self.turns += 1
        c.turn = self.turns

    def leave_lineup(self, c: Consumer) -> None:
        """Closed ``c`` stops receiving; its slot in ``lineup`` is dropped lazily."""
        c.active = False
        c.pick_entry = None
        self.nactive -= 1
        lineup = self.lineup
        if len(lineup) > 2 * self.nactive + 16:
            self.round_robin_at = sum(1 for x in lineup[: self.round_robin_at] if x.active)
            self.lineup = [x for x in lineup if x.active]
        if len(self.pickable) > 2 * self.nactive + 32:
            self.compact_pickable()

    def clear_lineup(self) -> list[Consumer]:
        """A new exclusive consumer: every active one stops receiving. Returns
        them, in lineup order (their groups move once drained)."""
        stopped = []
        for c in self.lineup:
            if c.active:
                c.active = False
                c.pick_entry = None
                stopped.append(c)
        self.lineup = []
        self.nactive = 0
        self.round_robin_at = 0
        return stopped

    # -- the fewest-groups choice (G6) ---------------------------------------------

    def gave_group(self, c: Consumer) -> None:
        """``c`` was just given a group: it goes last among its ties (G6)."""
        self.turns += 1
        c.turn = self.turns
        if c.active:
            self.push_pick(c)

    def push_pick(self, c: Consumer) -> None:
        """Give active ``c`` a fresh entry in ``pickable`` (its old one goes stale)."""
        # A list, not a tuple: liveness is identity, and compiled code boxes a
        # tuple anew wherever it passes one on.
        e: PickEntry = [c.nbound, c.turn, c]
        c.pick_entry = e
        heap = self.pickable
        heappush(heap, e)
        if len(heap) > 2 * self.nactive + 32:
            self.compact_pickable()

    def compact_pickable(self) -> None:
        """Drop stale entries (amortised: the heap is at least twice the live ones)."""
        heap = [c.pick_entry for c in self.lineup if c.active and c.pick_entry is not None]
        heapify(heap)
        self.pickable = heap

    def pick_for_group(self) -> Consumer | None:
        """G6: fewest bound groups among consumers with credit; ties to the one
        given a group least recently. Looks only: binding commits the choice."""
        heap = self.pickable
        while heap:
            e = heap[0]
            c: Consumer = e[2]
            if e is not c.pick_entry:
                heappop(heap)
            elif not c.ready:
                heappop(heap)
                c.pick_entry = None  # back with its next ready edge (consumer_ready)
            else:
                return c
        return None

    def next_round_robin(self) -> Consumer | None:
        """G10: the next consumer with credit; a cursor of its own."""
        act = self.lineup
        n = len(act)
        i = self.round_robin_at
        for _ in range(n):
            if i >= n:
                i = 0
            c = act[i]
            i += 1
            if c.ready:
                self.round_robin_at = i
                return c
        return None

    def pick_accepting(
        self, headers: dict[str, str], *, grouped: bool
    ) -> Consumer | Literal[False] | None:
        """A consumer with credit whose selector accepts ``headers``. Looks only.

        For a group the one with the fewest groups, ties to the one given a
        group least recently (G6); otherwise the next in round-robin (G10).
        False: some consumer has credit but none of those accepts; None: none has credit.
        """
        act = self.lineup
        n = len(act)
        i = self.round_robin_at
        best: Consumer | None = None
        best_key = (1 << 62, 0)
        some_ready = False
        for _ in range(n):
            if i >= n:
                i = 0
            c = act[i]
            i += 1
            if not c.ready or not c.active:
                continue
            some_ready = True
            if grouped and (c.nbound, c.turn) >= best_key:
                continue
            acc = c.accepts
            if acc is None or acc(headers):
                if not grouped:
                    self.round_robin_at = i
                    return c
                best = c
                best_key = (c.nbound, c.turn)
        if best is not None:
            return best
        return False if some_ready else None

    # -- G8 rebalance ---------------------------------------------------------------

    def rebalance_moves(
        self, n: Consumer, accepts_head: Callable[[Consumer, Group], bool]
    ) -> Iterator[Group]:
        """G8: the groups to move to newcomer ``n``, one at a time, from the most
        loaded consumers until no one holds two groups more than ``n``. The
        caller rebinds each to ``n`` before asking for the next (a generator:
        the counts it reads are the live ones). ``accepts_head(n, g)``: with a
        selector ``n`` never gets a group whose next message it rejects."""
        others = [c for c in self.lineup if c.active and c is not n]
        cands: dict[int, deque[Group]] = {}
        while others:
            donor = others[0]
            for c in others:
                if c.nbound > donor.nbound:
                    donor = c
            if donor.nbound - n.nbound <= 1:
                break
            lst = cands.get(id(donor))
            if lst is None:
                gs = [g for g in groups_of(donor) if not g.flags & (F_RELEASE | F_PARKED)]
                if n.accepts is not None:
                    gs = [g for g in gs if not g.backlog or accepts_head(n, g)]
                # Idle groups first: they move at once, with no ordering risk.
                gs.sort(key=lambda g: g.in_flight > 0)
                lst = cands[id(donor)] = deque(gs)
            if not lst:
                others.remove(donor)
                continue
            g = lst.popleft()
            if g.owner is not donor:
                continue
            yield g
