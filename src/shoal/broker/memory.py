"""Memory budget: max-size-bytes, global-max-size and paging.

Past a budget, ``address-full-policy`` applies: ``page`` moves persistent
bodies out of memory (they are paged out once their MessageStored went to
the store, in ``take_records``), ``block`` pauses producers
(``ProducerFlow``), ``fail`` refuses the SEND.

``MemoryBudget`` owns the producers blocked on global-max-size and applies
the policies; the byte counts it reads (``Broker.total_bytes``, each
``Queue.bytes``) are kept by the queues as they take and drop bodies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shoal.broker.effects import PagedCopy, RestoredBody
from shoal.broker.model import PENDING
from shoal.broker.queue import Queue
from shoal.errors import ResourceFull

if TYPE_CHECKING:
    from shoal.broker.core import Broker
    from shoal.broker.effects import PageIn
    from shoal.broker.model import Message

# Key in Connection.blocked_on for the broker-wide limit.
GLOBAL_LIMIT = "<global-max-size>"


def check_room(q: Queue, size: int) -> None:
    """``address-full-policy = "fail"``: refuse a body past the queue's max-size-bytes."""
    if q.bytes + size > q.max_bytes:
        raise ResourceFull(
            f"queue {q.name!r} is full (max-size-bytes {q.max_bytes}, address-full-policy fail)"
        )


class MemoryBudget:
    """The broker-wide budget (global-max-size) and paging."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        # Producers blocked on global-max-size, by connection id.
        self.blocked: dict[int, None] = {}

    def unblock_all(self) -> None:
        """Memory fell under global-max-size: every producer it held goes on."""
        blocked = list(self.blocked)
        self.blocked.clear()
        unblocked = self.broker.producer_unblocked
        for conn_id in blocked:
            unblocked(conn_id, GLOBAL_LIMIT)

    def check_global(self, q: Queue, size: int) -> None:
        """Refuse a body past global-max-size when ``q``'s policy is ``fail``."""
        b = self.broker
        if q.full_fail and b.total_bytes + size > b.global_max:
            raise ResourceFull(
                f"broker memory is full (global-max-size {b.global_max}, "
                f"address-full-policy fail on {q.name!r})"
            )

    def after_send(self, conn_id: int) -> None:
        """A SEND from ``conn_id`` went in: block it at global-max-size, or
        unblock everyone once memory fell under it."""
        b = self.broker
        if b.total_bytes >= b.global_max:
            if conn_id not in self.blocked:
                self.blocked[conn_id] = None
                b.producer_blocked(conn_id, GLOBAL_LIMIT)
        elif self.blocked:
            self.unblock_all()

    def page_out(self) -> None:
        """Drop from memory the bodies waiting to be paged out (their
        MessageStored has gone to the store with this round's records)."""
        b = self.broker
        todo = b.to_page
        b.to_page = []
        touched: dict[Queue, None] = {}
        for q, m in todo:
            if m.state == PENDING and m.body is not None and not q.deleted:
                q.page_out(m)
                touched[q] = None
        for q in touched:
            if q.blocked and q.bytes < q.max_bytes:
                q.unblock_producers()
        if self.blocked and b.total_bytes < b.global_max:
            self.unblock_all()

    def bodies_read(self, reads: list[PageIn]) -> None:
        """The answer to ``Broker.take_page_ins``: restored bodies go back into
        their messages, copies that waited for a body enter their queues."""
        b = self.broker
        for r in reads:
            if isinstance(r, RestoredBody):
                self.restored_body(r)
                continue
            if not isinstance(r, PagedCopy):
                continue  # a Deliver carries its body itself
            body = r.body
            headers = r.headers
            if body is None:
                b.warn(
                    None,
                    f"message {r.message.id} of queue {r.source!r}: body could not "
                    f"be read back for its copy to {r.target!r} ({r.error}); the copy is "
                    "empty",
                )
                body = b""
                headers["shoal-body-lost"] = "true"
            q = b.addresses.internal_queue(r.target)
            b.enter_copy(q, r.message, headers, body, r.expires, r.persistent)

    def restored_body(self, r: RestoredBody) -> None:
        m: Message = r.message
        if m.state != PENDING or m.body is not None:
            return
        if r.body is not None:
            m.body = r.body
            return
        # Unreadable now: leave it paged, so its delivery tries again (and
        # closes that consumer's connection with the reason if it fails).
        b = self.broker
        q = b.queues.get(m.queue)
        if q is not None and q.__class__ is Queue and not q.deleted:
            b.warn(
                None,
                f"message {m.id} of queue {m.queue!r}: body could not be read "
                f"back after restart ({r.error}); it stays on disk",
            )
            m.body = b""  # page_out takes the accounting from "in memory" to "paged"
            q.page_out(m)
