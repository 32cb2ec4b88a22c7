"""The HTTP listener (h11) in the broker's own event loop.

A request is judged on its head before its body is read: the ``Host`` must be
one of the broker's names (421, server/http_guard.py), credentials must be
right (401), the route must exist and the caller needs the permission it asks
on the path (404/405/403), and a declared ``Content-Length`` must fit the
route's body cap (413). Only then is the body read, never more than the cap.
The pure management router answers; when its handler produced journal
records, the answer goes out once they are synced.

Every connection waits for its client under a deadline (a request's headers
within ``http-header-timeout-ms`` of its first byte; the next request, or the
next bytes of a body, within ``http-idle-timeout-ms``), and the listener keeps
at most ``http-max-connections``: a connection beyond that gets a 503 and is
closed at once, so idle HTTP clients cannot use up the broker's descriptors.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, cast
from urllib.parse import parse_qsl, urlsplit

import h11

from shoal.errors import Unauthenticated
from shoal.management.http import Context, Request, Response, Router, error_response
from shoal.management.routes import build_router
from shoal.security import wrong_credentials
from shoal.server.config import DEFAULT_HTTP_LIMITS
from shoal.server.http_guard import AllowedHosts, host_allowed
from shoal.server.management_port import ServerPort

if TYPE_CHECKING:
    from shoal.server.session_api import ServerState

log = logging.getLogger("shoal.http")

MAX_HEAD_BYTES = 64 * 1024  # request line plus headers
# After answering before the body (401, 413, ...), read and drop what the client
# still sends (closing with unread bytes resets the connection, and the client
# could lose the answer) until it pauses this long, for at most LINGER_MAX_SECONDS.
LINGER_SECONDS = 2.0
LINGER_MAX_SECONDS = 30.0


class Phase(enum.Enum):
    HEAD = "head"  # reading a request's head (its deadline runs from the first byte)
    IDLE = "idle"  # kept alive between requests
    BODY = "body"  # reading an admitted request's body
    WAITING = "waiting"  # on a password check or a journal sync; reading paused
    CLOSING = "closing"  # answered and closing; what the client still sends is dropped


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int  # -1: no limit
    body_bytes: dict[str, int]  # named body cap (management.http.BODY_LIMITS) -> bytes
    idle_timeout: float | None  # seconds; None: no deadline
    header_timeout: float | None

    @classmethod
    def from_config(cls, limits: Mapping[str, int]) -> HttpLimits:
        values = {**DEFAULT_HTTP_LIMITS, **limits}

        def cap(key: str) -> int:
            return sys.maxsize if values[key] < 0 else values[key]

        def seconds(key: str) -> float | None:
            return None if values[key] <= 0 else values[key] / 1000

        return cls(
            max_connections=values["http-max-connections"],
            body_bytes={"json": cap("http-max-body-bytes"), "upload": cap("http-max-upload-bytes")},
            idle_timeout=seconds("http-idle-timeout-ms"),
            header_timeout=seconds("http-header-timeout-ms"),
        )


class HttpListener:
    """One HTTP listener's sessions and what they share."""

    def __init__(
        self, server: ServerState, router: Router, limits: HttpLimits, allowed_hosts: AllowedHosts
    ) -> None:
        self.server = server
        self.port = ServerPort(server)  # what management reads and commands through
        self.router = router
        # Routes that need no credentials (/health): any sent are not checked, so a
        # probe's answer never depends on them or on the failed-login throttle.
        self.open_routes = [
            (route.method, route.regex) for route in router.route_info() if route.auth == "open"
        ]
        self.limits = limits
        self.allowed_hosts = allowed_hosts
        self.sessions: set[HttpSession] = set()
        self.refusing = False  # at the connection limit (logged once per episode)

    def session(self) -> HttpSession:
        return HttpSession(self)

    def is_open(self, request: Request) -> bool:
        method = "GET" if request.method == "HEAD" else request.method
        return any(m == method and rx.match(request.path) for m, rx in self.open_routes)

    def sample_rates(self, srv: asyncio.Server) -> None:
        """Sample message rates on the management's own schedule while serving,
        so the console's rates and chart cover traffic nobody watched."""
        if not srv.is_serving():
            return
        now = time.time()
        due = self.router.state.tick(self.port, now)
        self.server.loop.call_later(max(0.0, due - now), self.sample_rates, srv)

    def admit_connection(self, session: HttpSession) -> bool:
        limit = self.limits.max_connections
        if 0 <= limit <= len(self.sessions):
            if not self.refusing:
                log.warning(
                    "HTTP listener at its limit of %d connections (http-max-connections); "
                    "refusing new ones",
                    limit,
                )
            self.refusing = True
            return False
        self.refusing = False
        self.sessions.add(session)
        return True


