"""Random walks through the core, checking the message-group promises after every step.

The machine sends grouped / ungrouped / closing messages, subscribes and
unsubscribes consumers (three ack modes, small prefetch), acks, nacks,
acks inside transactions and commits or aborts them, disconnects, toggles
writability, resets groups, resumes parked ones, lets time pass and restarts
the broker from the records it emitted (folded by MemoryStore). It keeps a
model of what each consumer holds and checks:

* G2: at most one consumer holds unsettled messages of a group, and a
  message never goes to a consumer while another holds its group;
* per group (and for the ungrouped stream), first deliveries in arrival order;
* nothing lost or resurrected: every accepted message that was not settled
  is pending, in flight or dead-lettered, exactly once (only persistent
  ones survive a restart);
* no duplicate delivery without ``redelivered`` (a message in flight at a
  restart may come back unflagged unless
  persist-delivery-count-before-delivery is on);
* G5: a deliverable group, or ungrouped backlog, is never left waiting while
  a consumer that may take it has credit;
* G16: while one consumer may receive (a single or an exclusive consumer),
  every message it is given is the earliest one it may take, across groups
  and ungrouped messages, NACKs and redeliveries included: what one step
  delivers to it is in queue order, and nothing it may still take is
  earlier (a message it may take is one pending, not expired, of no group or
  of a group that is neither parked, nor draining, nor bound to another
  consumer).

With a small ``max-size-bytes`` (policy "page", the default) persistent
bodies are paged out; the machine reads them back as the server does, so
every check above also holds with a paged backlog.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from shoal.broker.core import Broker
from shoal.broker.effects import Deliver
from shoal.broker.hashing import bucket_of
from shoal.broker.model import F_PARKED, F_RELEASE
from shoal.broker.settings import AddressSettings
from shoal.errors import InvalidHeader
from shoal.records import MessageStored
from shoal.store.memory import MemoryStore

PRODUCER = 1
SLOTS = 4
GROUPS = ["a", "b", "c", "d", "e"]
BIG = 10**9


def bid(d: Deliver) -> bytes:
    """A delivery's body (its identity here): read back by the server when paged."""
    body = d.message.body
    return body if body is not None else d.body  # type: ignore[return-value]


def conn_of(slot: int) -> int:
    return 10 + min(slot, 2)  # slots 2 and 3 share one connection


@dataclass
class MConsumer:
    serial: int
    slot: int
    conn: int
    sub: str
    ack: str
    prefetch: int
    window: int
    unsettled: list[Deliver] = field(default_factory=list)


