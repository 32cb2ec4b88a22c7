"""Restore: rebuild queues and messages from what the store recovered."""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, cast

from shoal.broker.admin import park
from shoal.broker.queue import Queue

if TYPE_CHECKING:
    from shoal.broker.core import Broker
    from shoal.broker.logqueue import LogQueue
    from shoal.records import Recovered

_by_id = attrgetter("id")


def restore(broker: Broker, recovered: Recovered) -> None:
    """Rebuild queues and messages after ``Store.open()``; emits no records."""
    start = len(broker.records)
    for name, decl in recovered.queues.items():
        if name in broker.queues:
            continue
        broker.addresses.make_queue(
            name,
            dict(decl.settings),
            address=decl.address,
            routing=decl.routing,
            subscription=decl.subscription,
            client_id=decl.client_id,
            record=False,
        )
    next_id = max(broker.next_message_id, recovered.next_message_id)
    for qname, stored in recovered.messages.items():
        q = broker.queues.get(qname)
        if q is None:
            q = broker.addresses.make_queue(qname, {}, record=False)
        if any(stored[i].id > stored[i + 1].id for i in range(len(stored) - 1)):
            stored = sorted(stored, key=_by_id)
        if stored and stored[-1].id >= next_id:
            next_id = stored[-1].id + 1
        if q.__class__ is Queue:
            put_back = q.restore
            for rec in stored:
                put_back(rec)
        else:
            log = cast("LogQueue", q)  # the only other kind
            for rec in stored:
                if rec.bucket >= 0:
                    log.restore_message(rec)
    broker.next_message_id = next_id
    for qname, group in recovered.parked:
        q = broker.queues.get(qname)
        if q.__class__ is Queue:
            park(q, group, record=False)
    broker.sink_batches.update(recovered.sink_batches)
    for (qname, bucket), offset in recovered.log_commits.items():
        q = broker.queues.get(qname)
        if q is not None and hasattr(q, "restore_commit"):
            q.restore_commit(bucket, offset)
    del broker.records[start:]  # accept() re-emitted MessageStored for restored messages
    if broker.to_page:  # the store has these bodies: page past the budget now
        broker.memory.page_out()
