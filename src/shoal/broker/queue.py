"""A queue: messages, consumers, credit, acks, redelivery, dead letters, expiry.

One :class:`Queue` per anycast queue, per topic subscription and per
temporary queue. It holds its group table (``groups``, a
:class:`~shoal.broker.groups.GroupTable`) and its consumers (``consumers``, a
:class:`~shoal.broker.consumers.ConsumerSet`), where each group waits to be
dispatched (``ready``, ``wait_any``, ...: see :mod:`shoal.broker.dispatch`,
whose functions run the dispatch loop over a queue) and the message
lifecycle around them:

    enqueue -> (dispatch) -> deliver -> settle            (ACK, auto-ack)
                                     -> requeue           (NACK, consumer gone, tx abort)
                                          -> dead-letter / park (max-delivery-attempts, G11)
            -> expire (at dispatch and from Broker.tick)  -> dropped or expiry-address

Memory budget (``max-size-bytes`` per queue, ``global-max-size`` for the
broker): ``bytes`` counts the bodies this queue holds in memory. With
``address-full-policy = "page"`` a persistent message that enters a queue at
or past its budget is *paged* if it is still pending when its MessageStored
record is handed to the store (``Broker.take_records``; so the store can
always read it back): its body is dropped (``Message.body = None``) and its
size moves from ``bytes`` to ``paged_bytes``. Nothing else changes: it keeps
its place in its group's FIFO, so order, groups and G5 are unaffected; the
server reads the body back when it writes the MESSAGE frame. Non-persistent
messages are never paged (they block or fail as the policies "block" and
"fail" say), nor are messages of non-durable queues.

A returned message goes back into its group's FIFO (or the ungrouped one)
by id, which is arrival order: ahead of every message not yet delivered,
behind earlier returned ones. Ids are assigned when a message enters the
queue (COMMIT time for transactions), so id order is queue order.
"""

from __future__ import annotations

