"""The HTTP listener (h11) in the broker's own event loop.

It parses requests, authenticates them (Basic auth or a bearer token when
users are configured), calls the pure management router, and answers once
any journal records the handler produced are synced.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

import h11

from shoal.errors import Unauthenticated
from shoal.management.http import Context, Request, Response, build_router, error_response

if TYPE_CHECKING:
    from shoal.server.state import ServerState

log = logging.getLogger("shoal.http")

MAX_BODY = 64 * 1024 * 1024


class HttpSession(asyncio.Protocol):
    def __init__(self, server: ServerState, router) -> None:
        self.server = server
        self.router = router
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        self.transport: asyncio.Transport | None = None
        self.request: h11.Request | None = None
        self.body = bytearray()
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool | None:
        self.h11.receive_data(b"")
        self._process()
        return None

    def _process(self) -> None:
        while not self.busy:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._send(error_response(exc.error_status_hint, "protocol", str(exc)), close=True)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self.request = event
                self.body.clear()
            elif isinstance(event, h11.Data):
                self.body += event.data
                if len(self.body) > MAX_BODY:
                    self._send(error_response(413, "limit", "request body too large"), close=True)
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._handle()
            elif isinstance(event, h11.ConnectionClosed):
                if self.transport is not None:
                    self.transport.close()
                return

    def _handle(self) -> None:
        assert self.request is not None
        req = self.request
        target = req.target.decode("latin-1")
        parts = urlsplit(target)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in req.headers}
        request = Request(
            method=req.method.decode("ascii"),
            path=parts.path or "/",
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
            headers=headers,
            body=bytes(self.body),
        )
        server = self.server
        try:
            request.user = self._authenticate(headers)
        except Unauthenticated as exc:
            resp = error_response(401, "unauthenticated", str(exc))
            resp.headers.append(("WWW-Authenticate", 'Basic realm="shoal"'))
            self._send(resp)
            return
        ctx = Context(server.broker, time.time(), server.info())
        ctx.info["security"] = server.config.security
        ctx.info["server"] = server
        try:
            response = self.router.handle(ctx, request)
        except Exception:  # a handler bug must not take the broker down
            log.exception("HTTP handler failed for %s %s", request.method, request.path)
            response = error_response(500, "internal", "internal error; see the broker log")
        records = server.take_records()
        server.schedule_flush()
        if not records:
            self._send(response)
            return
        seq = server.persistence.append(records)
        self.busy = True

        def done(error: Exception | None) -> None:
            self.busy = False
            if error is not None:
                self._send(error_response(503, "store", f"journal sync failed: {error}"))
            else:
                self._send(response)
            self._process()

        server.persistence.when_synced(seq, done)

    def _authenticate(self, headers: dict[str, str]) -> str | None:
        security = self.server.config.security
        if not security.enabled:
            return None
        auth = headers.get("authorization", "")
        if not auth:
            return None  # anonymous: the router's per-route rules answer 401/403
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise Unauthenticated("malformed Basic authorization header") from None
            return security.authenticate(user, password)
        if scheme.lower() == "bearer":
            return security.authenticate_token(value.strip())
        raise Unauthenticated("authentication required (Basic or Bearer)")

    def _send(self, response: Response, close: bool = False) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            *response.headers,
        ]
        if close:
            headers.append(("Connection", "close"))
        try:
            data = self.h11.send(h11.Response(status_code=response.status, headers=headers))
            data += self.h11.send(h11.Data(data=response.body)) if response.body else b""
            data += self.h11.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            self.transport.close()
            return
        self.transport.write(data)
        if close or self.h11.our_state is h11.MUST_CLOSE:
            self.transport.close()
            return
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()


async def start_http(server: ServerState, hostport: tuple[str, int]):
    router = build_router()
    listener = await server.loop.create_server(
        lambda: HttpSession(server, router), hostport[0], hostport[1], reuse_address=True
    )
    sock = listener.sockets[0].getsockname()
    return listener, (sock[0], sock[1])