def raw_answer(status: int, code: str, message: str) -> bytes:
    """A complete closing answer, for when h11 has no request to answer
    (connection refused, request head never completed, unparsable request)."""
    response = error_response(status, code, message)
    head = (
        f"HTTP/1.1 {status} {_phrase(status).decode()}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + response.body


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _unauthenticated(message: str) -> Response:
    response = error_response(401, "unauthenticated", message)
    response.headers.append(("WWW-Authenticate", 'Basic realm="shoal"'))
    return response


def _declares_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    if length is not None:
        return int(length) > 0  # h11 checked it is a number
    return "transfer-encoding" in request.headers


class HttpSession(asyncio.Protocol):
    def __init__(self, listener: HttpListener) -> None:
        self.listener = listener
        self.server = listener.server
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.transport: asyncio.Transport | None = None
        self.phase = Phase.HEAD
        self.deadline: asyncio.TimerHandle | None = None
        self.request: Request | None = None  # admitted; its body is being read
        self.refusal: Response | None = None  # for a body-less request, sent at its end
        self.body = bytearray()
        self.body_cap = 0
        self.linger_until = 0.0  # loop time after which a closing connection stops reading
        self.peer_host = "?"

    # --- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer_host = str(peer[0]) if peer else "?"
        if not self.listener.admit_connection(self):
            limit = self.listener.limits.max_connections
            transport.write(
                raw_answer(
                    503,
                    "busy",
                    f"the HTTP listener is at its limit of {limit} connections "
                    "(http-max-connections); retry later",
                )
            )
            transport.close()
            return
        self._wait(Phase.HEAD)

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.sessions.discard(self)
        self._cancel_deadline()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self.phase is Phase.CLOSING:
            # the answer is out; the rest of a refused body is dropped as it comes
            if self.deadline is not None and self.server.loop.time() < self.linger_until:
                self._arm(LINGER_SECONDS, self._close)
            return
        if self.phase is Phase.IDLE:
            self._wait(Phase.HEAD)  # a request's first byte starts its header deadline
        elif self.phase is Phase.BODY:
            self._wait(Phase.BODY)  # the body moves: its idle deadline starts again
        self.h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool | None:
        if self.phase is not Phase.CLOSING:
            self.h11.receive_data(b"")
            self._process()
        return None  # close our side too

    # --- requests --------------------------------------------------------------

    def _process(self) -> None:
        while self.phase in (Phase.HEAD, Phase.IDLE, Phase.BODY):
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._close_with(raw_answer(exc.error_status_hint, "protocol", str(exc)))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._begin(event)
            elif isinstance(event, h11.Data):
                self._receive_body(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._end()
            elif isinstance(event, h11.ConnectionClosed):
                self._close()
                return

    def _begin(self, event: h11.Request) -> None:
        parts = urlsplit(event.target.decode("latin-1"))
        request = Request(
            method=event.method.decode("ascii"),
            path=parts.path or "/",
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
            headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers},
        )
        host = request.headers.get("host")
        if not host_allowed(host, self.listener.allowed_hosts):
            self._refuse(
                request,
                error_response(
                    421,
                    "misdirected",
                    f"this broker does not answer to host {host!r}; "
                    "add the name to allowed-hosts in [broker] if it is the broker's",
                ),
            )
            return
        try:
            if not self.listener.is_open(request) and not self._authenticate(request):
                return  # the password is checked off the loop; _verified goes on
        except Unauthenticated as exc:
            self._refuse(request, _unauthenticated(str(exc)))
            return
        self._route(request)

    def _route(self, request: Request) -> None:
        """The rest of what the head decides (route, permissions on the path,
        declared size); admitted, the body is read under the route's cap."""
        ctx = Context(self.listener.port, time.time(), self.server.config.security)
        admission = self.listener.router.admit(ctx, request)
        if admission.refusal is not None:
            self._refuse(request, admission.refusal)
            return
        self.body_cap = self.listener.limits.body_bytes[admission.body]
        if int(request.headers.get("content-length") or 0) > self.body_cap:
            self._refuse(request, self._too_large())
            return
        self.request = request
        self.body.clear()
        if self.h11.they_are_waiting_for_100_continue:
            self._write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        self._wait(Phase.BODY)

    def _refuse(self, request: Request, refusal: Response) -> None:
        if _declares_body(request):
            self._answer_and_close(refusal)  # never read a body that is refused anyway
        else:
            self.refusal = refusal  # its end follows at once; the connection stays usable

    def _too_large(self) -> Response:
        return error_response(
            413,
            "limit",
            f"request body larger than this route's limit of {self.body_cap} bytes",
        )

    def _receive_body(self, data: bytes) -> None:
        if self.request is None:
            return  # the body of a refused request (its length was not declared)
        if len(self.body) + len(data) > self.body_cap:
            self._answer_and_close(self._too_large())
            return
        self.body += data

    def _end(self) -> None:
        self._cancel_deadline()
        if self.refusal is not None:
            refusal, self.refusal = self.refusal, None
            self._send(refusal)
            return
        request, self.request = self.request, None
        assert request is not None
        request.body = bytes(self.body)
        self.body.clear()
        self._handle(request)

    def _handle(self, request: Request) -> None:
        server = self.server
        ctx = Context(self.listener.port, time.time(), server.config.security)
        try:
            response = self.listener.router.handle(ctx, request)
        except Exception:  # a handler bug must not take the broker down
            log.exception("HTTP handler failed for %s %s", request.method, request.path)
            response = error_response(500, "internal", "internal error; see the broker log")
        records = server.take_records()
        server.schedule_flush()
        if not records:
            self._send(response)
            return
        seq = server.persistence.append(records)
        self._pause()  # nothing more is read until this is answered

        def done(error: Exception | None) -> None:
            if self.transport is None:
                return  # the client went away meanwhile
            self._resume(Phase.IDLE)
            if error is not None:
                self._send(error_response(503, "store", f"journal sync failed: {error}"))
            else:
                self._send(response)
            self._process()

        server.persistence.when_synced(seq, done)

    def _authenticate(self, request: Request) -> bool:
        """Set ``request.user`` from its credentials; raise Unauthenticated. False
        while a password is checked off the loop (scrypt takes tens of ms)."""
        security = self.server.config.security
        if not security.enabled:
            return True
        auth = request.headers.get("authorization", "")
        if not auth:
            return True  # anonymous: the router's per-route rules answer 401/403
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            request.user = security.authenticate_token(value.strip())
            return True
        if scheme.lower() != "basic":
            raise Unauthenticated("authentication required (Basic or Bearer)")
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise Unauthenticated("malformed Basic authorization header") from None
        login, password = security.require_credentials(user, password)
        throttle = self.server.login_throttle  # shared with the STOMP listeners
        if not throttle.allows(self.peer_host, time.time()):
            raise Unauthenticated(
                f"too many failed logins from {self.peer_host} "
                f"(max-auth-failures-per-minute {throttle.per_minute}); retry later"
            )
        ok = security.cached(login, password)
        if ok is None:
            # counted up front (given back on success), as on STOMP
            throttle.failed(self.peer_host, time.time())
            self._pause()
            self.server.verify_password_async(
                login, password, lambda: self.transport is not None
            ).add_done_callback(lambda fut: self._verified(request, login, fut))
            return False
        if not ok:
            throttle.failed(self.peer_host, time.time())
            raise wrong_credentials(login)
        request.user = login
        return True

    def _verified(self, request: Request, login: str, fut: asyncio.Future[bool | None]) -> None:
        if self.transport is None or fut.cancelled() or fut.result() is None:
            return  # the client went away meanwhile
        self._resume(Phase.HEAD)
        if fut.result():
            self.server.login_throttle.succeeded(self.peer_host, time.time())
            request.user = login
            self._route(request)
        else:
            self._refuse(request, _unauthenticated(str(wrong_credentials(login))))
        self._process()

    def _pause(self) -> None:
        """Wait on the broker (password check, journal sync): no deadline, no reading."""
        self.phase = Phase.WAITING
        self._cancel_deadline()
        if self.transport is not None:
            self.transport.pause_reading()

    def _resume(self, phase: Phase) -> None:
        if self.transport is not None:
            self.transport.resume_reading()
        self._wait(phase)

    # --- answers -----------------------------------------------------------------

    def _encode(self, response: Response, close: bool) -> bytes | None:
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            *response.headers,
        ]
        if close:
            headers.append(("Connection", "close"))
        try:
            data = self.h11.send(
                h11.Response(
                    status_code=response.status, headers=headers, reason=_phrase(response.status)
                )
            )
            data += self.h11.send(h11.Data(data=response.body)) if response.body else b""
            return data + self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return None

    def _send(self, response: Response) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        data = self._encode(response, close=False)
        if data is None:
            self._close()
            return
        self.transport.write(data)
        if self.h11.our_state is h11.MUST_CLOSE:
            self._close()
            return
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            pipelined = bool(self.h11.trailing_data[0])
            self._wait(Phase.HEAD if pipelined else Phase.IDLE)

    def _answer_and_close(self, response: Response) -> None:
        """Answer a request whose body is not read, then close."""
        data = self._encode(response, close=True)
        self._close_with(data if data is not None else b"")

    def _close_with(self, data: bytes) -> None:
        """Write a last answer and close, dropping (not buffering) whatever the
        client still sends meanwhile, so that it can read the answer."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.phase = Phase.CLOSING
        self.request = None
        self.body.clear()
        transport.write(data)
        if transport.can_write_eof():
            transport.write_eof()
        self.linger_until = self.server.loop.time() + LINGER_MAX_SECONDS
        self._arm(LINGER_SECONDS, self._close)

    def _close(self) -> None:
        self.phase = Phase.CLOSING
        self._cancel_deadline()
        if self.transport is not None:
            self.transport.close()

    # --- deadlines -----------------------------------------------------------------

    def _wait(self, phase: Phase) -> None:
        """Wait for the client in ``phase``, under that phase's deadline."""
        self.phase = phase
        limits = self.listener.limits
        self._arm(
            limits.header_timeout if phase is Phase.HEAD else limits.idle_timeout, self._expired
        )

    def _arm(self, seconds: float | None, callback: object) -> None:
        self._cancel_deadline()
        if seconds is not None:
            self.deadline = self.server.loop.call_later(seconds, callback)  # type: ignore[arg-type]

    def _cancel_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expired(self) -> None:
        self.deadline = None
        limits = self.listener.limits
        if self.phase is Phase.HEAD and self.h11.trailing_data[0]:
            self._close_with(
                raw_answer(
                    408,
                    "timeout",
                    f"the request's headers did not arrive within "
                    f"{limits.header_timeout} s (http-header-timeout-ms)",
                )
            )
        elif self.phase is Phase.BODY:
            self._answer_and_close(
                error_response(
                    408,
                    "timeout",
                    f"no request body bytes for {limits.idle_timeout} s (http-idle-timeout-ms)",
                )
            )
        else:  # nothing of a request received: a connection nobody uses
            self._close()

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)


async def start_http(
    server: ServerState, hostport: tuple[str, int]
) -> tuple[asyncio.Server, tuple[str, int]]:
    listener = HttpListener(
        server,
        build_router(),
        HttpLimits.from_config(server.config.limits),
        AllowedHosts.for_listener(server.config.allowed_hosts, hostport[0]),
    )
    srv = await server.loop.create_server(
        listener.session, hostport[0], hostport[1], reuse_address=True
    )
    listener.sample_rates(srv)
    sock = srv.sockets[0].getsockname()
    return srv, (sock[0], sock[1])
