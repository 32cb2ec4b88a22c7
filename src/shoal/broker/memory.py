"""Memory budget: max-size-bytes, global-max-size and paging.

Past a budget, ``address-full-policy`` applies: ``page`` moves persistent
bodies out of memory (they are paged out once their MessageStored went to
the store, in ``take_records``), ``block`` pauses producers
(``ProducerFlow``), ``fail`` refuses the SEND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.effects import PagedCopy, RestoredBody
from shoal.broker.model import PENDING
from shoal.broker.queue import Queue
from shoal.errors import ResourceFull

if TYPE_CHECKING:
    from shoal.broker.effects import PageIn
    from shoal.broker.model import Message

# Key in Connection.blocked_on for the broker-wide limit.
GLOBAL_LIMIT = "<global-max-size>"


@trait
class MemoryMixin(BrokerCore):
    def _global_unblock(self) -> None:
        blocked = list(self._gblocked)
        self._gblocked.clear()
        for conn_id in blocked:
            self.producer_unblocked(conn_id, GLOBAL_LIMIT)

    def take_page_ins(self) -> list[PageIn]:
        """What needs a paged body read from the store: Delivers (among the
        effects not yet taken) and dead-letter/expiry copies (``PagedCopy``).

        The server fills in each one's ``body`` and answers with
        :meth:`bodies_read` before it passes the records of the same round to
        the store, so a removal record never overtakes the read.
        """
        out = self.page_ins
        self.page_ins: list[PageIn] = []
        return out

    def bodies_read(self, reads: list[PageIn]) -> None:
        """The server read the bodies that :meth:`take_page_ins` asked for:
        the copies that waited for them enter their queues now. A copy whose
        body could not be read enters empty, flagged ``shoal-body-lost``: a
        store error must not undo the dead-letter or expiry move."""
        for r in reads:
            if isinstance(r, RestoredBody):
                self._restored_body(r)
                continue
            if not isinstance(r, PagedCopy):
                continue  # a Deliver carries its body itself
            body = r.body
            headers = r.headers
            if body is None:
                self.warn(
                    None,
                    f"message {r.message.id} of queue {r.source!r}: body could not "
                    f"be read back for its copy to {r.target!r} ({r.error}); the copy is "
                    "empty",
                )
                body = b""
                headers["shoal-body-lost"] = "true"
            q = self._internal_queue(r.target)
            self._enter_copy(q, r.message, headers, body, r.expires, r.persistent)
        self._flush()

    def _restored_body(self, r: RestoredBody) -> None:
        m = r.message
        if m.state != PENDING or m.body is not None:
            return
        if r.body is not None:
            m.body = r.body
            return
        # Unreadable now: leave it paged, so its delivery tries again (and
        # closes that consumer's connection with the reason if it fails).
        q = self.queues.get(m.queue)
        if q is not None and q.__class__ is Queue and not q.deleted:
            self.warn(
                None,
                f"message {m.id} of queue {m.queue!r}: body could not be read "
                f"back after restart ({r.error}); it stays on disk",
            )
            m.body = b""  # page_out takes the accounting from "in memory" to "paged"
            q.page_out(m)

    def _page_out(self) -> None:
        todo = self.to_page
        self.to_page: list[tuple[Queue, Message]] = []
        touched: dict[Queue, None] = {}
        for q, m in todo:
            if m.state == PENDING and m.body is not None and not q.deleted:
                q.page_out(m)
                touched[q] = None
        for q in touched:
            if q.blocked and q.bytes < q.max_bytes:
                q.unblock_producers()
        if self._gblocked and self.total_bytes < self.global_max:
            self._global_unblock()

    def _check_global(self, q: Queue, size: int) -> None:
        if q.full_fail and self.total_bytes + size > self.global_max:
            raise ResourceFull(
                f"broker memory is full (global-max-size {self.global_max}, "
                f"address-full-policy fail on {q.name!r})"
            )

    def _after_global(self, conn_id: int) -> None:
        if self.total_bytes >= self.global_max:
            if conn_id not in self._gblocked:
                self._gblocked[conn_id] = None
                self.producer_blocked(conn_id, GLOBAL_LIMIT)
        elif self._gblocked:
            self._global_unblock()

    @staticmethod
    def _check_room(q: Queue, size: int) -> None:
        if q.bytes + size > q.max_bytes:
            raise ResourceFull(
                f"queue {q.name!r} is full (max-size-bytes {q.max_bytes}, address-full-policy fail)"
            )
