"""Restore: rebuild queues and messages from what the store recovered."""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, cast

from mypy_extensions import trait

from shoal.broker.context import BrokerCore
from shoal.broker.queue import Queue

if TYPE_CHECKING:
    from shoal.broker.logqueue import LogQueue
    from shoal.records import Recovered

_by_id = attrgetter("id")


@trait
class RestoreMixin(BrokerCore):
    def restore(self, recovered: Recovered, now: float) -> None:
        """Rebuild queues and messages after ``Store.open()``; emits no records."""
        self._clock(now)
        start = len(self.records)
        for name, decl in recovered.queues.items():
            if name in self.queues:
                continue
            self.addresses.make_queue(
                name,
                dict(decl.settings),
                address=decl.address,
                routing=decl.routing,
                subscription=decl.subscription,
                client_id=decl.client_id,
                record=False,
            )
        next_id = max(self._next_id, recovered.next_message_id)
        for qname, stored in recovered.messages.items():
            q = self.queues.get(qname)
            if q is None:
                q = self.addresses.make_queue(qname, {}, record=False)
            if any(stored[i].id > stored[i + 1].id for i in range(len(stored) - 1)):
                stored = sorted(stored, key=_by_id)
            if stored and stored[-1].id >= next_id:
                next_id = stored[-1].id + 1
            if q.__class__ is Queue:
                restore = q.restore
                for rec in stored:
                    restore(rec)
            else:
                log = cast("LogQueue", q)  # the only other kind
                for rec in stored:
                    if rec.bucket >= 0:
                        log.restore_message(rec)
        self._next_id = next_id
        for qname, group in recovered.parked:
            q = self.queues.get(qname)
            if q.__class__ is Queue:
                self._park(q, group, record=False)
        self.sink_batches.update(recovered.sink_batches)
        for (qname, bucket), offset in recovered.log_commits.items():
            q = self.queues.get(qname)
            if q is not None and hasattr(q, "restore_commit"):
                q.restore_commit(bucket, offset)
        del self.records[start:]  # accept() re-emitted MessageStored for restored messages
        if self.to_page:  # the store has these bodies: page past the budget now
            self.memory.page_out()
        self._flush()
