"""The broker process: listeners, the core, the store, timers, shutdown.

Drain order on shutdown: stop listeners, return in-flight deliveries and
tell clients why, flush the journal, close the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import gc
import logging
import os
import signal
import socket
import ssl
import sys
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shoal import __version__
from shoal.broker.core import Broker
from shoal.broker.effects import (
    CloseConnection,
    Deliver,
    PageIn,
)
from shoal.errors import ListenerUnavailable
from shoal.management.metrics import Metrics
from shoal.protocol.stomp import Limits
from shoal.records import DeliveryCounted, Record, Recovered
from shoal.security import LoginThrottle
from shoal.server.carry_out import carry_out_effects
from shoal.server.config import Config, core_limits
from shoal.server.pacing import ReadPacer
from shoal.server.persistence import SyncPipeline
from shoal.server.session_api import HandshakePool
from shoal.server.stomp import StompSession
from shoal.store.base import Store

log = logging.getLogger("shoal.server")

CLEAN_MARKER = "clean-shutdown"  # in the data dir; written last by a graceful stop
TICK_INTERVAL = 0.05  # s; the core also returns its next deadline
GC_GEN0_THRESHOLD = 10_000  # allocations between young collections (CPython: 700)


def open_store(config: Config) -> Store:
    if config.data is None:
        from shoal.store.memory import MemoryStore

        return MemoryStore()
    from shoal.store.journal import JournalStore

    return JournalStore(
        config.data / "journal",
        segment_size=config.journal_segment_bytes,
        repair=config.repair,
        lazy_bodies=has_memory_budget(config),
    )


def has_memory_budget(config: Config) -> bool:
    """Whether the configuration bounds the memory for message bodies.

    Then the journal recovers without reading bodies and restore reads back
    only those within budget. Without one every body is held anyway, and
    decoding them from the segment as it is read is the cheaper way. (A
    budget given only by a destination parameter is not known until the
    queue is restored: its bodies are read, then paged out by restore.)
    """
    if config.limits["global-max-size"] >= 0:
        return True
    settings = config.address_settings
    if settings.base.max_size_bytes >= 0:
        return True
    if any(vals.get("max_size_bytes", -1) >= 0 for _pattern, vals in settings.patterns):
        return True
    return any(int(q.get("max-size-bytes", -1)) >= 0 for q in config.queues.values())


def _release_free_memory() -> None:
    """Hand the heap freed after recovery back to the OS.

    Recovery builds millions of objects and, without a memory budget, reads
    every live body; glibc keeps what restore freed mapped, so the process
    would stay as large as its peak.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def check_listeners_free(config: Config) -> None:
    """Bind and listen on every configured address once, before the journal
    opens, so a taken port refuses to start with one line naming the
    listener, instead of failing half-started. Port 0 cannot clash. The
    sockets are held until all are bound: two listeners given one port clash."""
    held: list[socket.socket] = []
    try:
        for name, (host, port) in config.listeners():
            if port == 0:
                continue
            try:
                for family, kind, proto, _name, address in socket.getaddrinfo(
                    host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
                ):
                    sock = socket.socket(family, kind, proto)
                    held.append(sock)
                    # as asyncio's create_server binds (reuse_address=True)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
                    sock.listen(1)
            except OSError as exc:
                raise listener_unavailable(name, (host, port), exc) from None
    finally:
        for sock in held:
            sock.close()


def listener_unavailable(name: str, hostport: tuple[str, int], exc: OSError) -> ListenerUnavailable:
    key = "cluster.link" if name == "link" else f"broker.{name}"
    where = key if name == "link" else f"{key} (or --{name})"
    if exc.errno == errno.EADDRINUSE:
        reason = "the address is already in use (another broker on this host?)"
    else:
        reason = (exc.strerror or str(exc)).lower()
    return ListenerUnavailable(
        key,
        f"the {name} listener cannot bind {hostport[0]}:{hostport[1]}: {reason}; "
        f"set a free address in {where}",
    )


