"""Consumers of a classic queue: who joins and leaves, who may receive (G13's
exclusive choice, the round-robin lineup), the G8 rebalance onto a newcomer,
and group resets and moves (G3: a group with messages in flight drains
first). Mixed into ``Queue`` (queue.py) beside the dispatch and group-table
mixins; the class extends ``QueueCore`` (queue_context.py).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from mypy_extensions import trait

from shoal.broker.model import F_PARKED, F_RELEASE, F_RESET, POS_NONE, POS_OWNER, Group
from shoal.broker.queue_context import QueueCore
from shoal.records import GroupResumed

if TYPE_CHECKING:
    from shoal.broker.model import Consumer, Message


@trait
class ConsumerSetMixin(QueueCore):
    """Consumer methods of Queue (QueueCore declares what they use of it)."""

    # -- consumers -----------------------------------------------------------------

    def add_consumer(self, c: Consumer, now: float) -> None:
        first = not self.consumers
        self.consumers[c] = None
        if c.exclusive:
            self.exclusive_consumers[c] = None
        if c.accepts is not None:
            self.selector_consumers += 1
        if first and (self.consumers_before_dispatch > 0 or self.delay_ms > 0):
            self.hold_dispatch(now)
        if (
            self.dispatch_held
            and self.consumers_before_dispatch > 0
            and len(self.consumers) >= self.consumers_before_dispatch
        ):
            self.release_hold()
        self.update_active(c)
        if self.selector_consumers:
            self.release_selector_waits()  # c may accept what waits
        if c.active and self.rebalance and self.nactive > 1:
            self.rebalance_to(c)
        self.touch()

    def remove_consumer(self, c: Consumer, returned: list[Message]) -> None:
        """``c`` goes: its groups are freed, ``returned`` go back (G11)."""
        c.closed = True
        c.ready = False
        if c in self.consumers:
            del self.consumers[c]
            if c.accepts is not None:
                self.selector_consumers -= 1
        self.exclusive_consumers.pop(c, None)
        if c.active:
            self.leave_lineup(c)
        # Free its groups first, so the returns below find them unbound.
        g = c.ghead
        while g is not None:
            nxt = g.cnext
            self.unbind(g)
            self.after_unbind(g)
            g = nxt
        c.awaiting_credit.clear()
        if c.selwait or (
            not self.selector_consumers and (self.wait_sel or self.selwaiters or self.singles)
        ):
            self.release_selector_waits(c)
            if not self.selector_consumers:
                self.end_selectors()
        for m in returned:
            self.requeue(m)
        if not self.consumers and self.dispatch_held:
            self.dispatch_held = False
            self.broker.held_queues.pop(self, None)
        self.update_active(None)
        self.touch()

    # -- who may receive (G13), in O(1) unless the exclusive choice changes -------

    def sole_consumer(self) -> Consumer | None:
        """G13: the one consumer that may receive, or None when all may."""
        if self.exclusive_consumers:
            return next(iter(self.exclusive_consumers))
        if self.exclusive and self.consumers:
            return next(iter(self.consumers))
        return None

    def update_active(self, joined: Consumer | None) -> None:
        """After ``joined`` came (or a consumer left): who may receive now."""
        sole = self.sole_consumer()
        if sole is None:
            if joined is not None:
                self.enter_lineup(joined)
            elif self.nactive < len(self.consumers):
                # the last exclusive consumer left: everyone may receive again
                for c in self.consumers:
                    if not c.active:
                        self.enter_lineup(c)
        elif not sole.active:
            # a new exclusive consumer: the others stop receiving, their
            # groups move once drained
            for c in self.lineup:
                if c.active:
                    c.active = False
                    c.pick_entry = None
                    self.release_groups_of(c)
            self.lineup = []
            self.nactive = 0
            self.round_robin_at = 0
            self.enter_lineup(sole)

    def active_consumers(self) -> list[Consumer]:
        return [c for c in self.lineup if c.active]

    def enter_lineup(self, c: Consumer) -> None:
        c.active = True
        self.nactive += 1
        self.lineup.append(c)
        self.turns += 1
        c.turn = self.turns
        if c.ready:
            self.consumer_ready(c)
            self.refill.append(c)
        self.touch()

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

    def release_groups_of(self, c: Consumer) -> None:
        """``c`` stays connected but may no longer receive: its groups move once drained."""
        for g in self.groups_of(c):
            self.reset_group(g)
        c.awaiting_credit.clear()
        if c.selwait:
            self.release_selector_waits(c)

    def after_unbind(self, g: Group) -> None:
        if g.backlog:
            if g.pos == POS_NONE:
                self.place(g)
        elif not g.in_flight:
            self.retire(g)

    def release_hold(self) -> None:
        self.dispatch_held = False
        self.broker.held_queues.pop(self, None)
        self.touch()

    # -- G8 rebalance, resets ----------------------------------------------------

    def rebalance_to(self, n: Consumer) -> int:
        """Move groups from the most loaded consumers to newcomer ``n``."""
        others = [c for c in self.lineup if c.active and c is not n]
        cands: dict[int, deque[Group]] = {}
        moved = 0
        while others:
            donor = others[0]
            for c in others:
                if c.nbound > donor.nbound:
                    donor = c
            if donor.nbound - n.nbound <= 1:
                break
            lst = cands.get(id(donor))
            if lst is None:
                gs = [g for g in self.groups_of(donor) if not g.flags & (F_RELEASE | F_PARKED)]
                if n.accepts is not None:  # never hand n a group whose next message it rejects
                    gs = [g for g in gs if not g.backlog or self.accepts_head(n, g)]
                # Idle groups first: they move at once, with no ordering risk.
                gs.sort(key=lambda g: g.in_flight > 0)
                lst = cands[id(donor)] = deque(gs)
            if not lst:
                others.remove(donor)
                continue
            g = lst.popleft()
            if g.owner is not donor:
                continue
            self.move_group(g, n)
            moved += 1
        return moved

    def accepts_head(self, c: Consumer, g: Group) -> bool:
        m = self.peek_head(g, self.broker.now_ms)
        return m is None or c.accepts is None or c.accepts(m.headers)

    def move_group(self, g: Group, to: Consumer) -> None:
        """Rebind ``g`` to ``to``; if it has messages in flight it drains first (G3)."""
        self.unbind(g)
        self.bind(g, to)
        if g.backlog and g.pos == POS_NONE:
            self.place(g)
        self.touch()

    def reset_group(self, g: Group, *, keep: bool = False) -> bool:
        """Free ``g``: now if nothing is in flight, else once drained (G3).

        ``keep`` (operator resets): an idle group stays in the table, unbound,
        so its ``reassigned`` count survives (see ``keep_idle``).
        """
        if g.owner is None:
            return False
        if g.in_flight:
            g.flags |= F_RESET
            if g.pos == POS_OWNER:
                g.pos = POS_NONE
        else:
            self.unbind(g)
            if keep and not g.backlog:
                self.keep_idle(g)
            else:
                self.after_unbind(g)
            self.touch()
        return True

    def resume(self, g: Group) -> None:
        if not g.flags & F_PARKED:
            return
        g.flags &= ~F_PARKED
        self.broker.records.append(GroupResumed(self.name, g.name))
        if g.backlog:
            if g.pos == POS_NONE:
                self.place(g)
                self.touch()
        elif not g.in_flight:
            self.retire(g)
