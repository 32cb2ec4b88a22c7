"""The asyncio client: the same API as the blocking one, with ``await``.

::

    import shoal.client.aio

    async with shoal.client.aio.connect("stomp://127.0.0.1:61613") as c:
        await c.send("/queue/orders", b"buy 10", group="AAPL", receipt=True)
        async for msg in c.subscribe("/queue/orders", ack="client-individual"):
            print(msg.group, msg.body)
            await msg.ack()

``connect(url)`` returns an unconnected :class:`AsyncClient` that connects
when awaited (``c = await connect(url)``) or entered (``async with``). A
reader task turns frames into messages and completes receipts; a heart-beat
task keeps the connection alive and notices a silent broker. Everything
runs on the loop that connected; the client is not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Generator, Mapping
from typing import Any

from shoal.client._core import (
    CLOSED,
    CLOSING,
    DEFAULT_GROUP,
    NEW,
    OPEN,
    RECONNECTING,
    RECV_BYTES,
    Body,
    Ids,
    Message,
    Producer,
    Request,
    check_can_send,
    connect_frame,
    default_group,
    handshake_event,
    handshake_failure,
    os_reason,
    read_frames,
    resubscribe_data,
    send_frame,
    settle_frame,
    subscribe_frame,
    tx_id,
)
from shoal.client.errors import (
    ClientError,
    ClientTimeout,
    ConnectFailed,
    ConnectionLost,
    ServerError,
)
from shoal.client.options import ClientOptions, parse_url
from shoal.errors import LocalProtocolError, RemoteProtocolError
from shoal.protocol.stomp import (
    NEED_DATA,
    Abort,
    Begin,
    Commit,
    Connected,
    Disconnect,
    Event,
    Receipt,
    Role,
    StompConnection,
    Unsubscribe,
)
from shoal.protocol.stomp import Message as MessageFrame

__all__ = ["AsyncClient", "AsyncSubscription", "AsyncTransaction", "Producer", "connect"]

log = logging.getLogger("shoal.client")

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def connect(url: str | None = None, **options: Any) -> AsyncClient:
    """An :class:`AsyncClient` for ``url``; ``await`` it or ``async with`` it.

    URL and options as for :func:`shoal.client.connect`.
    """
    return AsyncClient(url, **options)


async def handshake(options: ClientOptions) -> tuple[Stream, StompConnection, Connected]:
    address = options.address
    ctx = options.ssl_context()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                options.host,
                options.port,
                ssl=ctx,
                server_hostname=options.host if ctx is not None else None,
                limit=RECV_BYTES,
            ),
            options.timeout,
        )
    except TimeoutError:
        raise ConnectFailed(address, "timed out") from None
    except OSError as exc:
        raise ConnectFailed(address, os_reason(exc)) from None
    conn = StompConnection(Role.CLIENT)
    try:
        writer.write(conn.send(connect_frame(options)))
        async with asyncio.timeout(options.timeout):
            while (event := conn.next_event()) is NEED_DATA:
                conn.receive_data(await reader.read(RECV_BYTES), time.monotonic())
            return (reader, writer), conn, handshake_event(event, address)
    except BaseException as exc:
        writer.close()
        failure = handshake_failure(exc, options)
        if failure is exc:
            raise
        raise failure from None


class AsyncClient:
    """A STOMP connection to Shoal for asyncio programs.

    Methods mirror :class:`shoal.client.Client` and are coroutines, except
    :meth:`subscribe` and :meth:`transaction`, whose results are both
    awaitable and usable directly with ``async for`` / ``async with``.
    """

    def __init__(self, url: str | None = None, **options: Any) -> None:
        self.options: ClientOptions = parse_url(url, **options)
        self.group: str | None = default_group(self.options)
        self.version: str | None = None
        self.heartbeat: tuple[int, int] = (0, 0)
        self.server: str | None = None
        self.session: str | None = None
        self.last_error: ServerError | None = None
        self.reconnects = 0
        self._ids = Ids()
        self._state = NEW
        self._conn: StompConnection | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._drain_lock = asyncio.Lock()
        self._generation = 0
        self._error: ClientError | None = None
        self._lost: ClientError | None = None
        self._receipts: dict[str, asyncio.Future[None]] = {}
        self._subs: dict[str, AsyncSubscription] = {}
        self._opened = asyncio.Event()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # --- life cycle ----------------------------------------------------------

    async def connect(self) -> AsyncClient:
        """Open the connection and wait for CONNECTED; returns ``self``."""
        if self._state != NEW:
            raise ClientError(f"this client is already {self._state}")
        self._state = CLOSED  # until the handshake succeeded
        stream, conn, connected = await handshake(self.options)
        self._install(stream, conn, connected)
        self._tasks = [
            asyncio.create_task(self._read_loop(), name="shoal-client-reader"),
            asyncio.create_task(self._beat_loop(), name="shoal-client-heart-beat"),
        ]
        return self

    def _install(self, stream: Stream, conn: StompConnection, connected: Connected) -> None:
        self._reader, self._writer = stream
        self._conn = conn
        self.version = conn.version
        self.heartbeat = conn.heart_beat
        self.server = connected.server
        self.session = connected.session
        self._lost = None
        self._state = OPEN
        self._opened.set()
        self._wake.set()

    def __await__(self) -> Generator[Any, None, AsyncClient]:
        return self.connect().__await__()

    async def __aenter__(self) -> AsyncClient:
        if self._state == NEW:
            await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        return self._state == OPEN

    async def close(self, timeout: float = 5.0) -> None:
        """DISCONNECT (waiting for its receipt) and stop the tasks. Idempotent."""
        state = self._state
        if state in (CLOSED, CLOSING):
            if state == CLOSED and self._tasks:
                await self._join(timeout)
            return
        self._state = CLOSING
        self._stop.set()
        self._wake_subs()
        if state == OPEN:
            with contextlib.suppress(ClientError):
                await self._request(
                    Disconnect(), "DISCONNECT", min(timeout, self.options.timeout), closing=True
                )
        if self._writer is not None:
            self._writer.close()
        self._wake.set()
        await self._join(timeout)
        self._state = CLOSED
        self._fail_receipts(ConnectionLost("the client was closed"))
        for sub in self._subs.values():
            sub._close_local()

    async def _join(self, timeout: float) -> None:
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current and not t.done()]
        self._tasks = []
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)

    def __repr__(self) -> str:
        return f"<shoal.client.aio.AsyncClient {self.options.url()} {self._state}>"

    # --- sending -------------------------------------------------------------

    async def send(
        self,
        destination: str,
        body: Body = b"",
        *,
        headers: Mapping[str, str] | None = None,
        group: str | None = DEFAULT_GROUP,
        group_seq: int | None = None,
        persistent: bool | None = None,
        receipt: bool = False,
        content_type: str | None = None,
        transaction: Any = None,
    ) -> None:
        """Send one message; arguments as :meth:`shoal.client.Client.send`."""
        event = send_frame(
            destination,
            body,
            headers,
            group=self.group if group is DEFAULT_GROUP else group,
            group_seq=group_seq,
            persistent=persistent,
            content_type=content_type,
            transaction=tx_id(transaction),
        )
        if not receipt:
            await self._write(event)
            return
        while True:
            try:
                await self._request(event, f"SEND to {destination}")
                return
            except ConnectionLost:
                if not self.options.reconnect or transaction is not None or self._error:
                    raise

    def producer(
        self, *, group: str | None = None, auto_group: bool | None = None, **kw: Any
    ) -> Producer:
        """A :class:`~shoal.client.Producer` on this connection (``await p.send(...)``)."""
        return Producer(self, group=group, auto_group=auto_group, **kw)

    # --- subscriptions -------------------------------------------------------

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        prefetch: int | None = None,
        headers: Mapping[str, str] | None = None,
        id: str | None = None,  # noqa: A002
        receipt: bool = True,
    ) -> AsyncSubscription:
        """A subscription, subscribed when first awaited, iterated or entered::

            sub = await c.subscribe("/queue/q", ack="client")
            async for msg in c.subscribe("/queue/q"): ...
            async with c.subscribe("/queue/q") as sub: ...

        Arguments as :meth:`shoal.client.Client.subscribe`.
        """
        sub_id = id or self._ids.subscription()
        if sub_id in self._subs:
            raise ClientError(f"subscription id {sub_id!r} is already in use")
        subscribe_frame(sub_id, destination, ack, prefetch, headers, None)  # validate now
        return AsyncSubscription(
            self, sub_id, destination, ack, prefetch, dict(headers or {}), receipt
        )

    async def _subscribe(self, sub: AsyncSubscription) -> None:
        frame = subscribe_frame(sub.id, sub.destination, sub.ack, sub.prefetch, sub.headers, None)
        self._subs[sub.id] = sub
        try:
            if sub._want_receipt:
                await self._request(frame, f"SUBSCRIBE to {sub.destination}")
            else:
                await self._write(frame)
        except ConnectionLost:
            if not self.options.reconnect or self._error:
                self._subs.pop(sub.id, None)
                raise
            await self._await_open()
        except BaseException:
            self._subs.pop(sub.id, None)
            raise

    # --- transactions --------------------------------------------------------

    def transaction(self) -> AsyncTransaction:
        """A transaction; BEGIN is sent when it is awaited or entered::

        async with c.transaction() as tx:
            await tx.send("/queue/out", b"x")
            await tx.ack(msg)
        """
        return AsyncTransaction(self, self._ids.transaction())

    # --- internals: writing --------------------------------------------------

    def _check(self, closing: bool = False) -> None:
        check_can_send(
            self._state,
            self._error,
            self.options.address,
            closing=closing,
            not_connected="not connected: await connect() first",
        )

    async def _await_open(self) -> None:
        if self._state != RECONNECTING:
            return
        try:
            async with asyncio.timeout(self.options.timeout):
                while self._state == RECONNECTING and self._error is None:
                    self._opened.clear()
                    await self._opened.wait()
        except TimeoutError:
            raise ConnectionLost(
                f"not connected to {self.options.address}: still reconnecting after "
                f"{self.options.timeout:g} s"
            ) from None

    async def _write(self, event: Event, closing: bool = False) -> None:
        if not closing:
            await self._await_open()
        self._check(closing)
        conn, writer = self._conn, self._writer
        assert conn is not None and writer is not None
        try:
            data = conn.send(event)
        except LocalProtocolError:
            raise (
                self._error
                or self._lost
                or ConnectionLost(f"connection to {self.options.address} is closing")
            ) from None
        try:
            writer.write(data)
            if writer.transport.get_write_buffer_size() > 64 * 1024:
                async with self._drain_lock:
                    await writer.drain()
        except (OSError, RuntimeError) as exc:
            writer.close()
            raise ConnectionLost(
                f"connection to {self.options.address} lost: {os_reason(exc)}"
            ) from None

    async def _request(
        self, event: Request, what: str, timeout: float | None = None, closing: bool = False
    ) -> None:
        """Send ``event`` with a new receipt id and wait for the RECEIPT."""
        event.receipt = rid = self._ids.receipt()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._receipts[rid] = fut
        try:
            await self._write(event, closing)
            timeout = self.options.timeout if timeout is None else timeout
            try:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
            except TimeoutError:
                raise ClientTimeout(f"no RECEIPT for {what} within {timeout:g} s") from None
        finally:
            self._receipts.pop(rid, None)

    async def _settle(self, kind: str, msg: Message, transaction: Any, receipt: bool) -> None:
        event = settle_frame(kind, msg, transaction, self._generation, self._subs)
        if event is None:
            return
        if receipt:
            await self._request(event, f"{kind.upper()} of {msg.message_id}")
        else:
            await self._write(event)
        msg.settled = True

    # --- internals: the reader task ------------------------------------------

    async def _read_loop(self) -> None:
        while True:
            reader, writer, conn = self._reader, self._writer, self._conn
            if reader is None or writer is None or conn is None:
                return
            try:
                reason = await self._read_connection(reader, conn)
            except Exception as exc:  # a bug here must not leave callers waiting forever
                log.exception("shoal client reader failed")
                reason = ConnectionLost(f"client reader failed: {exc!r}")
            if not self._connection_ended(writer, reason):
                return
            if not await self._reconnect():
                return

    async def _read_connection(
        self, reader: asyncio.StreamReader, conn: StompConnection
    ) -> ClientError:
        address = self.options.address
        while True:
            try:
                data = await reader.read(RECV_BYTES)
            except (OSError, asyncio.IncompleteReadError) as exc:
                data = b""
                if self._lost is None and self._state not in (CLOSING, CLOSED):
                    self._lost = ConnectionLost(f"connection to {address} lost: {os_reason(exc)}")
            ended = read_frames(conn, data, time.monotonic(), self._dispatch, address)
            if isinstance(ended, ServerError):
                self.last_error = self._lost = ended
                log.info("%s", ended)
            if ended is not None:
                return self._lost or ended

    def _dispatch(self, event: Any) -> None:
        """Handle one MESSAGE or RECEIPT."""
        cls = type(event)
        if cls is MessageFrame:
            sub = self._subs.get(event.subscription or "")
            if sub is not None and not sub._closed:
                sub._pending.append(Message(event, self, sub.ack, self._generation))
                sub._ready.set()
        elif cls is Receipt:
            fut = self._receipts.get(event.receipt_id)
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _connection_ended(self, writer: asyncio.StreamWriter, reason: ClientError) -> bool:
        writer.close()
        self._reader = self._writer = None
        self._conn = None
        self._generation += 1
        self._fail_receipts(reason)
        self._wake.set()
        if self._state in (CLOSING, CLOSED):
            return False
        if self.options.reconnect:
            log.warning("%s; reconnecting", reason)
            self._state = RECONNECTING
            self._opened.clear()
            for sub in self._subs.values():
                if sub.ack != "auto":
                    sub._pending.clear()
            return True
        self._error = reason
        self._state = CLOSED
        self._opened.set()
        self._wake_subs()
        return False

    def _fail_receipts(self, error: ClientError) -> None:
        for fut in self._receipts.values():
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # retrieved: no "never retrieved" warning if nobody waits

    def _wake_subs(self) -> None:
        for sub in self._subs.values():
            sub._ready.set()

    async def _reconnect(self) -> bool:
        options = self.options
        delay = options.reconnect_delay
        failures = 0
        while not self._stop.is_set():
            try:
                stream, conn, connected = await handshake(options)
            except ClientError as exc:
                failures += 1
                if 0 <= options.reconnect_attempts <= failures:
                    if self._state == RECONNECTING:
                        self._error = ConnectionLost(
                            f"gave up reconnecting to {options.address} after "
                            f"{failures} attempts: {exc}"
                        )
                        self._state = CLOSED
                        self._opened.set()
                        self._wake_subs()
                    return False
                log.info(
                    "reconnect to %s failed (%s); next try in %.2f s", options.address, exc, delay
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                delay = min(delay * 2, options.reconnect_max_delay)
                continue
            if self._state != RECONNECTING:
                stream[1].close()
                return False
            data = resubscribe_data(conn, self._subs.values())
            if data:
                stream[1].write(data)
            self.reconnects += 1
            self._install(stream, conn, connected)
            log.info("reconnected to %s", options.address)
            return True
        return False

    # --- internals: the heart-beat task --------------------------------------

    async def _beat_loop(self) -> None:
        while self._state not in (CLOSED, CLOSING):
            conn = self._conn if self._state == OPEN else None
            deadline = conn.get_timer() if conn is not None else None
            self._wake.clear()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            except TimeoutError:
                pass
            if conn is None or conn is not self._conn or self._state != OPEN:
                continue
            writer = self._writer
            try:
                data = conn.handle_timer(time.monotonic())
            except RemoteProtocolError as exc:
                self._lost = ConnectionLost(
                    f"the broker at {self.options.address} went silent: {exc}"
                )
                if writer is not None:
                    writer.transport.abort()
                continue
            if data and writer is not None:
                writer.write(data)


class AsyncSubscription:
    """Messages for one SUBSCRIBE (asyncio). ``await`` it, ``async for`` it
    or ``async with`` it; :meth:`receive` takes a timeout."""

    def __init__(
        self,
        client: AsyncClient,
        sub_id: str,
        destination: str,
        ack: str,
        prefetch: int | None,
        headers: dict[str, str],
        want_receipt: bool,
    ) -> None:
        self.client = client
        self.id = sub_id
        self.destination = destination
        self.ack = ack
        self.prefetch = prefetch
        self.headers = headers
        self._want_receipt = want_receipt
        self._pending: deque[Message] = deque()
        self._ready = asyncio.Event()
        self._closed = False
        self._started: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    async def start(self) -> AsyncSubscription:
        """Send SUBSCRIBE (once) and wait for its receipt."""
        if self._started is None:
            self._started = asyncio.ensure_future(self.client._subscribe(self))
        await asyncio.shield(self._started)
        return self

    def __await__(self) -> Generator[Any, None, AsyncSubscription]:
        return self.start().__await__()

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next message; ``None`` after ``timeout`` seconds or once closed."""
        await self.start()
        client = self.client
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._pending:
                return self._pending.popleft()
            if client._error is not None:
                raise client._error
            if self._closed or client._state in (CLOSED, CLOSING):
                return None
            self._ready.clear()
            if deadline is None:
                await self._ready.wait()
            else:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._ready.wait(), remaining)
                except TimeoutError:
                    return None

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while (msg := await self.receive()) is not None:
            yield msg

    def _close_local(self) -> None:
        self._closed = True
        if self.ack != "auto":
            self._pending.clear()
        self._ready.set()

    async def unsubscribe(self, *, receipt: bool = True) -> None:
        """Stop the subscription (see :meth:`shoal.client.Subscription.unsubscribe`)."""
        if self._closed:
            return
        client = self.client
        self._close_local()
        try:
            if client._state == OPEN and self._started is not None:
                event = Unsubscribe(self.id, {}, None)
                if receipt:
                    await client._request(event, f"UNSUBSCRIBE from {self.destination}")
                else:
                    await client._write(event)
        finally:
            client._subs.pop(self.id, None)

    close = unsubscribe

    async def __aenter__(self) -> AsyncSubscription:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(ConnectionLost):
            await self.unsubscribe()

    def __repr__(self) -> str:
        return f"<AsyncSubscription {self.id} {self.destination} ack={self.ack}>"