@dataclass
class Info:
    n: int  # accept order (ids of lost non-persistent messages may be reused after a restart)
    key: Any
    persistent: bool
    expires: int = 0  # epoch ms


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000.0
        self.serial = 0
        self.body_n = 0
        self.consumers: dict[int, MConsumer] = {}  # slot -> consumer
        self.connected: set[int] = set()
        self.writable: dict[int, bool] = {}
        self.txs: dict[int, list[tuple[int, Deliver]]] = {}  # conn -> [(serial, delivery)]
        self.live: dict[bytes, Info] = {}
        self.delivered_ever: set[bytes] = set()
        self.excused: set[bytes] = set()
        self.last_first: dict[Any, int] = {}
        self.store = MemoryStore()
        self.store.open()
        self.disk: dict[tuple[str, int], bytes] = {}  # what the journal could read back

    # -- setup -------------------------------------------------------------

    @initialize(
        mode=st.sampled_from(["sticky", "shared"]),
        buckets=st.sampled_from([-1, -1, 0, 2]),
        rebalance=st.booleans(),
        attempts=st.integers(2, 4),
        poison=st.sampled_from(["dead-letter", "park"]),
        bindings_max=st.sampled_from([2, 1000]),
        exclusive=st.sampled_from([False, False, False, True]),
        cbd=st.sampled_from([0, 0, 2]),
        persist_dc=st.booleans(),
        max_size=st.sampled_from([-1, -1, 0, 6]),
        slots=st.sampled_from([1, SLOTS, SLOTS]),
    )
    def init(
        self,
        mode,
        buckets,
        rebalance,
        attempts,
        poison,
        bindings_max,
        exclusive,
        cbd,
        persist_dc,
        max_size,
        slots,
    ):
        self.slots = slots  # 1: a single consumer at most, where G16 is strictest
        self.buckets = buckets
        self.persist_delivery_count = persist_dc
        self.qsettings = {
            "group-mode": mode,
            "group-buckets": buckets,
            "group-rebalance": rebalance,
            "max-delivery-attempts": attempts,
            "poison-policy": poison,
            "group-bindings-max": bindings_max,
            "exclusive": exclusive,
            "consumers-before-dispatch": cbd,
            "persist-delivery-count-before-delivery": persist_dc,
            "max-size-bytes": max_size,
        }
        self.queues_config = {"q": dict(self.qsettings)}
        self.b = self.new_broker()
        self.b.connect(PRODUCER, self.now)

    # -- plumbing ------------------------------------------------------------

    def new_broker(self) -> Broker:
        return Broker(AddressSettings(), self.now, queues_config=self.queues_config, paging=True)

    def load(self, m: Any) -> bytes:
        return self.disk[(m.queue, m.id)]

    def body(self, m: Any) -> bytes:
        return m.body if m.body is not None else self.load(m)

    def key(self, group: str | None) -> Any:
        if group is None or self.buckets == 0:
            return None
        if self.buckets > 0:
            return bucket_of(group, self.buckets)
        return group

    def by_sub(self, conn: int, sub: str) -> MConsumer:
        for c in self.consumers.values():
            if c.conn == conn and c.sub == sub:
                return c
        raise AssertionError(f"delivery to unknown consumer {conn}/{sub}")

    def holders(self) -> dict[Any, set[int]]:
        out: dict[Any, set[int]] = {}
        for c in self.consumers.values():
            for d in c.unsettled:
                k = self.key(d.message.group)
                if k is not None:
                    out.setdefault(k, set()).add(c.serial)
        for held in self.txs.values():
            for serial, d in held:
                k = self.key(d.message.group)
                if k is not None:
                    out.setdefault(k, set()).add(serial)
        return out

    def pump(self) -> None:
        reads = self.b.take_page_ins()  # as the server: read back before persisting
        for r in reads:
            r.body = self.load(r.message)
        if reads:
            self.b.bodies_read(reads)
        batch: list[tuple[Deliver, int]] = []
        for e in self.b.take_effects():
            if not isinstance(e, Deliver):
                continue
            c = self.by_sub(e.conn_id, e.sub_id)
            body = bid(e)
            assert body in self.live, f"settled message {body!r} delivered again"
            batch.append((e, self.live[body].n))
            assert e.message.queue == "q"
            k = self.key(e.message.group)
            if k is not None:
                # G2: nobody else holds this group
                others = self.holders().get(k, set()) - {c.serial}
                assert not others, f"group {k!r} delivered to {c.serial} while held by {others}"
            first = body not in self.delivered_ever
            exp = self.live[body].expires
            assert not exp or exp > int(self.now * 1000), f"expired {body!r} delivered"
            if not e.redelivered:
                if not first:
                    assert body in self.excused, f"{body!r} delivered twice without redelivered"
                    self.excused.discard(body)
            if first:
                n = self.live[body].n
                last = self.last_first.get(k, -1)
                assert n > last, f"group {k!r}: first deliveries out of order"
                self.last_first[k] = n
                self.delivered_ever.add(body)
            if c.ack == "auto":
                del self.live[body]
            else:
                c.unsettled.append(e)
        records = self.b.take_records() + self.b.take_sent_removals()
        for r in records:
            if type(r) is MessageStored:
                self.disk[(r.queue, r.id)] = r.body
        self.store.append(records)
        self.store.sync()
        self.check_queue_order(batch)

    def check_queue_order(self, batch: list[tuple[Deliver, int]]) -> None:
        """G16 for a sole receiving consumer, checked after each broker command.

        Within one command what a consumer may take only shrinks once
        dispatch starts (deliveries, closing messages, expiry), so a message
        it may still take at the end could have been taken before each
        delivery. Across commands it can grow (a resume, an ack that frees a
        group), so a rule that issues several commands pumps after each.
        """
        q = self.b.queues.get("q")
        if q is None:
            return
        active = q.active_consumers()
        if len(active) != 1:
            return
        c = active[0]
        got = [n for e, n in batch if (e.conn_id, e.sub_id) == (c.conn_id, c.sub_id)]
        if not got:
            return
        assert got == sorted(got), f"one step delivered out of queue order: {got}"
        now_ms = int(self.now * 1000)
        for m in q.pending_messages():
            if m.expires and m.expires <= now_ms:
                continue
            g = m.grp
            if g is not None:
                if g.flags & F_PARKED:
                    continue
                if g.in_flight and (g.flags & F_RELEASE or g.holder is not g.owner):
                    continue  # draining
                if g.owner is not None and g.owner is not c:
                    continue
            n = self.live[self.body(m)].n
            assert n > got[-1], f"#{got[-1]} delivered while #{n}, which it may take, waits"

    # -- producers ---------------------------------------------------------------

    @rule(
        group=st.sampled_from([None, *GROUPS]),
        closing=st.integers(0, 5),
        persistent=st.booleans(),
    )
    def send(self, group, closing, persistent):
        self.body_n += 1
        body = f"m{self.body_n}".encode()
        headers = {"persistent": "true" if persistent else "false"}
        if group is not None:
            headers["JMSXGroupID"] = group
            if closing == 0:
                headers["JMSXGroupSeq"] = "-1"
            elif closing == 1:
                headers["JMSXGroupSeq"] = "1"
        expires = 0
        if closing == 7:
            expires = int(self.now * 1000) + 1000
            headers["expires"] = str(expires)
        self.b.send(PRODUCER, "/queue/q", headers, body, self.now)
        self.live[body] = Info(self.body_n, self.key(group), persistent, expires)
        self.pump()

    @rule(
        batch=st.lists(
            st.tuples(st.sampled_from([None, *GROUPS]), st.integers(0, 8), st.booleans()),
            min_size=2,
            max_size=8,
        )
    )
    def send_burst(self, batch):
        for group, closing, persistent in batch:
            self.send(group, closing, persistent)

    @rule(
        groups=st.lists(st.sampled_from([None, *GROUPS]), min_size=2, max_size=3, unique=True),
        rounds=st.integers(2, 4),
    )
    def send_interleaved(self, groups, rounds):
        """Several groups' backlogs interleaved (where G16 matters most)."""
        for _ in range(rounds):
            for group in groups:
                self.send(group, 5, False)

    @rule(group=st.sampled_from(GROUPS))
    def send_bad_seq(self, group):
        try:
            self.b.send(
                PRODUCER, "/queue/q", {"JMSXGroupID": group, "JMSXGroupSeq": "x"}, b"bad", self.now
            )
        except InvalidHeader as exc:
            assert exc.header == "JMSXGroupSeq"
        else:
            raise AssertionError("non-integer JMSXGroupSeq accepted")
        self.pump()

    # -- consumers -------------------------------------------------------------------

    @rule(
        slot=st.integers(0, SLOTS - 1),
        ack=st.sampled_from(["client-individual", "client-individual", "client", "auto"]),
        prefetch=st.integers(1, 3),
        window=st.sampled_from([-1, -1, -1, 5]),
        exclusive=st.sampled_from([False] * 6 + [True]),
    )
    def subscribe(self, slot, ack, prefetch, window, exclusive):
        slot %= self.slots
        if slot in self.consumers:
            return
        conn = conn_of(slot)
        if conn not in self.connected:
            self.b.connect(conn, self.now)
            self.connected.add(conn)
            self.writable[conn] = True
        self.serial += 1
        sub = f"s{slot}"
        self.consumers[slot] = MConsumer(self.serial, slot, conn, sub, ack, prefetch, window)
        headers = {"prefetch-count": str(prefetch), "consumer-window-size": str(window)}
        if exclusive:
            headers["activemq.exclusive"] = "true"
        self.b.subscribe(conn, sub, "/queue/q", ack, headers, self.now)
        self.pump()

    @rule(slot=st.integers(0, SLOTS - 1))
    def unsubscribe(self, slot):
        slot %= self.slots
        c = self.consumers.pop(slot, None)
        if c is None:
            return
        c.unsettled.clear()  # returned; tx-held ones stay with the transaction
        self.b.unsubscribe(c.conn, c.sub, self.now)
        self.pump()

    @rule(slot=st.integers(0, SLOTS - 1))
    def disconnect(self, slot):
        slot %= self.slots
        conn = conn_of(slot)
        if conn not in self.connected:
            return
        for s, c in list(self.consumers.items()):
            if c.conn == conn:
                del self.consumers[s]
        self.txs.pop(conn, None)
        self.connected.discard(conn)
        self.b.disconnect(conn, self.now)
        self.pump()

    @rule(slot=st.integers(0, SLOTS - 1))
    def toggle_writable(self, slot):
        slot %= self.slots
        conn = conn_of(slot)
        if conn not in self.connected:
            return
        self.writable[conn] = not self.writable[conn]
        self.b.set_writable(conn, self.writable[conn], self.now)
        self.pump()

    def _pick(self, slot: int, idx: int) -> tuple[MConsumer, list[Deliver]] | None:
        c = self.consumers.get(slot)
        if c is None or not c.unsettled:
            return None
        i = idx % len(c.unsettled)
        d = c.unsettled[i]
        if c.ack == "client":
            taken = c.unsettled[: i + 1]
            del c.unsettled[: i + 1]
        else:
            taken = [d]
            del c.unsettled[i]
        return c, taken

    @rule(slot=st.integers(0, SLOTS - 1), idx=st.integers(0, 10))
    def ack(self, slot, idx):
        slot %= self.slots
        picked = self._pick(slot, idx)
        if picked is None:
            return
        c, taken = picked
        self.b.ack(c.conn, taken[-1].ack_id, self.now)
        for d in taken:
            del self.live[bid(d)]
        self.pump()

    @rule(slot=st.integers(0, SLOTS - 1), idx=st.integers(0, 10))
    def nack(self, slot, idx):
        slot %= self.slots
        picked = self._pick(slot, idx)
        if picked is None:
            return
        c, taken = picked
        self.b.nack(c.conn, taken[-1].ack_id, self.now)
        self.pump()

    # -- transactions ------------------------------------------------------------------

    @rule(slot=st.integers(0, SLOTS - 1))
    def begin(self, slot):
        slot %= self.slots
        conn = conn_of(slot)
        if conn not in self.connected or conn in self.txs:
            return
        self.b.begin(conn, "t", self.now)
        self.txs[conn] = []

    @rule(slot=st.integers(0, SLOTS - 1), idx=st.integers(0, 10))
    def tx_ack(self, slot, idx):
        slot %= self.slots
        c = self.consumers.get(slot)
        if c is None or c.conn not in self.txs:
            return
        picked = self._pick(slot, idx)
        if picked is None:
            return
        _, taken = picked
        self.b.ack(c.conn, taken[-1].ack_id, self.now, transaction="t")
        self.txs[c.conn].extend((c.serial, d) for d in taken)
        self.pump()

    @rule(slot=st.integers(0, SLOTS - 1), commit=st.booleans())
    def end_tx(self, slot, commit):
        slot %= self.slots
        conn = conn_of(slot)
        held = self.txs.pop(conn, None)
        if held is None:
            return
        if commit:
            self.b.commit(conn, "t", self.now)
            for _, d in held:
                del self.live[bid(d)]
        else:
            self.b.abort(conn, "t", self.now)
        self.pump()

    # -- operators and time -----------------------------------------------------------

    @rule(group=st.sampled_from([None, *GROUPS]))
    def reset(self, group):
        q = self.b.queue("q")
        if group is None:
            self.b.reset_groups("q", None, self.now)
        elif q.groups.buckets != 0 and q.groups.key_for_name(group) in q.groups:
            self.b.reset_groups("q", group, self.now)
        self.pump()

    @rule()
    def resume_parked(self):
        """Resume every parked group, one operator command each: each resume
        dispatches at once, so each is its own step for the checks."""
        q = self.b.queue("q")
        for g in list(q.groups.values()):
            if g.flags & F_PARKED:
                self.b.resume_group("q", g.name, self.now)
                self.pump()

    @rule(dt=st.sampled_from([0.1, 0.5, 1.5]))
    def tick(self, dt):
        self.now += dt
        self.b.tick(self.now)
        self.pump()

    @rule()
    def restart(self):
        self.store.close()
        if not self.persist_delivery_count:
            for c in self.consumers.values():
                self.excused.update(bid(d) for d in c.unsettled)
            for held in self.txs.values():
                self.excused.update(bid(d) for _, d in held)
        self.consumers.clear()
        self.txs.clear()
        self.connected.clear()
        self.live = {b: i for b, i in self.live.items() if i.persistent}
        self.excused &= set(self.live)
        self.b = self.new_broker()
        self.b.restore(self.store.open(), self.now)
        self.b.connect(PRODUCER, self.now)
        self.pump()

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def one_holder_per_group(self):
        if not hasattr(self, "b"):
            return
        for k, serials in self.holders().items():
            assert len(serials) <= 1, f"group {k!r} held by {serials}"

    @invariant()
    def nothing_lost_or_duplicated(self):
        if not hasattr(self, "b"):
            return
        found: list[bytes] = [self.body(m) for m in self.b.browse("q", BIG)]
        if "DLQ" in self.b.queues:
            found += [self.body(m) for m in self.b.browse("DLQ", BIG)]
        for c in self.consumers.values():
            found += [bid(d) for d in c.unsettled]
        for held in self.txs.values():
            found += [bid(d) for _, d in held]
        counts = Counter(found)
        dup = [b for b, n in counts.items() if n > 1]
        assert not dup, f"in two places at once: {dup}"
        now_ms = int(self.now * 1000)
        for body in set(self.live) - set(counts):
            exp = self.live[body].expires
            if exp and exp <= now_ms:
                del self.live[body]  # expired (dropped: no expiry-address here)
        assert set(counts) == set(self.live), (
            f"lost {set(self.live) - set(counts)}, resurrected {set(counts) - set(self.live)}"
        )
        q = self.b.queue("q")
        held = sum(len(c.unsettled) for c in self.consumers.values())
        held += sum(len(h) for h in self.txs.values())
        assert q.in_flight == held

    @invariant()
    def no_starvation(self):
        if not hasattr(self, "b"):
            return
        q = self.b.queue("q")
        if q.dispatch_held:
            return
        by_cid = {f"{c.conn}/{c.sub}": c for c in self.consumers.values()}

        def has_credit(cid: str) -> bool:
            c = by_cid[cid]
            if not self.writable.get(c.conn, False):
                return False
            if c.ack == "auto":
                return True
            if len(c.unsettled) >= c.prefetch:
                return False
            return c.window < 0 or sum(d.message.size for d in c.unsettled) < c.window

        active = [c.cid for c in q.active_consumers()]
        anyone = any(has_credit(cid) for cid in active)
        if q.ungrouped.backlog:
            assert not anyone, "ungrouped backlog while a consumer has credit"
        for g in q.groups.values():
            if not g.backlog or g.flags & F_PARKED:
                continue
            if g.in_flight and (g.flags & F_RELEASE or g.holder is not g.owner):
                continue  # draining
            if g.owner is None:
                assert not anyone, f"unbound group {g.name!r} waits while a consumer has credit"
            else:
                assert not has_credit(g.owner.cid), f"group {g.name!r} starved at its owner"


GroupMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestGroupMachine = GroupMachine.TestCase


class QueueOrderMachine(GroupMachine):
    """The same walks with one consumer receiving at a time, where G16 is exact.

    Either a single consumer slot, or two on an exclusive queue (one waits).
    A message its consumer may take that is earlier than one delivered, or a
    step delivering out of queue order, fails ``check_queue_order``.
    """

    @initialize(
        mode=st.sampled_from(["sticky", "shared"]),
        buckets=st.sampled_from([-1, -1, 2]),
        attempts=st.integers(2, 4),
        poison=st.sampled_from(["dead-letter", "park"]),
        second=st.booleans(),
        persist_dc=st.booleans(),
        max_size=st.sampled_from([-1, -1, 6]),
    )
    def init(self, mode, buckets, attempts, poison, second, persist_dc, max_size):
        GroupMachine.init(
            self,
            mode,
            buckets,
            False,
            attempts,
            poison,
            1000,
            second,
            0,
            persist_dc,
            max_size,
            2 if second else 1,
        )

    send_bad_seq = None  # not about order


QueueOrderMachine.TestCase.settings = settings(
    max_examples=500,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestQueueOrderMachine = QueueOrderMachine.TestCase


def test_resuming_parked_groups_delivers_each_group_in_queue_order_as_it_resumes():
    """Two groups parked (poison policy "park"), resumed one after the other:
    each resume dispatches at once, the earliest of what it freed first,
    which may be earlier than what the previous resume delivered."""
    m = QueueOrderMachine()
    m.init(
        mode="sticky",
        buckets=-1,
        attempts=2,
        poison="park",
        second=False,
        persist_dc=False,
        max_size=-1,
    )
    for group in ("b", "a", "b", "a"):  # m1..m4
        m.send(group, 5, False)
    m.subscribe(0, "client-individual", 3, -1, False)
    for _ in range(6):  # each nack is a delivery attempt: the second parks the group
        m.nack(0, 0)
    q = m.b.queue("q")
    assert {g.name for g in q.groups.values() if g.flags & F_PARKED} == {"a", "b"}
    assert [bid(d) for d in m.consumers[0].unsettled] == [b"m4"]
    m.resume_parked()  # b, then a (with no credit left for it)
    assert [bid(d) for d in m.consumers[0].unsettled] == [b"m4", b"m1", b"m3"]
    assert not any(g.flags & F_PARKED for g in q.groups.values())