import heapq
import itertools
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from shoal.broker.consumers import ConsumerSet
from shoal.broker.effects import Deliver, RestoredBody
from shoal.broker.groups import GroupTable
from shoal.broker.model import (
    DONE,
    F_CLOSING,
    F_FIFO,
    F_FIRST,
    F_IN_LRU,
    F_PARKED,
    F_RELEASE,
    F_RESET,
    IN_FLIGHT,
    PENDING,
    POS_ANY,
    POS_HEAP,
    POS_NONE,
    POS_OWNER,
    POS_SEL_NONE,
    POS_SEL_WAIT,
    Group,
    Message,
    QueueRef,
)
from shoal.broker.settings import group_id_of
from shoal.records import (
    DeliveryCounted,
    GroupParked,
    GroupResumed,
    MessageRemoved,
    MessageStored,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from shoal.broker.model import Consumer
    from shoal.broker.queue_context import QueueContext
    from shoal.broker.settings import QueueSettings


# Keys with priority: id - priority * PRIO_STEP (ids stay far below it).
PRIO_STEP = 1 << 60


class Queue(QueueRef):
    kind = "classic"

    __slots__ = (
        # identity
        "name",
        "address",
        "routing",
        "settings",
        "own",
        "durable",
        "temp_owner",
        "subscription",
        "client_id",
        "broker",
        # structure
        "groups",
        "consumers",
        "ungrouped",
        "ungrouped_by_priority",
        "ready",
        "wait_any",
        "wait_sel",
        "selwaiters",
        "refill",
        "dispatch_held",
        "fenced",
        "hold_until",
        "deleted",
        "dirty",
        "blocked",
        # counters
        "depth",
        "in_flight",
        "bytes",
        "enqueued",
        "delivered",
        "acked",
        "redelivered",
        "dead_lettered",
        "expired",
        # settings, flattened for the hot path
        "group_header",
        "default_group",
        "shared",
        "first_key",
        "rebalance",
        "max_attempts",
        "park_poison",
        "dead_letter_address",
        "expiry_address",
        "default_persistent",
        "persist_delivery_count",
        "max_bytes",
        "full_fail",
        "can_page",
        "limited",
        "paged",
        "paged_bytes",
        "consumers_before_dispatch",
        "delay_ms",
        "priority_step",
        "filter",
    )

    def __init__(
        self,
        broker: QueueContext,
        name: str,
        settings: QueueSettings,
        own: dict[str, Any],
        *,
        address: str,
        routing: str = "anycast",
        durable: bool = True,
        temp_owner: int | None = None,
        subscription: str | None = None,
        client_id: str | None = None,
    ) -> None:
        self.name = name
        self.address = address
        self.routing = routing
        self.settings = settings
        self.own = own  # kebab-case overrides this queue was created with
        self.durable = durable
        self.temp_owner = temp_owner
        self.subscription = subscription
        self.client_id = client_id
        self.broker = broker

        s = settings
        self.consumers = ConsumerSet(exclusive=s.exclusive)
        self.groups = GroupTable(
            self.consumers, buckets=s.group_buckets, bindings_max=s.group_bindings_max
        )
        self.ungrouped = Group(None)
        self.ungrouped.flags = F_FIFO
        # priority = true: one ungrouped FIFO per priority (4, the default, is ``ungrouped``)
        self.ungrouped_by_priority: list[Group] | None = None
        self.priority_step = 0  # see PRIO_STEP
        if settings.priority:
            self.priority_step = PRIO_STEP
            self.ungrouped_by_priority = [
                self.ungrouped if p == 4 else Group(None) for p in range(10)
            ]
            for u in self.ungrouped_by_priority:
                u.flags = F_FIFO
        self.ready: list[tuple[int, Group]] = []
        self.wait_any: list[tuple[int, Group]] = []
        self.wait_sel: list[Group] = []  # heads no consumer's selector accepts
        self.selwaiters: dict[Consumer, None] = {}  # consumers with a non-empty selwait
        self.filter: Any = None  # a private topic subscription's selector (routing skips)
        self.refill: list[Consumer] = []  # consumers to give waiting groups again
        self.dispatch_held = False
        # a cluster node cut off from ZooKeeper delivers none of its groups
        # (docs/cluster.md "Partitions and fencing"); ungrouped messages flow
        self.fenced = False
        self.hold_until = 0.0
        self.deleted = False
        self.dirty = False
        self.blocked: dict[int, None] = {}

        self.depth = 0
        self.in_flight = 0
        self.bytes = 0
        self.enqueued = 0
        self.delivered = 0
        self.acked = 0
        self.redelivered = 0
        self.dead_lettered = 0
        self.expired = 0

        self.group_header = s.group_header
        self.default_group = s.default_group if s.group_buckets != 0 else None
        self.shared = s.group_mode == "shared"
        self.first_key = s.group_first_key
        self.rebalance = s.group_rebalance
        self.max_attempts = s.max_delivery_attempts
        self.park_poison = s.poison_policy == "park"
        self.dead_letter_address = s.dead_letter_address
        self.expiry_address = s.expiry_address
        self.default_persistent = s.default_persistent
        self.persist_delivery_count = s.persist_delivery_count_before_delivery
        self.max_bytes = s.max_size_bytes
        self.full_fail = s.address_full_policy == "fail"
        # Paging needs a store that can read bodies back (Broker.paging).
        self.can_page = s.address_full_policy == "page" and broker.paging
        self.limited = s.max_size_bytes >= 0 or broker.global_max >= 0
        self.paged = 0  # pending or in-flight messages whose body is paged out
        self.paged_bytes = 0
        self.consumers_before_dispatch = s.consumers_before_dispatch
        self.delay_ms = s.delay_before_dispatch

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, depth={self.depth}, consumers={len(self.consumers)})"

    # -- messages in ---------------------------------------------------------

    def accept(
        self,
        mid: int,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        now_ms: int,
        producer: int | None = None,
        delivery_count: int = 0,
    ) -> Message:
        """A new message enters the queue (records it if persistent and durable)."""
        gid = group_id_of(headers, self.group_header, self.default_group)
        if persistent is None:
            persistent = self.default_persistent
        persistent = persistent and self.durable
        m = Message(
            mid,
            self.name,
            destination,
            headers,
            body,
            gid,
            seq,
            persistent,
            expires,
            priority,
            now_ms,
            delivery_count,
        )
        if persistent:
            self.broker.records.append(
                MessageStored(
                    self.name,
                    mid,
                    destination,
                    headers,
                    body,
                    gid,
                    seq,
                    expires,
                    priority,
                    now_ms,
                    delivery_count,
                )
            )
        self.enqueue(m)
        if self.limited:
            if persistent and self.can_page:
                if m.state == PENDING and self.over_budget():
                    self.broker.to_page.append((self, m))  # see Broker.take_records
            elif producer is not None and self.max_bytes >= 0 and self.bytes >= self.max_bytes:
                self.block_producer(producer)
        return m

    def restore(self, rec: MessageStored) -> None:
        """A recovered message re-enters the queue (``Broker.restore``).

        Like ``accept`` without its record (the journal has it) and with the
        body dropped at once when the queue is over its memory budget, so a
        backlog larger than memory is never held whole after a restart. A
        record recovered without its body (a lazy journal) has it read back
        only when the queue keeps it in memory.
        """
        gid = rec.group
        if not gid:
            gid = self.default_group
        body = rec.body
        m = Message(
            rec.id,
            self.name,
            rec.destination,
            rec.headers,
            b"" if body is None else body,
            gid,
            rec.group_seq,
            self.durable,
            rec.expires,
            rec.priority,
            rec.timestamp,
            rec.delivery_count,
        )
        if body is None:  # recovered lazily: the body is in the journal only
            m.size = rec.body_size
            m.body = None
        self.enqueue(m)
        if self.limited and self.can_page and m.state == PENDING and self.over_budget():
            self.page_out(m)
        elif m.body is None:
            self.broker.page_ins.append(RestoredBody(m))  # answered by Broker.bodies_read

    def over_budget(self) -> bool:
        if self.max_bytes >= 0 and self.bytes >= self.max_bytes:
            return True
        gmax = self.broker.global_max
        return gmax >= 0 and self.broker.total_bytes >= gmax

    def page_out(self, m: Message) -> None:
        """Drop a pending persistent message's body from memory (the journal has it)."""
        size = m.size
        m.body = None
        self.bytes -= size
        self.broker.total_bytes -= size
        self.paged += 1
        self.paged_bytes += size

    def forget_body(self, m: Message) -> None:
        """``m`` leaves the queue: release its bytes from the right account."""
        if m.body is None:
            self.paged -= 1
            self.paged_bytes -= m.size
        else:
            self.bytes -= m.size
            self.broker.total_bytes -= m.size

    def enqueue(self, m: Message) -> None:
        """Append ``m`` (state PENDING) to its group's FIFO and make the group ready."""
        table = self.groups
        gid = m.group
        key = None if gid is None else table.key_of(gid)
        g: Group
        if key is None:
            g = (
                self.ungrouped
                if self.ungrouped_by_priority is None
                else self.ungrouped_by_priority[m.priority]
            )
        else:
            g = table.group_for_message(key)
            m.grp = g
        tail = g.tail
        if tail is None:
            g.head = m
        else:
            tail.link = m
        g.tail = m
        g.backlog += 1
        self.depth += 1
        self.bytes += m.size
        self.broker.total_bytes += m.size
        self.enqueued += 1
        if m.expires:
            self.broker.watch_expiry(m)
        if g.pos != POS_NONE:
            return  # already waiting somewhere: it goes in its turn
        cs = self.consumers
        if (
            g.backlog == 1
            and not self.ready
            and cs.nactive
            and not self.dispatch_held
            and not self.wait_any
        ):
            # Fast path: nothing else is ready, so hand it over now if we can
            # (same choice the dispatch loop would make, minus the heap). A
            # consumer with groups waiting takes the slow path (G16 check).
            nsel = cs.with_selector
            if g.key is None:
                rr = cs.round_robin_at
                if nsel:
                    c = cs.pick_accepting(m.headers, grouped=False) or None
                else:
                    c = cs.next_round_robin()
                if c is not None and (c.awaiting_credit or (nsel and c.selwait)):
                    cs.round_robin_at = rr
                    c = None
            else:
                c = g.owner
                flags = g.flags
                if (
                    flags & F_PARKED
                    or self.fenced
                    or (g.in_flight and (flags & F_RELEASE or g.holder is not c))
                ):
                    return  # parked or draining: placed when that ends
                if c is None:
                    if nsel:
                        c = cs.pick_accepting(m.headers, grouped=True) or None
                    else:
                        c = cs.pick_for_group()
                    if c is not None:
                        if c.awaiting_credit or (nsel and c.selwait):
                            c = None
                        else:
                            table.bind(g, c)
                elif (
                    not c.ready
                    or c.awaiting_credit
                    or (
                        nsel and (c.selwait or (c.accepts is not None and not c.accepts(m.headers)))
                    )
                ):
                    c = None
            if c is not None:
                if g.head is m and not m.expires:  # the usual case: m alone, live
                    g.head = g.tail = None
                    self.deliver(m, g, c)
                else:
                    head = self.pop_head(g, self.broker.now_ms)
                    if head is not None:
                        self.deliver(head, g, c)
                if g.backlog:
                    self.place(g)
                    self.touch()
                elif not g.in_flight and g is not self.ungrouped:
                    table.retire(g)
                return
        self.place(g)
        if not self.dirty:
            self.dirty = True
            self.broker.dirty.append(self)

    def ungrouped_fifo(self, m: Message) -> Group:
        """The ungrouped FIFO that ``m`` belongs in (one per priority with ``priority``)."""
        return (
            self.ungrouped
            if self.ungrouped_by_priority is None
            else self.ungrouped_by_priority[m.priority]
        )

    def insert_back(self, m: Message, g: Group) -> None:
        """Put a returned message back into ``g``'s FIFO in id (= arrival) order."""
        m.state = PENDING
        mid = m.id
        h = g.head
        if h is None:
            m.link = None
            g.head = g.tail = m
        elif mid < h.id:
            m.link = h
            g.head = m
        else:
            prev = h
            nxt = h.link
            while nxt is not None and nxt.id < mid:
                prev = nxt
                nxt = nxt.link
            m.link = nxt
            prev.link = m
            if nxt is None:
                g.tail = m
        g.backlog += 1
        self.depth += 1
        if g.flags & F_IN_LRU:
            self.groups.lru_unlink(g)
        if m.expires:
            self.broker.watch_expiry(m)  # its old timer was dropped while in flight
        if g.head is m and g.pos != POS_NONE:
            self.reposition(g)  # waiting under a later key (G16)

    def hold_dispatch(self, now: float) -> None:
        """DESIGN "Dispatch delay": the clock starts with the first consumer."""
        self.dispatch_held = True
        self.hold_until = now + (self.delay_ms / 1000.0 if self.delay_ms > 0 else 1.0)
        self.broker.dispatch_delayed[self] = None

    def touch(self) -> None:
        if not self.dirty:
            self.dirty = True
            self.broker.dirty.append(self)

    # -- where a group waits (see dispatch.py) -----------------------------------

    def place(self, g: Group) -> None:
        """Put a group with backlog (``pos == POS_NONE``) where it belongs."""
        flags = g.flags
        if flags & F_PARKED or (self.fenced and g.key is not None):
            return  # ``set_fenced`` places the fenced ones again
        if g.in_flight and (flags & F_RELEASE or g.holder is not g.owner):
            return  # draining: ``drained`` places it when the holder settled
        o = g.owner
        h: Message = g.head  # type: ignore[assignment]  # a group with a backlog has a head
        k = h.id - h.priority * self.priority_step
        if o is not None and not o.ready:
            g.pos = POS_OWNER
            heappush(o.awaiting_credit, (k, g))
            return
        g.pos = POS_HEAP
        heappush(self.ready, (k, g))

    def reposition(self, g: Group) -> None:
        """``g``'s head became earlier (a returned message) while it waits: enter
        it again under the new key; the old entry is skipped or moves it early,
        which the G16 check makes harmless."""
        h: Message = g.head  # type: ignore[assignment]  # a group with a backlog has a head
        e = (h.id - h.priority * self.priority_step, g)
        pos = g.pos
        if pos == POS_HEAP:
            heappush(self.ready, e)
        elif pos == POS_OWNER:
            heappush(g.owner.awaiting_credit, e)  # type: ignore[union-attr]
        elif pos == POS_ANY:
            heappush(self.wait_any, e)
        elif pos in (POS_SEL_WAIT, POS_SEL_NONE):
            g.pos = POS_NONE  # it waits on selectors: examine its new head
            self.place(g)
            self.touch()

    def consumer_ready(self, c: Consumer) -> None:
        """``c`` regained credit: give back at most that many waiting groups, earliest first.

        Each group given back delivers at least one message to ``c`` or goes
        back to waiting because ``c`` filled up, so the work is bounded by the
        credit. If entries are left while ``c`` still has credit after the
        next pass, ``dispatch`` asks again (``refill``).
        """
        k = c.credit
        moved = self.unwait(c.awaiting_credit, k, c)
        left = moved < 0
        if c.active:
            if c.pick_entry is None:
                self.consumers.push_pick(c)
            if self.wait_any:
                left = self.unwait(self.wait_any, k, None) < 0 or left
        if c.selwait:
            left = self.selwait_ready(c, k) or left
        if left:
            self.refill.append(c)

    def unwait(self, heap: list[tuple[int, Group]], k: int, owner: Consumer | None) -> int:
        """Move up to ``k`` valid groups from a waiting heap (``owner``'s, or
        ``wait_any`` for None) to ``ready``: the number moved, -1 if entries are left."""
        pos = POS_ANY if owner is None else POS_OWNER
        moved = 0
        while heap and moved < k:
            g = heappop(heap)[1]
            if g.pos != pos or g.owner is not owner:
                continue  # stale entry
            g.pos = POS_NONE
            if g.backlog:
                self.place(g)
                if g.pos == POS_HEAP:
                    moved += 1
        return -1 if heap else moved

    def selwait_ready(self, c: Consumer, k: int) -> bool:
        """``c`` regained credit: up to ``k`` groups it was waited for go to ``ready``."""
        sw = c.selwait
        moved = 0
        while sw and moved < k:
            g = heappop(sw)[1]
            if g.pos != POS_SEL_WAIT:
                continue  # stale: another acceptor took it, or it waits elsewhere now
            g.pos = POS_NONE
            if g.backlog:
                self.place(g)
                moved += 1
        return bool(sw)

    def release_selector_waits(self, c: Consumer | None = None) -> None:
        """Heads waiting on selectors are examined again.

        With ``c`` (it leaves): the groups that waited for ``c``'s credit.
        Without (a consumer joined, or the last selector left): every one.
        """
        pending: list[Group] = []
        if c is None:
            pending.extend(self.wait_sel)
            self.wait_sel = []
            for w in self.selwaiters:
                if w.selwait:
                    pending.extend(g for _, g in w.selwait)
                    w.selwait = []
            self.selwaiters = {}
        elif c.selwait:
            pending.extend(g for _, g in c.selwait)
            c.selwait = []
            self.selwaiters.pop(c, None)
        for g in pending:
            if g.pos in (POS_SEL_WAIT, POS_SEL_NONE):
                g.pos = POS_NONE
                if g.backlog:
                    self.place(g)
        if pending:
            self.touch()

    # -- taking and handing over messages ---------------------------------------

    def pop_head(self, g: Group, now_ms: int) -> Message | None:
        """Unlink and return ``g``'s first pending, unexpired message."""
        m = g.head
        while m is not None:
            nxt = m.link
            m.link = None
            g.head = nxt
            if nxt is None:
                g.tail = None
            if m.state == PENDING:
                exp = m.expires
                if exp and exp <= now_ms:
                    g.backlog -= 1
                    self.depth -= 1
                    self.expire_done(m)
                else:
                    return m
            m = nxt
        return None

    def peek_head(self, g: Group, now_ms: int) -> Message | None:
        """``g``'s first pending, unexpired message, left in place (dead ones are dropped)."""
        m = self.pop_head(g, now_ms)
        if m is not None:
            m.link = g.head
            g.head = m
            if g.tail is None:
                g.tail = m
        return m

    def deliver(self, m: Message, g: Group, c: Consumer) -> None:
        """Hand ``m`` (already unlinked) to ``c``: one Deliver effect."""
        g.backlog -= 1
        self.depth -= 1
        self.delivered += 1
        c.delivered += 1
        dc = m.delivery_count
        if dc:
            self.redelivered += 1
        first = None
        if g.flags & F_FIRST:
            g.flags &= ~F_FIRST
            first = self.first_key
        b = c.burst - 1
        c.burst = b
        if b <= 0:
            c.ready = False
            self.broker.burst_spent.append(c)
        if c.auto:
            m.state = DONE
            self.acked += 1
            c.acked += 1
            d = Deliver(c.conn_id, c.sub_id, str(m.id), m, dc > 0, first)
            if m.body is None:
                self.paged -= 1
                self.paged_bytes -= m.size
                self.broker.page_ins.append(d)
            else:
                self.bytes -= m.size
                self.broker.total_bytes -= m.size
            if m.persistent:
                self.broker.sent_removals.append(MessageRemoved(self.name, m.id))
            self.broker.effects.append(d)
            if m.grp is not None and g.owner is not None and (m.group_seq < 0 or self.shared):
                self.groups.unbind(g)
            if self.blocked and self.bytes < self.max_bytes:
                self.unblock_producers()
            return
        m.state = IN_FLIGHT
        m.holder = c
        self.in_flight += 1
        if self.persist_delivery_count and m.persistent:
            self.broker.records.append(DeliveryCounted(self.name, m.id, dc + 1))
        gg = m.grp
        if gg is not None:
            gg.in_flight += 1
            gg.holder = c
            if m.group_seq < 0:
                gg.flags |= F_CLOSING
        c.credit -= 1
        c.window -= m.size
        if c.credit <= 0 or c.window <= 0:
            c.ready = False
        c.conn.acks[m.id] = m
        un = c.unsettled
        if un is not None:
            un.append(m)
        d = Deliver(c.conn_id, c.sub_id, str(m.id), m, dc > 0, first)
        if m.body is None:
            self.broker.page_ins.append(d)
        self.broker.effects.append(d)

    # -- consumers: joining, leaving, who may receive (the choices are ConsumerSet's) --

    def add_consumer(self, c: Consumer, now: float) -> None:
        cs = self.consumers
        first = not cs.members
        cs.add(c)
        if first and (self.consumers_before_dispatch > 0 or self.delay_ms > 0):
            self.hold_dispatch(now)
        if (
            self.dispatch_held
            and self.consumers_before_dispatch > 0
            and len(cs.members) >= self.consumers_before_dispatch
        ):
            self.release_hold()
        self.update_active(c)
        if cs.with_selector:
            self.release_selector_waits()  # c may accept what waits
        if c.active and self.rebalance and cs.nactive > 1:
            self.rebalance_to(c)
        self.touch()

    def remove_consumer(self, c: Consumer, returned: list[Message]) -> None:
        """``c`` goes: its groups are freed, ``returned`` go back (G11)."""
        c.closed = True
        c.ready = False
        cs = self.consumers
        cs.remove(c)
        if c.active:
            cs.leave_lineup(c)
        # Free its groups first, so the returns below find them unbound.
        g = c.ghead
        while g is not None:
            nxt = g.cnext
            self.groups.unbind(g)
            self.after_unbind(g)
            g = nxt
        c.awaiting_credit.clear()
        if c.selwait or (
            not cs.with_selector and (self.wait_sel or self.selwaiters or self.groups.singles)
        ):
            self.release_selector_waits(c)
            if not cs.with_selector:
                self.end_selectors()
        for m in returned:
            self.requeue(m)
        if not cs.members and self.dispatch_held:
            self.dispatch_held = False
            self.broker.dispatch_delayed.pop(self, None)
        self.update_active(None)
        self.touch()

    def update_active(self, joined: Consumer | None) -> None:
        """After ``joined`` came (or a consumer left): who may receive now (G13)."""
        cs = self.consumers
        sole = cs.sole_consumer()
        if sole is None:
            if joined is not None:
                self.enter_lineup(joined)
            elif cs.nactive < len(cs.members):
                # the last exclusive consumer left: everyone may receive again
                for c in cs.members:
                    if not c.active:
                        self.enter_lineup(c)
        elif not sole.active:
            # a new exclusive consumer: the others stop receiving, their
            # groups move once drained
            for c in cs.clear_lineup():
                self.release_groups_of(c)
            self.enter_lineup(sole)

    def active_consumers(self) -> list[Consumer]:
        return self.consumers.active_consumers()

    def enter_lineup(self, c: Consumer) -> None:
        self.consumers.enter_lineup(c)
        if c.ready:
            self.consumer_ready(c)
            self.refill.append(c)
        self.touch()

    def release_groups_of(self, c: Consumer) -> None:
        """``c`` stays connected but may no longer receive: its groups move once drained."""
        for g in self.groups.groups_of(c):
            self.reset_group(g)
        c.awaiting_credit.clear()
        if c.selwait:
            self.release_selector_waits(c)

    def after_unbind(self, g: Group) -> None:
        if g.backlog:
            if g.pos == POS_NONE:
                self.place(g)
        elif not g.in_flight:
            self.groups.retire(g)

    def release_hold(self) -> None:
        self.dispatch_held = False
        self.broker.dispatch_delayed.pop(self, None)
        self.touch()

    # -- G8 rebalance, group resets, moves, parking -------------------------------

    def rebalance_to(self, n: Consumer) -> int:
        """Move groups from the most loaded consumers to newcomer ``n``."""
        moved = 0
        for g in self.consumers.rebalance_moves(n, self.accepts_head):
            self.move_group(g, n)
            moved += 1
        return moved

    def accepts_head(self, c: Consumer, g: Group) -> bool:
        m = self.peek_head(g, self.broker.now_ms)
        return m is None or c.accepts is None or c.accepts(m.headers)

    def move_group(self, g: Group, to: Consumer) -> None:
        """Rebind ``g`` to ``to``; if it has messages in flight it drains first (G3)."""
        self.groups.unbind(g)
        self.groups.bind(g, to)
        if g.backlog and g.pos == POS_NONE:
            self.place(g)
        self.touch()

    def reset_group(self, g: Group, *, keep: bool = False) -> bool:
        """Free ``g``: now if nothing is in flight, else once drained (G3).

        ``keep`` (operator resets): an idle group stays in the table, unbound,
        so its ``reassigned`` count survives (see ``GroupTable.keep_idle``).
        """
        if g.owner is None:
            return False
        if g.in_flight:
            g.flags |= F_RESET
            if g.pos == POS_OWNER:
                g.pos = POS_NONE
        else:
            self.groups.unbind(g)
            if keep and not g.backlog:
                self.groups.keep_idle(g)
            else:
                self.after_unbind(g)
            self.touch()
        return True

    def park(self, g: Group, *, record: bool = True) -> None:
        """G11 poison policy "park", or an operator's: ``g`` is delivered no more."""
        if self.groups.park(g) and record:
            self.broker.records.append(GroupParked(self.name, g.name))

    def resume(self, g: Group) -> None:
        if not self.groups.unpark(g):
            return
        self.broker.records.append(GroupResumed(self.name, g.name))
        if g.backlog:
            if g.pos == POS_NONE:
                self.place(g)
                self.touch()
        elif not g.in_flight:
            self.groups.retire(g)

    # -- settle / return -------------------------------------------------------

    def settle(self, m: Message, settled_on_send: bool = False) -> None:
        """``m`` (in flight) was acknowledged: it leaves the queue. Settled by
        its sending, its removal waits for the write (``take_sent_removals``)."""
        m.state = DONE
        m.holder = None
        self.in_flight -= 1
        self.acked += 1
        if m.body is None:
            self.paged -= 1
            self.paged_bytes -= m.size
        else:
            self.bytes -= m.size
            self.broker.total_bytes -= m.size
        if m.persistent:
            if settled_on_send:
                self.broker.sent_removals.append(MessageRemoved(self.name, m.id))
            else:
                self.broker.records.append(MessageRemoved(self.name, m.id))
        g = m.grp
        if g is not None:
            n = g.in_flight - 1
            g.in_flight = n
            if not n:
                if g.backlog or g.flags or self.shared or self.groups.lru_on or g.owner is None:
                    self.drained(g)
                else:  # drained() for a plain sticky group going idle, bound
                    g.holder = None
        if self.blocked and self.bytes < self.max_bytes:
            self.unblock_producers()

    def drained(self, g: Group) -> None:
        """The holder settled the group's last in-flight message (G3, G4)."""
        g.holder = None
        reset = g.flags & F_RESET
        if g.owner is not None and (g.flags & F_RELEASE or self.shared):
            self.groups.unbind(g)
        if g.backlog:
            if g.pos == POS_NONE:
                self.place(g)
                self.touch()
        elif reset:
            self.groups.keep_idle(g)  # an operator reset stays visible (reassigned)
        else:
            self.groups.retire(g)

    def requeue(self, m: Message, counted: bool = True) -> None:
        """``m`` (in flight) came back: NACK, consumer gone, tx abort (G11).

        ``counted=False`` (an AMQP ``released`` outcome): back to its place,
        the delivery not counted toward max-delivery-attempts."""
        m.holder = None
        self.in_flight -= 1
        dc = m.delivery_count + counted
        m.delivery_count = dc
        g = m.grp
        if g is not None and m.group_seq < 0:
            g.flags &= ~F_CLOSING  # the close did not happen after all
        if dc >= self.max_attempts and self.dead_letter_address != self.name:
            if self.park_poison and g is not None:
                self.insert_back(m, g)
                if m.persistent:
                    self.broker.records.append(DeliveryCounted(self.name, m.id, dc))
                self.park(g)
            else:
                self.dead_letter(m)
        else:
            self.insert_back(m, g if g is not None else self.ungrouped_fifo(m))
            if m.persistent and not self.persist_delivery_count:  # else recorded at delivery
                self.broker.records.append(DeliveryCounted(self.name, m.id, dc))
        if g is not None:
            n = g.in_flight - 1
            g.in_flight = n
            if not n:
                self.drained(g)
            elif g.backlog and g.pos == POS_NONE:
                self.place(g)
                self.touch()
        else:
            u = self.ungrouped_fifo(m)
            if u.backlog and u.pos == POS_NONE:
                self.place(u)
                self.touch()

    def dead_letter(self, m: Message) -> None:
        m.state = DONE
        self.dead_lettered += 1
        self.forget_body(m)
        if m.persistent:
            self.broker.records.append(MessageRemoved(self.name, m.id))
        self.broker.move_copy(m, self.dead_letter_address, self, expiry=False)
        if self.blocked and self.bytes < self.max_bytes:
            self.unblock_producers()

    # -- expiry ------------------------------------------------------------------

    def expire_done(self, m: Message) -> None:
        """``m`` was pending and has expired (already out of the backlog count)."""
        m.state = DONE
        self.expired += 1
        self.forget_body(m)
        if m.persistent:
            self.broker.records.append(MessageRemoved(self.name, m.id))
        target = self.expiry_address
        if target and target != self.name:
            self.broker.move_copy(m, target, self, expiry=True)
        if self.blocked and self.bytes < self.max_bytes:
            self.unblock_producers()

    def expire_pending(self, m: Message) -> None:
        """From Broker.tick: ``m`` is pending somewhere in a FIFO; drop it lazily."""
        g = m.grp
        if g is None:
            g = self.ungrouped_fifo(m)
        g.backlog -= 1
        self.depth -= 1
        self.expire_done(m)
        if not g.backlog:
            g.head = g.tail = None  # only dead nodes were left
            if not g.in_flight:
                self.groups.retire(g)
        elif self.consumers.with_selector and g.pos == POS_NONE:
            self.place(g)  # a new head, which a selector may accept
            self.touch()

    def withdraw(self, m: Message, *, journal: bool = True) -> None:
        """``m`` (pending) leaves the queue to be routed elsewhere: a cluster
        forward-queue entry whose group moved (docs/cluster.md, C6). Without
        ``journal`` the caller journals the removal later (``removed``)."""
        g = m.grp
        if g is None:
            g = self.ungrouped_fifo(m)
        g.backlog -= 1
        self.depth -= 1
        m.state = DONE
        self.forget_body(m)
        if journal:
            self.removed(m)
        if not g.backlog:
            g.head = g.tail = None  # only dead nodes were left
            if not g.in_flight:
                self.groups.retire(g)
        if self.blocked and self.bytes < self.max_bytes:
            self.unblock_producers()

    def removed(self, m: Message) -> None:
        """Journal that withdrawn ``m`` left the queue."""
        if m.persistent:
            self.broker.records.append(MessageRemoved(self.name, m.id))

    # -- producers (max-size-bytes, address-full-policy "block") -----------------

    def block_producer(self, conn_id: int) -> None:
        if conn_id not in self.blocked:
            self.blocked[conn_id] = None
            self.broker.producer_blocked(conn_id, self)

    def unblock_producers(self) -> None:
        blocked = list(self.blocked)
        self.blocked.clear()
        for conn_id in blocked:
            self.broker.producer_unblocked(conn_id, self)

    def set_fenced(self, fenced: bool) -> None:
        """Stop or restart delivering this queue's groups (a cluster fence).
        Groups skipped while fenced were left unplaced: place them again."""
        if fenced == self.fenced:
            return
        self.fenced = fenced
        if fenced:
            return
        for g in self.groups.values():
            if g.backlog and g.pos == POS_NONE:
                self.place(g)
        self.touch()

    # -- management --------------------------------------------------------------

    def end_selectors(self) -> None:
        """The last selector left: what waited on selectors goes back to the plain path."""
        for s in list(self.groups.singles):
            self.groups.drop_group(s)
            m = s.head
            s.head = s.tail = None
            s.backlog = 0
            s.pos = POS_NONE  # its entries anywhere go stale
            if m is not None and m.state == PENDING:
                m.grp = None
                self.depth -= 1  # insert_back counts it again
                u = self.ungrouped_fifo(m)
                self.insert_back(m, u)
                if u.pos == POS_NONE:
                    self.place(u)
        self.release_selector_waits()
        self.touch()

    def all_fifos(self) -> list[Group]:
        out = [self.ungrouped]
        if self.ungrouped_by_priority is not None:
            out.extend(u for u in self.ungrouped_by_priority if u is not self.ungrouped)
        out.extend(self.groups.singles)
        out.extend(self.groups.values())
        return out

    @staticmethod
    def _fifo(g: Group) -> Iterator[Message]:
        m = g.head
        while m is not None:
            if m.state == PENDING:
                yield m
            m = m.link

    def pending_messages(self, limit: int | None = None) -> list[Message]:
        """Pending messages in queue (id) order: a k-way merge of the FIFOs."""
        fifos = [self._fifo(g) for g in self.all_fifos() if g.backlog]
        merged = heapq.merge(*fifos, key=lambda m: m.id)
        return list(merged if limit is None else itertools.islice(merged, max(0, limit)))

    def purge(self) -> int:
        """Drop every pending message (in-flight ones stay with their consumers)."""
        n = 0
        records = self.broker.records
        for g in self.all_fifos():
            m = g.head
            while m is not None:
                nxt = m.link
                m.link = None
                if m.state == PENDING:
                    m.state = DONE
                    n += 1
                    self.forget_body(m)
                    if m.persistent:
                        records.append(MessageRemoved(self.name, m.id))
                m = nxt
            g.head = g.tail = None
            g.backlog = 0
            if g is not self.ungrouped and not g.in_flight:
                self.groups.retire(g)
        self.depth = 0
        if self.blocked and self.bytes < self.max_bytes:
            self.unblock_producers()
        return n

    def in_flight_messages(self) -> list[Message]:
        """Every message held unsettled by a consumer of this queue (management)."""
        out: list[Message] = []
        seen: set[int] = set()
        for conn in self.broker.connections_of(self):
            for m in conn.acks.values():
                if m.holder is not None and m.holder.queue is self:
                    out.append(m)
                    seen.add(m.id)
            for tx in conn.txs.values():
                for m in tx.acks + tx.nacks:
                    if m.holder is not None and m.holder.queue is self and m.id not in seen:
                        out.append(m)
                        seen.add(m.id)
        return out
