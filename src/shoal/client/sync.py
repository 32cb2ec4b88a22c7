"""The blocking client: one socket, a reader thread and a heart-beat thread.

::

    import shoal.client

    with shoal.client.connect("stomp://127.0.0.1:61613") as c:
        c.send("/queue/orders", b"buy 10", group="AAPL", persistent=True, receipt=True)
        sub = c.subscribe("/queue/orders", ack="client-individual", prefetch=100)
        for msg in sub:
            print(msg.group, msg.body)
            msg.ack()

Every method may be called from any thread. The reader thread turns frames
into :class:`~shoal.client.Message` objects queued on their subscription,
completes receipts and records ERROR frames; the heart-beat thread sends
heart-beats and notices a silent broker. An ERROR frame from the broker is
raised as :class:`~shoal.client.ServerError` by whatever waits next (the
receipt it names, ``receive()``, or the next call).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
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

__all__ = ["Client", "Subscription", "Transaction", "connect"]

log = logging.getLogger("shoal.client")

_PENDING = object()


def connect(url: str | None = None, **options: Any) -> Client:
    """Open a connection and return the connected :class:`Client`.

    ``url`` is ``stomp://user:pass@host:port?option=value`` (see
    :mod:`shoal.client.options` for every option); keyword ``options`` are
    :class:`~shoal.client.options.ClientOptions` fields and win over the URL,
    e.g. ``connect(url, reconnect=True, heartbeat=(0, 0))``. Use it as a
    context manager to close it::

        with connect("stomp://127.0.0.1:61613?autoGroup=true") as c:
            ...
    """
    return Client(url, **options).connect()


def handshake(options: ClientOptions) -> tuple[socket.socket, StompConnection, Connected]:
    """Open the socket (TLS if asked), send CONNECT, wait for CONNECTED."""
    address = options.address
    try:
        sock = socket.create_connection((options.host, options.port), timeout=options.timeout)
    except OSError as exc:
        raise ConnectFailed(address, os_reason(exc)) from None
    try:
        ctx = options.ssl_context()
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_hostname=options.host)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = StompConnection(Role.CLIENT)
        sock.sendall(conn.send(connect_frame(options)))
        while (event := conn.next_event()) is NEED_DATA:
            conn.receive_data(sock.recv(RECV_BYTES), time.monotonic())
        connected = handshake_event(event, address)
        sock.settimeout(None)
        return sock, conn, connected
    except BaseException as exc:
        sock.close()
        failure = handshake_failure(exc, options)
        if failure is exc:
            raise
        raise failure from None


class Client:
    """A STOMP connection to Shoal (or any STOMP 1.2 broker), blocking API.

    Create it with :func:`connect`, or ``Client(url).connect()``, or use
    ``with Client(url) as c:`` (connects on entry, closes on exit).

    Attributes once connected: ``options`` (the parsed URL), ``version`` (the
    STOMP version agreed), ``heartbeat`` (negotiated ``(send_ms,
    receive_ms)``), ``server``, ``session``, and ``last_error`` (the last
    ERROR frame, as a :class:`ServerError`, or ``None``).
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
        self._cond = threading.Condition()  # protocol object, receipts, subscriptions, state
        self._write_lock = threading.Lock()  # one writer at a time, frames in order
        self._state = NEW
        self._sock: socket.socket | None = None
        self._conn: StompConnection | None = None
        self._generation = 0
        self._error: ClientError | None = None  # terminal: raised by every later call
        self._lost: ClientError | None = None  # why the current connection is ending
        self._receipts: dict[str, Any] = {}
        self._subs: dict[str, Subscription] = {}
        self._wake = threading.Event()  # heart-beat thread: deadline changed or closing
        self._stop = threading.Event()  # reconnect back-off: the user closed
        self._threads: list[threading.Thread] = []

    # --- life cycle ----------------------------------------------------------

    def connect(self) -> Client:
        """Open the connection and wait for CONNECTED; returns ``self``.

        Raises :class:`ConnectFailed` (naming the address) if the broker
        cannot be reached, :class:`ServerError` if it refuses (e.g. code
        ``unauthenticated``), :class:`ClientTimeout` if it does not answer.
        """
        with self._cond:
            if self._state != NEW:
                raise ClientError(f"this client is already {self._state}")
        sock, conn, connected = handshake(self.options)
        with self._cond:
            self._install(sock, conn, connected)
        for target, name in ((self._read_loop, "reader"), (self._beat_loop, "heart-beat")):
            t = threading.Thread(target=target, name=f"shoal-client-{name}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def _install(self, sock: socket.socket, conn: StompConnection, connected: Connected) -> None:
        self._sock, self._conn = sock, conn
        self.version = conn.version
        self.heartbeat = conn.heart_beat
        self.server = connected.server
        self.session = connected.session
        self._lost = None
        self._state = OPEN
        self._cond.notify_all()
        self._wake.set()

    @property
    def connected(self) -> bool:
        """True while the connection is open (not while reconnecting)."""
        return self._state == OPEN

    def close(self, timeout: float = 5.0) -> None:
        """Disconnect politely (DISCONNECT with a receipt, so everything sent
        before was handled) and stop the threads. Idempotent."""
        with self._cond:
            state = self._state
            if state in (CLOSED, CLOSING):
                return
            self._state = CLOSING
            self._cond.notify_all()
        self._stop.set()
        if state == OPEN:
            with contextlib.suppress(ClientError):
                self._request(
                    Disconnect(), "DISCONNECT", min(timeout, self.options.timeout), closing=True
                )
        with self._cond:
            sock = self._sock
        self._shutdown(sock)
        self._wake.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)
        with self._cond:
            self._state = CLOSED
            self._fail_receipts(ConnectionLost("the client was closed"))
            for sub in self._subs.values():
                sub._closed = True
            self._cond.notify_all()

    def __enter__(self) -> Client:
        if self._state == NEW:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<shoal.client.Client {self.options.url()} {self._state}>"

    # --- sending -------------------------------------------------------------

    def send(
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
        """Send one message.

        ``body`` is bytes or str (sent as UTF-8). ``group`` sets
        ``JMSXGroupID``; left out, the connection's group applies (its
        ``?groupID=`` or its own random one with ``?autoGroup=true``), and
        ``group=None`` sends ungrouped. ``group_seq`` sets ``JMSXGroupSeq``
        (negative closes the group). ``persistent=True`` asks the broker to
        journal it. ``receipt=True`` blocks until the broker's RECEIPT, which
        Shoal sends only after the message is stored (fsynced, when
        persistent); an ERROR for it raises :class:`ServerError`.
        ``transaction`` is a :class:`Transaction` (or its id): the message
        enters its queue at commit.

        With ``?reconnect=true``, a send with a receipt that loses its
        connection before the receipt is sent again after reconnecting (at
        least once: the broker may then hold it twice).
        """
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
            self._write(event)
            return
        while True:
            try:
                self._request(event, f"SEND to {destination}")
                return
            except ConnectionLost:
                if not self.options.reconnect or transaction is not None or self._error:
                    raise
                log.info("resending to %s after the connection was lost", destination)

    def producer(
        self, *, group: str | None = None, auto_group: bool | None = None, **kw: Any
    ) -> Producer:
        """A :class:`Producer` on this connection (see there)."""
        return Producer(self, group=group, auto_group=auto_group, **kw)

    # --- subscriptions -------------------------------------------------------

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        prefetch: int | None = None,
        headers: Mapping[str, str] | None = None,
        id: str | None = None,  # noqa: A002 - the STOMP header's name
        receipt: bool = True,
    ) -> Subscription:
        """Subscribe; messages queue up on the returned :class:`Subscription`.

        ``ack``: ``auto`` (the broker settles on delivery), ``client``
        (``msg.ack()`` settles it and every earlier one) or
        ``client-individual`` (one at a time). ``prefetch`` is how many
        unsettled messages the broker may push (``prefetch-count``; broker
        default 1000). ``headers`` go on the SUBSCRIBE frame as they are
        (e.g. ``{"activemq.exclusive": "true"}``); queue settings may be
        given as destination parameters
        (``/queue/orders?group-mode=shared``). By default this waits for the
        broker's receipt, so the subscription is live when it returns.
        """
        sub_id = id or self._ids.subscription()
        sub = Subscription(self, sub_id, destination, ack, prefetch, dict(headers or {}))
        frame = subscribe_frame(sub_id, destination, ack, prefetch, headers, None)
        with self._cond:
            if sub_id in self._subs:
                raise ClientError(f"subscription id {sub_id!r} is already in use")
            self._subs[sub_id] = sub
        try:
            if receipt:
                self._request(frame, f"SUBSCRIBE to {destination}")
            else:
                self._write(frame)
        except ConnectionLost:
            if not self.options.reconnect or self._error:
                self._drop_sub(sub_id)
                raise
            self._await_open()  # the reconnect subscribed it again
        except BaseException:
            self._drop_sub(sub_id)
            raise
        return sub

    def _drop_sub(self, sub_id: str) -> None:
        with self._cond:
            self._subs.pop(sub_id, None)

    # --- transactions --------------------------------------------------------

    def transaction(self) -> Transaction:
        """Begin a transaction (BEGIN is sent now).

        ::

            with c.transaction() as tx:
                tx.send("/queue/out", b"x")
                tx.ack(msg)

        Leaving the block commits (and waits for the receipt); an exception
        aborts. Sends enter their queues at commit, in send order; an abort
        returns the acked messages to the heads of their groups.
        """
        tx = Transaction(self, self._ids.transaction())
        self._write(Begin(tx.id))
        return tx

    begin = transaction

    # --- internals: writing --------------------------------------------------

    def _check(self, closing: bool = False) -> None:
        """Raise if frames cannot be sent now (called with the lock held)."""
        check_can_send(
            self._state,
            self._error,
            self.options.address,
            closing=closing,
            not_connected="not connected: call connect() first",
        )

    def _await_open(self, timeout: float | None = None) -> None:
        """Wait while reconnecting (up to the connection timeout)."""
        timeout = self.options.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._state == RECONNECTING and self._error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ConnectionLost(
                        f"not connected to {self.options.address}: still reconnecting "
                        f"after {timeout:g} s"
                    )
                self._cond.wait(remaining)

    def _write(self, event: Event, closing: bool = False) -> None:
        if not closing:
            self._await_open()
        with self._write_lock:
            with self._cond:
                self._check(closing)
                conn, sock = self._conn, self._sock
                assert conn is not None and sock is not None
                try:
                    data = conn.send(event)
                except LocalProtocolError:
                    # The protocol object left OPEN: an ERROR or EOF is being read.
                    raise (
                        self._error
                        or self._lost
                        or ConnectionLost(f"connection to {self.options.address} is closing")
                    ) from None
            try:
                sock.sendall(data)
            except OSError as exc:
                self._shutdown(sock)
                raise ConnectionLost(
                    f"connection to {self.options.address} lost: {os_reason(exc)}"
                ) from None

    def _request(
        self, event: Request, what: str, timeout: float | None = None, closing: bool = False
    ) -> None:
        """Send ``event`` with a new receipt id and wait for the RECEIPT."""
        event.receipt = rid = self._ids.receipt()
        with self._cond:
            self._receipts[rid] = _PENDING
        try:
            self._write(event, closing)
        except BaseException:
            with self._cond:
                self._receipts.pop(rid, None)
            raise
        timeout = self.options.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            try:
                while (result := self._receipts[rid]) is _PENDING:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ClientTimeout(f"no RECEIPT for {what} within {timeout:g} s")
                    self._cond.wait(remaining)
            finally:
                self._receipts.pop(rid, None)
        if isinstance(result, BaseException):
            raise result

    def _settle(self, kind: str, msg: Message, transaction: Any, receipt: bool) -> None:
        with self._cond:
            event = settle_frame(kind, msg, transaction, self._generation, self._subs)
        if event is None:
            return
        if receipt:
            self._request(event, f"{kind.upper()} of {msg.message_id}")
        else:
            self._write(event)
        msg.settled = True

    # --- internals: the reader thread ----------------------------------------

    def _read_loop(self) -> None:
        while True:
            with self._cond:
                sock, conn = self._sock, self._conn
            if sock is None or conn is None:
                return
            try:
                reason = self._read_connection(sock, conn)
            except Exception as exc:  # a bug here must not leave callers waiting forever
                log.exception("shoal client reader failed")
                reason = ConnectionLost(f"client reader failed: {exc!r}")
            if not self._connection_ended(sock, reason):
                return
            if not self._reconnect():
                return

    def _read_connection(self, sock: socket.socket, conn: StompConnection) -> ClientError:
        """Read frames until this connection ends; return why it ended."""
        address = self.options.address
        while True:
            try:
                data = sock.recv(RECV_BYTES)
            except OSError as exc:
                data = b""
                with self._cond:
                    if self._lost is None and self._state not in (CLOSING, CLOSED):
                        self._lost = ConnectionLost(
                            f"connection to {address} lost: {os_reason(exc)}"
                        )
            with self._cond:
                try:
                    ended = read_frames(conn, data, time.monotonic(), self._dispatch, address)
                    if isinstance(ended, ServerError):
                        self.last_error = self._lost = ended
                        log.info("%s", ended)
                    if ended is not None:
                        return self._lost or ended
                finally:
                    self._cond.notify_all()

    def _dispatch(self, event: Event | Any) -> None:
        """Handle one MESSAGE or RECEIPT (lock held)."""
        cls = type(event)  # ``cls is C`` makes ``event`` a C, which mypy cannot follow
        if cls is MessageFrame:
            sub = self._subs.get(event.subscription or "")  # type: ignore[union-attr]
            if sub is not None and not sub._closed:
                sub._pending.append(Message(event, self, sub.ack, self._generation))  # type: ignore[arg-type]
        elif cls is Receipt:
            if event.receipt_id in self._receipts:  # type: ignore[union-attr]
                self._receipts[event.receipt_id] = True  # type: ignore[union-attr]

    def _connection_ended(self, sock: socket.socket, reason: ClientError) -> bool:
        """Tidy up after a connection ended; True if we should reconnect."""
        self._shutdown(sock, close=True)
        with self._cond:
            self._sock = self._conn = None
            self._generation += 1
            self._fail_receipts(reason)
            if self._state in (CLOSING, CLOSED):
                self._cond.notify_all()
                return False
            if self.options.reconnect:
                log.warning("%s; reconnecting", reason)
                self._state = RECONNECTING
                for sub in self._subs.values():
                    if sub.ack != "auto":  # unsettled: the broker delivers them again
                        sub._pending.clear()
                self._cond.notify_all()
                return True
            self._error = reason
            self._state = CLOSED
            for sub in self._subs.values():
                sub._closed = True
            self._cond.notify_all()
        self._wake.set()
        return False

    def _fail_receipts(self, error: ClientError) -> None:
        for rid, value in self._receipts.items():
            if value is _PENDING:
                self._receipts[rid] = error

    def _reconnect(self) -> bool:
        options = self.options
        delay = options.reconnect_delay
        failures = 0
        while not self._stop.is_set():
            try:
                sock, conn, connected = handshake(options)
            except ClientError as exc:
                failures += 1
                if 0 <= options.reconnect_attempts <= failures:
                    with self._cond:
                        if self._state == RECONNECTING:
                            self._error = ConnectionLost(
                                f"gave up reconnecting to {options.address} after "
                                f"{failures} attempts: {exc}"
                            )
                            self._state = CLOSED
                            for sub in self._subs.values():
                                sub._closed = True
                            self._cond.notify_all()
                    return False
                log.info(
                    "reconnect to %s failed (%s); next try in %.2f s", options.address, exc, delay
                )
                if self._stop.wait(delay):
                    return False
                delay = min(delay * 2, options.reconnect_max_delay)
                continue
            with self._write_lock, self._cond:
                if self._state != RECONNECTING:
                    self._shutdown(sock, close=True)
                    return False
                try:
                    data = resubscribe_data(conn, self._subs.values())
                    if data:
                        sock.sendall(data)
                except OSError:
                    self._shutdown(sock, close=True)
                    continue
                self.reconnects += 1
                self._install(sock, conn, connected)
            log.info("reconnected to %s", options.address)
            return True
        return False

    @staticmethod
    def _shutdown(sock: socket.socket | None, close: bool = False) -> None:
        if sock is None:
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        if close:
            with contextlib.suppress(OSError):
                sock.close()

    # --- internals: the heart-beat thread ------------------------------------

    def _beat_loop(self) -> None:
        while True:
            with self._cond:
                if self._state in (CLOSED, CLOSING):
                    return
                conn = self._conn if self._state == OPEN else None
                deadline = conn.get_timer() if conn is not None else None
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._wake.wait(timeout):
                self._wake.clear()
                continue
            self._beat(conn)

    def _beat(self, conn: StompConnection | None) -> None:
        with self._write_lock:
            with self._cond:
                if conn is None or conn is not self._conn or self._state != OPEN:
                    return
                sock = self._sock
                try:
                    data = conn.handle_timer(time.monotonic())
                except RemoteProtocolError as exc:
                    self._lost = ConnectionLost(
                        f"the broker at {self.options.address} went silent: {exc}"
                    )
                    self._shutdown(sock)
                    return
            if data and sock is not None:
                try:
                    sock.sendall(data)
                except OSError:
                    self._shutdown(sock)


