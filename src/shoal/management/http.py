"""Pure HTTP request handling for the management port.

The server's HTTP listener (server/http.py, h11) parses a request into a
:class:`Request`, calls :meth:`Router.handle` on the event loop thread, and
writes the :class:`Response`. Handlers are plain functions over the pure
core; they never block and never do I/O. When a handler produced journal
records (e.g. a sink publish), the server sends the response only after the
fsync that covers them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.errors import CATALOGUE, BrokerError


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: bytes = b""
    user: str | None = None  # set by the server once authenticated


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class Context:
    """What a handler may use: the core, the time, and the server's facts."""

    broker: Any  # shoal.broker.core.Broker
    now: float
    info: dict[str, Any] = field(default_factory=dict)  # version, uptime, listeners, journal


Handler = Callable[[Context, Request, dict[str, str]], Response]


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj, separators=(",", ":")).encode())


def error_response(status: int, code: str, message: str) -> Response:
    return json_response({"error": code, "message": message}, status)


def broker_error_response(exc: BrokerError) -> Response:
    return error_response(CATALOGUE[exc.code][0], exc.code, str(exc))


def read_json(request: Request) -> Any:
    """Parse a JSON body; a bad body is the client's error (400)."""
    if not request.body:
        return {}
    try:
        return json.loads(request.body)
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None


class BadRequest(BrokerError, ValueError):
    code = "bad-parameter"


class Router:
    """Method + path pattern ('/api/queues/{name}') -> handler."""

    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler, str]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern.rstrip("/") or "/")
        self._routes.append((method, re.compile(f"^{regex}/?$"), handler, pattern))

    def routes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, _r, _h, p in self._routes]

    def handle(self, ctx: Context, request: Request) -> Response:
        allowed = False
        for method, regex, handler, _pattern in self._routes:
            match = regex.match(request.path)
            if match is None:
                continue
            if method != request.method:
                allowed = True
                continue
            params = {k: _unquote(v) for k, v in match.groupdict().items()}
            try:
                return handler(ctx, request, params)
            except BrokerError as exc:
                return broker_error_response(exc)
        if allowed:
            return error_response(405, "method-not-allowed", f"{request.method} not allowed")
        return error_response(404, "not-found", f"no such resource {request.path}")


def _unquote(value: str) -> str:
    from urllib.parse import unquote

    return unquote(value)


def health(ctx: Context, request: Request, params: dict[str, str]) -> Response:
    return json_response({"status": "ok"})


def build_router() -> Router:
    """Every route the management port serves. Modules add theirs here."""
    router = Router()
    router.add("GET", "/health", health)
    return router
