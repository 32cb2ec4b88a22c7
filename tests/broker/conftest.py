"""A small driver for the pure core: no event loop, explicit time."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from shoal.broker.core import Broker
from shoal.broker.effects import CloseConnection, Deliver, ProducerFlow
from shoal.broker.model import Connection, Consumer
from shoal.broker.queue import Queue
from shoal.broker.settings import AddressSettings
from shoal.store.memory import MemoryStore

T0 = 1_700_000_000.0


class Harness:
    """Drives a Broker, keeps every Deliver, and remembers what is unacked."""

    def __init__(
        self,
        address_settings: dict[str, dict[str, Any]] | None = None,
        queues_config: dict[str, dict[str, Any]] | None = None,
        now: float = T0,
        store: Any = None,
        *,
        global_max_size: int = -1,
        paging: bool = False,
    ) -> None:
        """``paging=True`` needs a store with ``load_body`` (a JournalStore):
        the core pages bodies out and the harness reads them back as the
        server does (``Deliver.body``)."""
        self.now = now
        self.raw_settings = address_settings or {}
        self.queues_config = queues_config
        self.global_max_size = global_max_size
        self.paging = paging
        self.store = store or MemoryStore()
        self.b = Broker(
            AddressSettings.from_raw(self.raw_settings),
            now,
            queues_config=queues_config,
            global_max_size=global_max_size,
            paging=paging,
        )
        recovered = self.store.open()
        if store is not None:
            self.b.restore(recovered, now)
            self.read_page_ins()
        self.warnings: list[tuple[int | None, str]] = []
        self.delivered: list[Deliver] = []
        self.closed: list[CloseConnection] = []
        self.flow: list[ProducerFlow] = []
        self.by_sub: dict[tuple[int, str], list[Deliver]] = defaultdict(list)
        self.conns: set[int] = set()

    # -- plumbing ----------------------------------------------------------------

    def read_page_ins(self) -> None:
        """As the server: read the bodies the core asked for, then answer it."""
        reads = self.b.take_page_ins()
        if reads:
            for r in reads:
                r.body = self.store.load_body(r.message.id, r.message.queue)
            self.b.bodies_read(reads)

    def pump(self) -> list[Deliver]:
        new = []
        self.read_page_ins()  # before the records go to the store
        self.warnings.extend(self.b.take_warnings())
        for e in self.b.take_effects():
            if isinstance(e, Deliver):
                new.append(e)
                self.delivered.append(e)
                self.by_sub[(e.conn_id, e.sub_id)].append(e)
            elif isinstance(e, CloseConnection):
                self.closed.append(e)
            else:
                self.flow.append(e)
        # the deliveries are "written" by now: auto-ack removals go too
        self.store.append(self.b.take_records() + self.b.take_sent_removals())
        self.store.sync()
        return new

    def advance(self, seconds: float) -> float | None:
        self.now += seconds
        dl = self.b.tick(self.now)
        self.pump()
        return dl

    # -- commands ------------------------------------------------------------------

    def connect(self, conn: int, **kw: Any) -> None:
        self.b.connect(conn, self.now, **kw)
        self.conns.add(conn)

    def ensure(self, conn: int) -> None:
        if conn not in self.conns:
            self.connect(conn)

    def sub(
        self,
        conn: int,
        sub: str,
        dest: str = "/queue/q",
        ack: str = "client-individual",
        **headers: Any,
    ) -> list[Deliver]:
        self.ensure(conn)
        hdrs = {
            k.replace("_", "-") if k.startswith(("prefetch", "consumer", "durable")) else k: str(v)
            for k, v in headers.items()
        }
        self.b.subscribe(conn, sub, dest, ack, hdrs, self.now)
        return self.pump()

    def unsub(self, conn: int, sub: str, durable: bool = False) -> list[Deliver]:
        self.b.unsubscribe(conn, sub, self.now, durable=durable)
        return self.pump()

    def send(
        self,
        body: str | bytes = b"",
        dest: str = "/queue/q",
        conn: int = 1,
        group: str | None = None,
        seq: int | str | None = None,
        tx: str | None = None,
        **headers: Any,
    ) -> list[Deliver]:
        self.ensure(conn)
        h = {k: str(v) for k, v in headers.items()}
        if group is not None:
            h["JMSXGroupID"] = group
        if seq is not None:
            h["JMSXGroupSeq"] = str(seq)
        if isinstance(body, str):
            body = body.encode()
        self.b.send(conn, dest, h, body, self.now, transaction=tx)
        return self.pump()

    def ack(self, d: Deliver, tx: str | None = None) -> list[Deliver]:
        self.b.ack(d.conn_id, d.ack_id, self.now, transaction=tx)
        return self.pump()

    def nack(self, d: Deliver, tx: str | None = None) -> list[Deliver]:
        self.b.nack(d.conn_id, d.ack_id, self.now, transaction=tx)
        return self.pump()

    def disconnect(self, conn: int) -> list[Deliver]:
        self.b.disconnect(conn, self.now)
        self.conns.discard(conn)
        return self.pump()

    def writable(self, conn: int, w: bool) -> list[Deliver]:
        self.b.set_writable(conn, w, self.now)
        return self.pump()

    def restart(self, lazy_bodies: bool = False) -> Harness:
        """A new broker recovered from the store (only persistent messages survive).

        ``lazy_bodies``: a journal reopens without reading message bodies.
        """
        self.store.close()
        store = self.store
        if not isinstance(store, MemoryStore):  # a journal: reopen its directory
            store = type(store)(store.directory, lazy_bodies=lazy_bodies)
        new = Harness(
            self.raw_settings,
            self.queues_config,
            self.now,
            store=store,
            global_max_size=self.global_max_size,
            paging=self.paging,
        )
        new.pump()
        return new

    # -- views --------------------------------------------------------------------

    def bodies(self, ds: list[Deliver]) -> list[str]:
        return [(d.message.body if d.message.body is not None else d.body).decode() for d in ds]

    def got(self, conn: int, sub: str) -> list[str]:
        return self.bodies(self.by_sub[(conn, sub)])

    def groups(self, queue: str = "q") -> dict[str, dict[str, Any]]:
        return {g["group"]: g for g in self.b.group_infos(queue, self.now)}


@pytest.fixture
def h() -> Harness:
    return Harness()


@pytest.fixture
def make() -> Any:
    return Harness


class ConsumerMaker:
    """Consumers of one (otherwise unused) queue, each on its own connection."""

    def __init__(self) -> None:
        b = Broker(AddressSettings.from_raw({}), T0)
        self.q = Queue(b, "q", AddressSettings.from_raw({}).resolve("q"), {}, address="q")
        self.n = 0

    def __call__(self, *, exclusive: bool = False, prefetch: int = 10) -> Consumer:
        self.n += 1
        conn = Connection(self.n, None, None, T0)
        return Consumer(
            conn, "s", self.q, "/queue/q", "client-individual", prefetch, -1, exclusive, T0
        )