class Subscription:
    """Messages for one SUBSCRIBE, in arrival order.

    Iterate (``for msg in sub``) to receive until the subscription or the
    client closes, or call :meth:`receive` with a timeout. Leaving a ``with``
    block unsubscribes. ``id``, ``destination``, ``ack``, ``prefetch`` and
    ``headers`` are what was subscribed with.
    """

    def __init__(
        self,
        client: Client,
        sub_id: str,
        destination: str,
        ack: str,
        prefetch: int | None,
        headers: dict[str, str],
    ) -> None:
        self.client = client
        self.id = sub_id
        self.destination = destination
        self.ack = ack
        self.prefetch = prefetch
        self.headers = headers
        self._pending: deque[Message] = deque()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message; ``None`` after ``timeout`` seconds (``None``:
        wait as long as it takes) or once the subscription or client is
        closed. Raises the connection's error (e.g. :class:`ServerError`) if
        it failed."""
        client = self.client
        deadline = None if timeout is None else time.monotonic() + timeout
        with client._cond:
            while True:
                if self._pending:
                    return self._pending.popleft()
                if client._error is not None:
                    raise client._error
                if self._closed or client._state in (CLOSED, CLOSING, NEW):
                    return None
                if deadline is None:
                    client._cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    client._cond.wait(remaining)

    def __iter__(self) -> Iterator[Message]:
        while (msg := self.receive()) is not None:
            yield msg

    def unsubscribe(self, *, receipt: bool = True) -> None:
        """Stop the subscription. Unsettled messages go back to the broker,
        which delivers them again; ones still buffered here are dropped
        (``auto`` ones excepted, they stay readable)."""
        client = self.client
        with client._cond:
            if self._closed:
                return
            self._closed = True
            if self.ack != "auto":
                self._pending.clear()
            open_ = client._state == OPEN
            client._cond.notify_all()
        try:
            if open_:
                event = Unsubscribe(self.id, {}, None)
                if receipt:
                    client._request(event, f"UNSUBSCRIBE from {self.destination}")
                else:
                    client._write(event)
        finally:
            client._drop_sub(self.id)

    close = unsubscribe

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ConnectionLost):
            self.unsubscribe()

    def __repr__(self) -> str:
        return f"<Subscription {self.id} {self.destination} ack={self.ack}>"


class Transaction:
    """A STOMP transaction (see :meth:`Client.transaction`)."""

    def __init__(self, client: Client, tx_id: str) -> None:
        self.client = client
        self.id = tx_id
        self.done = False

    def send(self, destination: str, body: Body = b"", **kw: Any) -> None:
        """Like :meth:`Client.send`; the message enters its queue at commit."""
        self.client.send(destination, body, transaction=self, **kw)

    def ack(self, msg: Message) -> None:
        """Acknowledge ``msg`` as part of this transaction (undone by abort)."""
        self.client._settle("ack", msg, self, False)

    def nack(self, msg: Message) -> None:
        self.client._settle("nack", msg, self, False)

    def commit(self, *, receipt: bool = True) -> None:
        """Commit; with ``receipt`` (the default) wait until the broker has
        applied (and, for persistent messages, stored) it."""
        self._finish(Commit, receipt)

    def abort(self, *, receipt: bool = True) -> None:
        """Abort: sends are dropped, acked messages return to their groups."""
        self._finish(Abort, receipt)

    def _finish(self, cls: type[Commit] | type[Abort], receipt: bool) -> None:
        if self.done:
            raise ClientError(f"transaction {self.id} is already finished")
        self.done = True
        event = cls(self.id)
        if receipt:
            self.client._request(event, f"{event.command} of {self.id}")
        else:
            self.client._write(event)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.done:
            return
        if exc_type is None:
            self.commit()
        else:
            with contextlib.suppress(ClientError):
                self.abort()

    def __repr__(self) -> str:
        return f"<Transaction {self.id}{' done' if self.done else ''}>"