class BrokerServer:
    version = __version__

    def __init__(self, config: Config) -> None:
        self.config = config
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.sessions: dict[int, StompSession] = {}
        self._conn_ids = 0
        self._flush_scheduled = False
        # Auto-ack removals whose MESSAGE frames are written: journaled two
        # callback rounds later, once the loop has handed those bytes to the
        # kernel (removals_written).
        self._written_removals: list[Record] = []
        self._removals_due: list[Record] = []
        self.dirty: set[StompSession] = set()  # sessions with output outside flush
        self.read_since_flush: list[ReadPacer] = []  # told by flush: read on
        self._tick_handle: asyncio.TimerHandle | None = None
        self.listeners: list[asyncio.base_events.Server] = []
        self.addresses: dict[str, tuple[str, int]] = {}
        self.stopped = asyncio.Event()
        self.started_at = time.time()
        self.security_on = config.security.enabled
        limits = config.limits
        self.protocol_limits = Limits(
            max_frame_bytes=limits["max-frame-bytes"],
            max_headers=limits["max-headers"],
            max_header_line_bytes=limits["max-header-line-bytes"],
        )
        # Until CONNECTED a peer is a stranger: its frames stay small.
        self.handshake_limits = dataclasses.replace(
            self.protocol_limits,
            max_frame_bytes=min(
                limits["max-frame-bytes"], limits["max-unauthenticated-frame-bytes"]
            ),
        )
        dest_limit = limits["max-destination-bytes"]
        self.max_destination_bytes = dest_limit if dest_limit >= 0 else sys.maxsize  # -1: off
        self.handshaking = HandshakePool()  # connections that have not completed CONNECT
        # scrypt off the event loop (it releases the GIL); two workers bound
        # what failed logins can take, one connection waits for one check.
        self.auth_pool: ThreadPoolExecutor | None = None
        self.login_throttle = LoginThrottle(limits["max-auth-failures-per-minute"])
        self.store: Store = open_store(config)
        self.broker: Broker = None  # type: ignore[assignment]
        self.persistence: SyncPipeline = None  # type: ignore[assignment]
        self.redelivered_below = 0  # ids below it were recovered after a crash: flagged redelivered
        self.metrics = Metrics()  # delivery latency is observed in flush
        self.close_requests: list[CloseConnection] = []  # from management, done by flush
        self._lossy_logged: weakref.WeakSet[StompSession] = weakref.WeakSet()
        self.cluster: Any = None  # shoal.server.cluster.node.ClusterNode with [cluster]
        self.link_clients: dict[int, Any] = {}  # core conn id -> cluster LinkClient
        self.recovered_bindings: dict[tuple[str, str], str] = {}  # GroupBound, journaled

    def next_conn_id(self) -> int:
        self._conn_ids += 1
        return self._conn_ids

    def verify_password_async(
        self, login: str, passcode: str, wanted: Any
    ) -> asyncio.Future[bool | None]:
        """Check a password in the auth pool; None when ``wanted()`` turned
        false while it queued (the peer left: spend no scrypt on it)."""
        if self.auth_pool is None:
            self.auth_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="shoal-auth")
        verify = self.config.security.verify

        def check() -> bool | None:
            return verify(login, passcode) if wanted() else None

        return self.loop.run_in_executor(self.auth_pool, check)

    def close_connection(self, conn_id: int, reason: str) -> None:
        """Tell the client ``reason`` and close its connection, in the next flush
        (an operator's request: management never touches a session)."""
        self.close_requests.append(CloseConnection(conn_id, reason))
        self.schedule_flush()

    def authorize(self, user: str | None, action: str, destination: str) -> None:
        self.config.security.check_destination(user, action, destination)

    # --- life cycle ---------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        check_listeners_free(self.config)
        now = time.time()
        recovered = self.store.open()  # may raise CorruptRecordError: refuse to start
        for note in recovered.notes:
            log.warning("journal recovery: %s", note)
        self._count_possible_deliveries(recovered)
        self.broker = Broker(
            self.config.address_settings,
            now,
            queues_config=self.config.queues,
            topics=self.config.topics,
            global_max_size=self.config.limits["global-max-size"],
            limits=core_limits(self.config.limits),
            paging=hasattr(self.store, "load_body"),
        )
        # Millions of new objects and no cycles: a collection pass every few
        # thousand allocations over the growing heap would dominate restore.
        gc.disable()
        try:
            self.broker.restore(recovered, now)
            if self.broker.page_ins:  # bodies the budget keeps in memory
                self._page_in(self.broker.take_page_ins())
        finally:
            gc.enable()
        recovered_messages = sum(len(m) for m in recovered.messages.values())
        self.recovered_bindings = recovered.bindings  # the local grouping handler's (C8)
        del recovered  # the bodies past the memory budget were paged out by restore
        if recovered_messages:
            _release_free_memory()
            # The recovered entries are long-lived: keep every later full
            # collection from walking them (a pass over 1M of them stalls the
            # loop for about half a second). They are still freed by refcount;
            # a deleted queue unlinks its FIFOs, so none ends up in a cycle.
            gc.freeze()
        # Each message allocates a handful of tracked objects that mostly die
        # within a few thousand messages; with the default 700-allocation
        # gen-0 threshold the collector walked them again and again (W2:
        # 21.7-24.8 -> 19.6-21.2 us of broker CPU per message at 10,000).
        gc.set_threshold(GC_GEN0_THRESHOLD, 10, 10)
        self.persistence = SyncPipeline(self.store, self.loop)
        self.persistence.append(self.broker.take_records())
        await self._listen("stomp", self.config.stomp, None)
        if self.config.cluster is not None:
            from shoal.server.cluster.node import ClusterNode

            self.cluster = ClusterNode(self, self.config.cluster)
            await self.cluster.start()
        if self.config.stomp_tls is not None:
            await self._listen("stomp-tls", self.config.stomp_tls, self._ssl_context())
        for name, hostport in (("amqp", self.config.amqp), ("amqp-tls", self.config.amqp_tls)):
            if hostport is not None:
                from shoal.server.amqp import start_amqp

                ctx = self._ssl_context() if name == "amqp-tls" else None
                listener, address = await start_amqp(self, hostport, ctx)
                self.listeners.append(listener)
                self.addresses[name] = address
        for name, hostport in (("ws", self.config.ws), ("ws-tls", self.config.ws_tls)):
            if hostport is not None:
                from shoal.server.ws import start_ws

                ctx = self._ssl_context() if name == "ws-tls" else None
                listener, address = await start_ws(self, hostport, ctx)
                self.listeners.append(listener)
                self.addresses[name] = address
        if self.config.http is not None:
            from shoal.server.http import start_http

            server, address = await start_http(self, self.config.http)
            self.listeners.append(server)
            self.addresses["http"] = address
        self._schedule_tick(TICK_INTERVAL)
        log.info("shoal %s listening: %s", self.version, self.addresses)

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.config.tls_cert or "", self.config.tls_key)
        return ctx

    async def _listen(
        self, name: str, hostport: tuple[str, int], ctx: ssl.SSLContext | None
    ) -> None:
        server = await self.loop.create_server(
            lambda: StompSession(self),
            hostport[0],
            hostport[1],
            ssl=ctx,
            reuse_address=True,
            backlog=1024,
        )
        self.listeners.append(server)
        sock = server.sockets[0].getsockname()
        self.addresses[name] = (sock[0], sock[1])

    async def stop(self) -> None:
        """Graceful shutdown within config.shutdown_timeout."""
        for server in self.listeners:
            server.close()
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if self.cluster is not None:
            self.cluster.stop()  # links hand their unacked forwards back first
        now = time.time()
        for session in list(self.sessions.values()):
            if session.connected:
                self.broker.disconnect(session.conn_id, now)
                session.connected = False
            session.shutdown("broker is shutting down")
        self.flush()
        for session in list(self.sessions.values()):
            # only STOMP sessions hold removals until written (AMQP acks once written)
            if isinstance(session, StompSession) and session.removals_after_write:
                session.release_removals()
        self._removals_due += self._written_removals
        self._written_removals = []
        self._journal_written_removals()
        await self.persistence.drain(self.config.shutdown_timeout)
        for server in self.listeners:
            try:
                await asyncio.wait_for(server.wait_closed(), 1.0)
            except (TimeoutError, asyncio.CancelledError):
                pass
        self.persistence.close()
        if self.auth_pool is not None:
            self.auth_pool.shutdown(wait=False, cancel_futures=True)
        self.store.close()
        if self.config.data is not None and self.persistence.idle:
            (self.config.data / CLEAN_MARKER).touch()
        self.stopped.set()

    def _count_possible_deliveries(self, recovered: Recovered) -> None:
        """After a crash, flag every recovered message as possibly delivered.

        A MESSAGE frame may have reached a consumer before its delivery count
        was journaled, so without a clean-shutdown marker every message
        recovered (every id below ``redelivered_below``) is delivered with
        ``redelivered:true``: nothing is ever delivered twice unflagged. The
        journaled delivery counts (``x-delivery-count``, max-delivery-attempts)
        are left as they are. After a clean shutdown nothing is flagged.
        """
        if self.config.data is None:
            return
        marker = self.config.data / CLEAN_MARKER
        if marker.exists():
            marker.unlink()
            return
        count = sum(len(m) for m in recovered.messages.values())
        if count:
            self.redelivered_below = recovered.next_message_id
            log.warning(
                "no clean shutdown recorded: the %d recovered messages will be delivered with "
                "redelivered:true (they may have reached a consumer before the crash)",
                count,
            )

    # --- paging ------------------------------------------------------------

    def take_records(self) -> list[Any]:
        """The core's records for the store, after reading back the bodies of
        paged messages delivered in this round (a record that removes one,
        e.g. an expiry's, must not reach the journal before the read)."""
        broker = self.broker
        if broker.page_ins:
            self._page_in(broker.take_page_ins())
        return broker.take_records()

    def _page_in(self, reads: list[PageIn]) -> None:
        """Read back the bodies the core asked for, then answer it."""
        load = self.store.load_body  # type: ignore[attr-defined]
        for r in reads:
            m = r.message
            try:
                r.body = load(m.id, m.queue)
            except Exception as exc:
                log.error(
                    "cannot read back the body of paged message %d of queue %r: %s",
                    m.id,
                    m.queue,
                    exc,
                )
                if not isinstance(r, Deliver):
                    r.error = str(exc)
        self.broker.bodies_read(reads)

    # --- the per-iteration flush ------------------------------------------

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Persist the core's records, turn its effects into bytes, write once."""
        self._flush_scheduled = False
        if self.read_since_flush:
            readers, self.read_since_flush = self.read_since_flush, []
            for reader in readers:
                reader.flushed()
        broker = self.broker
        records = self.take_records()
        sync_first = 0  # deliveries wait for this sync (their delivery counts go first)
        if records:
            seq = self.persistence.append(records)
            if DeliveryCounted in map(type, records):  # C-level scan, no generator
                sync_first = seq
        effects = broker.take_effects()
        # Auto-ack removals, by message id: each waits for its delivery's bytes.
        unsent = {r.id: r for r in broker.take_sent_removals()} if broker.sent_removals else None
        if self.close_requests:
            effects += self.close_requests
            self.close_requests = []
        sessions = self.sessions
        if broker.warnings:
            for conn_id, text in broker.take_warnings():
                warned = sessions.get(conn_id) if conn_id is not None else None
                if warned is not None:
                    log.warning("%s (connection %d from %s)", text, conn_id, warned.peer)
                else:
                    log.warning("%s", text)
        dirty, delivered_ts = carry_out_effects(self, effects, unsent)
        if unsent:  # other protocols' deliveries, and those not written at all
            self.removals_written(list(unsent.values()))
        if delivered_ts:
            self.metrics.observe_deliveries(time.time() * 1000.0, delivered_ts)
        dirty.update(self.dirty)
        self.dirty.clear()
        for session in dirty:
            if sync_first:
                session.write_after_sync(sync_first)
            else:
                session.write_now()

    def removals_written(self, removals: list[Record]) -> None:
        """Auto-ack removals whose deliveries went to the transport: journal
        them once the loop has written those bytes, so a sync of a removal is
        never durable while its MESSAGE is still in the process (a crash then
        would lose it). uvloop writes a pass's output after the pass's ready
        callbacks and I/O; a flush run from a timer comes before the ready
        callbacks of its pass, so two rounds of ready callbacks are always
        past that write."""
        if not self._written_removals:
            self.loop.call_soon(self._removals_one_round_on)
        self._written_removals += removals

    def _removals_one_round_on(self) -> None:
        if not self._removals_due:
            self.loop.call_soon(self._journal_written_removals)
        self._removals_due += self._written_removals
        self._written_removals = []

    def _journal_written_removals(self) -> None:
        removals, self._removals_due = self._removals_due, []
        if removals:
            self.persistence.append(removals)

    def encode_lossy(
        self, session: StompSession, eff: Deliver, headers: dict[str, str], body: bytes
    ) -> bytes | None:
        """MESSAGE bytes for a message the consumer's STOMP version cannot carry
        as it is: the headers it cannot carry are left out and named in the
        frame (``encode_message_lossy``). None if even that fails: then this
        consumer's connection is closed and its unacked messages go back."""
        msg = eff.message
        try:
            data, dropped = session.conn.send_message_lossy(
                msg.destination, eff.ack_id, eff.sub_id, eff.ack_id, headers, body
            )
        except Exception:  # a bug must not cost the other consumers their frames
            log.exception(
                "cannot encode message %d of queue %r for connection %d from %s",
                msg.id,
                msg.queue,
                session.conn_id,
                session.peer,
            )
            session.shutdown(f"message {msg.id} could not be encoded; see the broker log")
            return None
        level = logging.DEBUG if session in self._lossy_logged else logging.WARNING
        self._lossy_logged.add(session)
        log.log(
            level,
            "message %d of queue %r delivered to connection %d from %s without "
            "headers STOMP %s cannot carry: %s",
            msg.id,
            msg.queue,
            session.conn_id,
            session.peer,
            session.conn.version or "1.0",
            ", ".join(map(repr, dropped)) or "(none)",
        )
        return data

    def _schedule_tick(self, delay: float) -> None:
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self._tick_handle = self.loop.call_later(max(0.0, delay), self._tick)

    def _tick(self) -> None:
        now = time.time()
        deadline = self.broker.tick(now)
        self.flush()
        delay = TICK_INTERVAL if deadline is None else min(TICK_INTERVAL, deadline - now)
        self._schedule_tick(delay)

    def info(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "uptime_s": round(time.time() - self.started_at, 3),
            "listeners": {k: f"{h}:{p}" for k, (h, p) in self.addresses.items()},
            "journal": self.journal_info(),
            "connections": len(self.sessions),
            "pid": os.getpid(),
        }

    def journal_info(self) -> dict[str, Any]:
        stats = getattr(self.store, "stats", None)
        info: dict[str, Any] = {"kind": type(self.store).__name__}
        if callable(stats):
            try:
                info.update(stats())
            except Exception:  # stats are best effort; never fail a read
                log.debug("journal stats failed", exc_info=True)
        if self.persistence is not None:
            info["syncs"] = self.persistence.sync_count
            info["syncs_io_uring"] = self.persistence.ring_syncs  # the rest: the sync thread
        return info


async def serve(config: Config, *, ready: Any = None) -> int:
    """Run until SIGTERM/SIGINT; returns the process exit code."""
    server = BrokerServer(config)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if server.cluster is not None:  # ready means joined: status then shows a member
        await server.cluster.wait_joined(stop)
    if ready is not None and not stop.is_set():
        ready(server)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    return 0


def run(config: Config, *, ready: Any = None) -> int:
    # SHOAL_NO_UVLOOP=1: the stdlib loop even where uvloop is installed (to measure it).
    if os.environ.get("SHOAL_NO_UVLOOP", "").strip().lower() not in ("1", "true", "yes", "on"):
        try:
            import uvloop
        except ImportError:  # optional speed-up
            pass
        else:
            return uvloop.run(serve(config, ready=ready))
    return asyncio.run(serve(config, ready=ready))
