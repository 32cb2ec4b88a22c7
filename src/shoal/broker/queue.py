"""A queue: messages, consumers, credit, acks, redelivery, dead letters, expiry.

One :class:`Queue` per anycast queue, per topic subscription and per
temporary queue. Message groups live in :mod:`shoal.broker.groups`, the
choice of the next delivery in :mod:`shoal.broker.dispatch`, who may receive
(consumers joining and leaving, G13, G8) in :mod:`shoal.broker.consumers`;
this module holds the message lifecycle around them:

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
from typing import TYPE_CHECKING, Any

from shoal.broker.consumers import ConsumerSetMixin
from shoal.broker.dispatch import PRIO_STEP, DispatchMixin
from shoal.broker.effects import RestoredBody
from shoal.broker.groups import GroupTableMixin
from shoal.broker.hashing import bucket_of
from shoal.broker.model import (
    DONE,
    F_CLOSING,
    F_FIFO,
    F_IN_LRU,
    F_PARKED,
    F_RELEASE,
    F_RESET,
    PENDING,
    POS_NONE,
    Group,
    Message,
)
from shoal.broker.settings import group_id_of
from shoal.records import (
    DeliveryCounted,
    MessageRemoved,
    MessageStored,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from shoal.broker.model import Consumer, PickEntry
    from shoal.broker.queue_context import QueueContext
    from shoal.broker.settings import QueueSettings


class Queue(ConsumerSetMixin, GroupTableMixin, DispatchMixin):
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
        "ungrouped",
        "ungrouped_by_priority",
        "singles",
        "ready",
        "wait_any",
        "wait_sel",
        "selwaiters",
        "selector_consumers",
        "refill",
        "consumers",
        "exclusive_consumers",
        "lineup",
        "nactive",
        "pickable",
        "turns",
        "round_robin_at",
        "dispatch_held",
        "fenced",
        "hold_until",
        "deleted",
        "dirty",
        "lru_head",
        "lru_tail",
        "lru_on",
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
        "buckets",
        "default_group",
        "bindings_max",
        "shared",
        "first_key",
        "rebalance",
        "exclusive",
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

        self.groups: dict[Any, Group] = {}
        self.ungrouped = Group(None)
        self.ungrouped.flags = F_FIFO
        # priority = true: one ungrouped FIFO per priority (4, the default, is ``ungrouped``)
        self.ungrouped_by_priority: list[Group] | None = None
        self.priority_step = 0  # see dispatch.PRIO_STEP
        if settings.priority:
            self.priority_step = PRIO_STEP
            self.ungrouped_by_priority = [
                self.ungrouped if p == 4 else Group(None) for p in range(10)
            ]
            for u in self.ungrouped_by_priority:
                u.flags = F_FIFO
        self.singles: dict[Group, None] = {}  # ungrouped messages set aside by selectors
        self.ready: list[tuple[int, Group]] = []
        self.wait_any: list[tuple[int, Group]] = []
        self.wait_sel: list[Group] = []  # heads no consumer's selector accepts
        self.selwaiters: dict[Consumer, None] = {}  # consumers with a non-empty selwait
        self.selector_consumers = 0  # consumers with a selector
        self.filter: Any = None  # a private topic subscription's selector (routing skips)
        self.refill: list[Consumer] = []
        # consumers in subscription order (a dict: O(1) removal)
        self.consumers: dict[Consumer, None] = {}
        self.exclusive_consumers: dict[
            Consumer, None
        ] = {}  # those that asked to be exclusive (G13)
        self.lineup: list[Consumer] = []  # see dispatch.py: who may receive
        self.nactive = 0
        self.pickable: list[PickEntry] = []
        self.turns = 0
        self.round_robin_at = 0
        self.dispatch_held = False
        # a cluster node cut off from ZooKeeper delivers none of its groups
        # (docs/cluster.md "Partitions and fencing"); ungrouped messages flow
        self.fenced = False
        self.hold_until = 0.0
        self.deleted = False
        self.dirty = False
        self.lru_head: Group | None = None
        self.lru_tail: Group | None = None
        self.lru_on = False  # see GroupTableMixin.lru_start
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

        s = settings
        self.group_header = s.group_header
        self.buckets = s.group_buckets
        self.default_group = s.default_group if s.group_buckets != 0 else None
        self.bindings_max = s.group_bindings_max if s.group_bindings_max > 0 else 1
        self.shared = s.group_mode == "shared"
        self.first_key = s.group_first_key
        self.rebalance = s.group_rebalance
        self.exclusive = s.exclusive
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
        gid = m.group
        if gid is None:
            key = None
        else:
            b = self.buckets
            key = gid if b < 0 else (None if b == 0 else bucket_of(gid, b))
        g: Group | None
        if key is None:
            g = (
                self.ungrouped
                if self.ungrouped_by_priority is None
                else self.ungrouped_by_priority[m.priority]
            )
        else:
            groups = self.groups
            g = groups.get(key)
            if g is None:
                g = Group(key)
                groups[key] = g
                if len(groups) > self.bindings_max:
                    if not self.lru_on:
                        self.lru_start(g)
                    if self.lru_head is not None:
                        self.evict()
            elif g.flags & F_IN_LRU:
                self.lru_unlink(g)
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
        if (
            g.backlog == 1
            and not self.ready
            and self.nactive
            and not self.dispatch_held
            and not self.wait_any
        ):
            # Fast path: nothing else is ready, so hand it over now if we can
            # (same choice the dispatch loop would make, minus the heap). A
            # consumer with groups waiting takes the slow path (G16 check).
            nsel = self.selector_consumers
            if g.key is None:
                rr = self.round_robin_at
                if nsel:
                    c = self.pick_accepting(m.headers, grouped=False) or None
                else:
                    c = self.next_round_robin()
                if c is not None and (c.awaiting_credit or (nsel and c.selwait)):
                    self.round_robin_at = rr
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
                        c = self.pick_accepting(m.headers, grouped=True) or None
                    else:
                        c = self.pick_for_group()
                    if c is not None:
                        if c.awaiting_credit or (nsel and c.selwait):
                            c = None
                        else:
                            self.bind(g, c)
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
                    self.retire(g)
                return
        self.place(g)
        if not self.dirty:
            self.dirty = True
            self.broker.dirty.append(self)

    def ufifo(self, m: Message) -> Group:
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
            self.lru_unlink(g)
        if m.expires:
            self.broker.watch_expiry(m)  # its old timer was dropped while in flight
        if g.head is m and g.pos != POS_NONE:
            self.reposition(g)  # waiting under a later key (G16)

    def hold_dispatch(self, now: float) -> None:
        """DESIGN "Dispatch delay": the clock starts with the first consumer.
        (Here, not in consumers.py: mypyc cannot compile a trait's store to a
        float field.)"""
        self.dispatch_held = True
        self.hold_until = now + (self.delay_ms / 1000.0 if self.delay_ms > 0 else 1.0)
        self.broker.held_queues[self] = None

    def touch(self) -> None:
        if not self.dirty:
            self.dirty = True
            self.broker.dirty.append(self)

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
                if g.backlog or g.flags or self.shared or self.lru_on or g.owner is None:
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
            self.unbind(g)
        if g.backlog:
            if g.pos == POS_NONE:
                self.place(g)
                self.touch()
        elif reset:
            self.keep_idle(g)  # an operator reset stays visible (reassigned)
        else:
            self.retire(g)

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
            self.insert_back(m, g if g is not None else self.ufifo(m))
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
            u = self.ufifo(m)
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
            g = self.ufifo(m)
        g.backlog -= 1
        self.depth -= 1
        self.expire_done(m)
        if not g.backlog:
            g.head = g.tail = None  # only dead nodes were left
            if not g.in_flight:
                self.retire(g)
        elif self.selector_consumers and g.pos == POS_NONE:
            self.place(g)  # a new head, which a selector may accept
            self.touch()

    def withdraw(self, m: Message, *, journal: bool = True) -> None:
        """``m`` (pending) leaves the queue to be routed elsewhere: a cluster
        forward-queue entry whose group moved (docs/cluster.md, C6). Without
        ``journal`` the caller journals the removal later (``removed``)."""
        g = m.grp
        if g is None:
            g = self.ufifo(m)
        g.backlog -= 1
        self.depth -= 1
        m.state = DONE
        self.forget_body(m)
        if journal:
            self.removed(m)
        if not g.backlog:
            g.head = g.tail = None  # only dead nodes were left
            if not g.in_flight:
                self.retire(g)
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
        for s in list(self.singles):
            self.drop_group(s)
            m = s.head
            s.head = s.tail = None
            s.backlog = 0
            s.pos = POS_NONE  # its entries anywhere go stale
            if m is not None and m.state == PENDING:
                m.grp = None
                self.depth -= 1  # insert_back counts it again
                u = self.ufifo(m)
                self.insert_back(m, u)
                if u.pos == POS_NONE:
                    self.place(u)
        self.release_selector_waits()
        self.touch()

    def all_fifos(self) -> list[Group]:
        out = [self.ungrouped]
        if self.ungrouped_by_priority is not None:
            out.extend(u for u in self.ungrouped_by_priority if u is not self.ungrouped)
        out.extend(self.singles)
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
                self.retire(g)
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
