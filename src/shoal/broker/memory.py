"""Memory budget: max-size-bytes, global-max-size and paging.

Past a budget, ``address-full-policy`` applies: ``page`` moves persistent
bodies out of memory (they are paged out once their MessageStored went to
the store, in ``take_records``), ``block`` pauses producers
(``ProducerFlow``), ``fail`` refuses the SEND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shoal.broker.dispatch import PENDING
from shoal.errors import ResourceFull

if TYPE_CHECKING:
    from shoal.broker.core import Broker
    from shoal.broker.effects import Deliver
    from shoal.broker.message import Message
    from shoal.broker.queue import Queue

# Key in Connection.blocked_on for the broker-wide limit.
GLOBAL_LIMIT = "<global-max-size>"


class MemoryMixin:
    __slots__ = ()

    def _global_unblock(self: Broker) -> None:
        blocked = list(self._gblocked)
        self._gblocked.clear()
        for conn_id in blocked:
            self.producer_unblocked(conn_id, GLOBAL_LIMIT)

    def take_page_ins(self: Broker) -> list[Deliver]:
        """Delivers (among the effects not yet taken) whose message is paged out.

        The server loads their bodies into ``Deliver.body`` before it passes
        the records of the same round to the store; see the module docstring.
        """
        out = self.page_ins
        self.page_ins = []
        return out

    def load_body(self: Broker, m: Message) -> bytes:
        """``m``'s body, read back through ``body_loader`` when it is paged."""
        body = m.body
        if body is None:
            if self.body_loader is None:
                raise LookupError(f"message {m.id} is paged and there is no body loader")
            body = self.body_loader(m)
        return body

    def _page_out(self: Broker) -> None:
        todo = self.to_page
        self.to_page = []
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

    def _check_global(self: Broker, q: Queue, size: int) -> None:
        if q.full_fail and self.total_bytes + size > self.global_max:
            raise ResourceFull(
                f"broker memory is full (global-max-size {self.global_max}, "
                f"address-full-policy fail on {q.name!r})"
            )

    def _after_global(self: Broker, conn_id: int) -> None:
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
                f"queue {q.name!r} is full (max-size-bytes {q.max_bytes}, "
                f"address-full-policy fail)"
            )