class AsyncTransaction:
    """A STOMP transaction (asyncio); see :meth:`AsyncClient.transaction`."""

    def __init__(self, client: AsyncClient, tx_id: str) -> None:
        self.client = client
        self.id = tx_id
        self.begun = False
        self.done = False

    async def begin(self) -> AsyncTransaction:
        if not self.begun:
            self.begun = True
            await self.client._write(Begin(self.id))
        return self

    def __await__(self) -> Generator[Any, None, AsyncTransaction]:
        return self.begin().__await__()

    async def send(self, destination: str, body: Body = b"", **kw: Any) -> None:
        await self.begin()
        await self.client.send(destination, body, transaction=self, **kw)

    async def ack(self, msg: Message) -> None:
        await self.begin()
        await self.client._settle("ack", msg, self, False)

    async def nack(self, msg: Message) -> None:
        await self.begin()
        await self.client._settle("nack", msg, self, False)

    async def commit(self, *, receipt: bool = True) -> None:
        await self._finish(Commit, receipt)

    async def abort(self, *, receipt: bool = True) -> None:
        await self._finish(Abort, receipt)

    async def _finish(self, cls: type[Commit] | type[Abort], receipt: bool) -> None:
        if self.done:
            raise ClientError(f"transaction {self.id} is already finished")
        await self.begin()
        self.done = True
        event = cls(self.id)
        if receipt:
            await self.client._request(event, f"{event.command} of {self.id}")
        else:
            await self.client._write(event)

    async def __aenter__(self) -> AsyncTransaction:
        return await self.begin()

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.done:
            return
        if exc_type is None:
            await self.commit()
        else:
            with contextlib.suppress(ClientError):
                await self.abort()

    def __repr__(self) -> str:
        return f"<AsyncTransaction {self.id}{' done' if self.done else ''}>"
