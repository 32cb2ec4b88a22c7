"""Routing: SEND -> the queues of an address.

A destination resolves to a queue, a log queue or a topic (each of its
subscription queues gets a copy). Cluster routing (``cluster_routing.py``)
plugs in here: everything that decides which queue a message enters goes
through ``_route`` / ``send``. Dead-letter and expiry copies (``move_copy``) too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.effects import (
    PagedCopy,
)
from shoal.broker.memory import GLOBAL_LIMIT, check_room
from shoal.broker.model import Message, Topic
from shoal.broker.queue import Queue
from shoal.broker.settings import group_id_of
from shoal.errors import InvalidHeader, LimitExceeded, NotFound

if TYPE_CHECKING:
    from collections.abc import Sequence

    from shoal.broker.queue_context import QueueCore
    from shoal.broker.settings import QueueSettings

_SEQ: Final = "JMSXGroupSeq"


def parse_message_headers(
    headers: dict[str, str],
) -> tuple[int, int, int, bool | None]:
    """(JMSXGroupSeq, expires, priority, persistent or None) or InvalidHeader."""
    s = headers.get(_SEQ)
    if s is None:
        seq = 0
    else:
        try:
            seq = int(s)
        except ValueError:
            raise InvalidHeader(_SEQ, s, "not an integer") from None
    e = headers.get("expires")
    if e is None:
        expires = 0
    else:
        try:
            expires = int(e)
        except ValueError:
            raise InvalidHeader("expires", e, "not an integer (epoch milliseconds)") from None
        if expires < 0:
            expires = 0
    p = headers.get("priority")
    if p is None:
        priority = 4
    else:
        try:
            priority = min(9, max(0, int(p)))
        except ValueError:
            raise InvalidHeader("priority", p, "not an integer") from None
    ps = headers.get("persistent")
    persistent = None if ps is None else ps.lower() == "true"
    return seq, expires, priority, persistent


@trait
class RoutingMixin(BrokerCore):
    def send_blocked(self, conn_id: int, destination: str) -> bool:
        """Whether a SEND from this connection to ``destination`` must wait:
        the connection is blocked on the address (or on global-max-size).

        Only full addresses hold a producer back: its SENDs elsewhere go on.
        An address never sent to, or a bad one, is not blocked (``send``
        reports a bad one).
        """
        conn = self._conns.get(conn_id)
        if conn is None or not conn.blocked_on:
            return False
        if GLOBAL_LIMIT in conn.blocked_on:
            return True
        target = self.addresses.send_cache.get(destination)
        if target is None:
            return False  # not an address this producer filled
        q = target[0]
        if q.__class__ is Topic:
            return any(sub in conn.blocked_on for sub in q.subs)
        return q in conn.blocked_on

    def commit_blocked(self, conn_id: int, transaction: str) -> bool:
        """Whether committing would send to an address this connection is blocked on."""
        conn = self._conns.get(conn_id)
        if conn is None or not conn.blocked_on:
            return False
        tx = conn.txs.get(transaction)
        return tx is not None and any(
            self.send_blocked(conn_id, destination) for destination, _h, _b in tx.sends
        )

    def send(
        self,
        conn_id: int,
        destination: str,
        headers: dict[str, str],
        body: bytes,
        now: float,
        *,
        transaction: str | None = None,
    ) -> int | None:
        """Route one SEND. Returns None, or in a cluster a hold id when the
        message waits for its group's binding (C2): a ``SendDecided`` effect
        with that id says later whether it was routed or refused."""
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self._clock(now)
        tx = None
        if transaction is not None:
            tx = conn.txs.get(transaction)
            if tx is None:
                raise NotFound(f"no transaction {transaction!r}")
            if tx.size() >= self.limits.max_transaction_size:
                raise LimitExceeded("max-transaction-size", self.limits.max_transaction_size)
        # parse_message_headers, inlined for the common case (no optional headers)
        # The headers with a meaning for the core beyond "persistent", one
        # lookup each (cheaper than a frozenset's isdisjoint walking the dict).
        plain = (
            _SEQ not in headers
            and "expires" not in headers
            and "priority" not in headers
            and "reply-to" not in headers
        )
        if plain:
            seq = expires = 0
            priority = 4
            ps = headers.get("persistent")
            persistent = None if ps is None else ps.lower() == "true"
        else:
            seq, expires, priority, persistent = parse_message_headers(headers)
        hit = self.addresses.send_cache.get(destination)
        target, base = hit if hit is not None else self.addresses.send_target(conn, destination)
        if not plain:
            rt = headers.get("reply-to")
            if rt is not None and rt.startswith("/temp-"):
                headers = self.addresses.rewrite_reply_to(conn, headers)
        cls = target.__class__
        gmax = self.global_max
        if cls is Queue:
            tq: Queue = target  # typed: compiled code calls it directly
            if tq.full_fail and tq.max_bytes >= 0:
                check_room(tq, len(body))
            if gmax >= 0:
                self.memory.check_global(tq, len(body))
            if tx is not None:
                tx.sends.append((destination, headers, body))
                return None
            conn.sent += 1
            router = self.router
            if router is not None:
                hold = router.route(
                    target, base, headers, body, seq, expires, priority, persistent, conn_id
                )
                self._flush()
                return hold
            i = self._next_id
            self._next_id = i + 1
            m = tq.accept(
                i, base, headers, body, seq, expires, priority, persistent, self.now_ms, conn_id
            )
            d = self.dirty
            if not self.batching:
                while d:
                    dq = cast("Queue", d.pop())
                    dq.dirty = False
                    dq.dispatch()
            if gmax >= 0 and not (tq.can_page and m.persistent):
                self.memory.after_send(conn_id)
            return None
        if cls is Topic:
            for q in target.subs:
                if q.__class__ is Queue:
                    if q.full_fail and q.max_bytes >= 0:
                        check_room(q, len(body))
                    if gmax >= 0:
                        self.memory.check_global(q, len(body))
        if tx is not None:
            tx.sends.append((destination, headers, body))
            return None
        conn.sent += 1
        held = self._route(target, base, headers, body, seq, expires, priority, persistent, conn_id)
        self._flush()
        if gmax >= 0 and held:
            self.memory.after_send(conn_id)
        return None

    def send_many(
        self,
        conn_id: int,
        destination: str,
        rows: Sequence[tuple[str | None, dict[str, str], bytes]],
        now: float,
    ) -> int:
        """Send ``rows`` of ``(group, headers, body)`` to a log queue in one go.

        All or nothing: every row's headers are parsed before any message is
        appended, so a bad header (InvalidHeader) sends none. Returns how many
        rows were sent: ``len(rows)``, or 0 when ``destination`` is not a log
        queue (a queue or a topic applies its limits message by message: the
        caller sends those one at a time with :meth:`send`). As in ``send``,
        the queue's group header names the group, not the row's first field.
        """
        conn = self._conns.get(conn_id)
        if conn is None:
            raise NotFound(f"no connection {conn_id}")
        self._clock(now)
        hit = self.addresses.send_cache.get(destination)
        target, base = hit if hit is not None else self.addresses.send_target(conn, destination)
        if target.__class__ is Queue or target.__class__ is Topic or not rows:
            return 0
        s: QueueSettings = target.settings
        gh = s.group_header
        default_group = s.default_group
        # one pass that may raise, before anything is appended; the fields go
        # in parallel lists (no tuple per row)
        gids: list[str | None] = []
        seqs: list[int] = []
        exps: list[int] = []
        prios: list[int] = []
        for _g, headers, _b in rows:
            rt = headers.get("reply-to")
            if rt is not None and rt.startswith("/temp-"):
                return 0  # send() rewrites it for the connection: one at a time
            seq, expires, priority, _p = parse_message_headers(headers)
            gids.append(group_id_of(headers, gh, default_group))
            seqs.append(seq)
            exps.append(expires)
            prios.append(priority)
        first = self._next_id
        n: int = target.offer_many(first, base, rows, gids, seqs, exps, prios, self.now_ms)
        self._next_id = first + n
        conn.sent += n
        self._flush()
        if self.global_max >= 0:
            self.memory.after_send(conn_id)
        return n

    def _route(
        self,
        target: Any,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
        producer: int | None,
    ) -> bool:
        """Enqueue into the target's queues; True if some copy stays in memory
        whatever the budget (not pageable), so global-max-size may block."""
        targets = target.subs if target.__class__ is Topic else (target,)
        now_ms = self.now_ms
        held = False
        router = self.router
        for q in targets:
            if q.__class__ is Queue and q.filter is not None and not q.filter(headers):
                continue  # a non-durable topic subscriber's selector rejects it
            if router is not None and q.__class__ is Queue and target.__class__ is Queue:
                hold = router.route(
                    q, base, headers, body, seq, expires, priority, persistent, producer
                )
                if hold is not None:
                    self.cluster_holds.append(hold)  # commit() hands them to the session
                held = True
                continue
            i = self._next_id
            self._next_id = i + 1
            if q.__class__ is Queue:
                m = q.accept(
                    i, base, headers, body, seq, expires, priority, persistent, now_ms, producer
                )
                if not (q.can_page and m.persistent):
                    held = True
            else:
                self._offer_log(q, i, base, headers, body, seq, expires, priority, persistent)
                held = True
        return held

    def _offer_log(
        self,
        q: Any,
        mid: int,
        base: str,
        headers: dict[str, str],
        body: bytes,
        seq: int,
        expires: int,
        priority: int,
        persistent: bool | None,
    ) -> None:
        s: QueueSettings = q.settings
        gid = group_id_of(headers, s.group_header, s.default_group)
        if persistent is None:
            persistent = s.default_persistent
        m = Message(
            mid, q.name, base, headers, body, gid, seq, persistent, expires, priority, self.now_ms
        )
        q.offer(m, self.now)

    def move_copy(self, m: Message, target: str, src: QueueCore, *, expiry: bool) -> None:
        """Dead-letter / expiry: a copy of ``m`` (new id) enters queue ``target``."""
        q = self.addresses.internal_queue(target)
        headers = dict(m.headers)
        headers["original-destination"] = m.destination
        expires = m.expires
        if expiry:
            headers.pop("expires", None)
            expires = 0
        persistent = m.persistent or headers.get("persistent", "").lower() == "true"
        if m.body is None:  # paged: the copy needs the bytes (its own MessageStored)
            self.page_ins.append(PagedCopy(m, q.name, src.name, headers, expires, persistent))
            return
        self._enter_copy(q, m, headers, m.body, expires, persistent)

    def _enter_copy(
        self,
        q: Any,
        m: Message,
        headers: dict[str, str],
        body: bytes,
        expires: int,
        persistent: bool,
    ) -> None:
        i = self.next_id()
        dest = "/queue/" + q.name
        if q.__class__ is Queue:
            q.accept(
                i, dest, headers, body, m.group_seq, expires, m.priority, persistent, self.now_ms
            )
        else:
            self._offer_log(q, i, dest, headers, body, m.group_seq, expires, m.priority, persistent)
