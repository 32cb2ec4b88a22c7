"""Pure HTTP request handling for the management port.

The server's HTTP listener (server/http.py, h11) parses a request into a
:class:`Request`, calls :meth:`Router.handle` on the event loop thread, and
writes the :class:`Response`. Handlers are plain functions over the broker
port (``broker_port.py``); they never block and never do I/O. When a handler produced journal
records (e.g. a sink publish), the server sends the response only after the
fsync that covers them.

Authorization lives here too: every route names what it needs (``open``,
any authenticated ``user``, or the ``browse`` / ``manage`` permission on the
queue it addresses, ``#`` for broker-wide ones). When the broker has no
users, everything is allowed.

This module is the leaf the handler modules share: types, the router and
helpers. The routes are assembled in ``routes.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from shoal.errors import CATALOGUE, BrokerError, Forbidden, InvalidSetting, Unauthenticated
from shoal.server.http_guard import same_origin

if TYPE_CHECKING:
    from shoal.management.broker_port import BrokerPort


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
    """What a handler may use: the broker port, the time, and who may do what."""

    port: BrokerPort
    now: float
    security: Any = None  # shoal.security.Security; None: everything is allowed


Handler = Callable[[Context, Request, dict[str, str]], Response]

# What a route needs from the caller when the broker has users.
AUTH_LEVELS = ("open", "user", "browse", "manage")
BROKER_WIDE = "#"  # the address checked for routes that are not about one queue
_INT = re.compile(r"-?[0-9]{1,18}")


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj, separators=(",", ":")).encode())


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    return json_response({"error": code, "message": message, **extra}, status)


def broker_error_response(exc: BrokerError) -> Response:
    extra: dict[str, Any] = {}
    if isinstance(exc, BadRequest) and exc.field is not None:
        extra["field"] = exc.field
    elif isinstance(exc, InvalidSetting):
        extra["field"] = f"settings.{exc.name}"
    if isinstance(exc, PermissionDenied):
        extra["permission"] = exc.permission
        extra["address"] = exc.address
    return error_response(CATALOGUE[exc.code][0], exc.code, str(exc), **extra)


class BadRequest(BrokerError, ValueError):
    """The client sent something unusable; ``field`` names it."""

    code = "bad-parameter"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class PermissionDenied(Forbidden):
    def __init__(
        self, user: str | None, permission: str, address: str, message: str | None = None
    ) -> None:
        where = "the broker" if address == BROKER_WIDE else f"queue {address!r}"
        super().__init__(message or f"user {user!r} lacks the {permission!r} permission on {where}")
        self.permission = permission
        self.address = address


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def read_json(request: Request) -> Any:
    """Parse a JSON body; a bad body is the client's error (400, naming the problem)."""
    if not request.body or not request.body.strip():
        return {}
    try:
        return json.loads(request.body, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}", "body") from None
    except RecursionError:  # the decoder recurses once per nested array or object
        raise BadRequest(
            "request body is not valid JSON: arrays or objects nested too deeply", "body"
        ) from None


def allowed(ctx: Context, request: Request, permission: str, address: str) -> bool:
    security = ctx.security
    if security is None or not security.enabled:
        return True
    return bool(security.allowed(request.user, permission, address))


def authorize(ctx: Context, request: Request, permission: str, address: str) -> None:
    if not allowed(ctx, request, permission, address):
        raise PermissionDenied(request.user, permission, address)


def query_int(
    request: Request, name: str, default: int, *, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not _INT.fullmatch(raw):
        raise BadRequest(f"query parameter {name!r} must be an integer, not {raw!r}", name)
    value = int(raw)
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise BadRequest(f"query parameter {name!r} must be {bounds}, not {value}", name)
    return value


def query_choice(
    request: Request, name: str, choices: tuple[str, ...], default: str | None
) -> str | None:
    raw = request.query.get(name)
    if raw is None:
        return default
    if raw not in choices:  # an empty value is no choice either
        raise BadRequest(
            f"query parameter {name!r} must be one of {', '.join(choices)}, not {raw!r}", name
        )
    return raw


@dataclass(slots=True)
class Route:
    method: str
    regex: re.Pattern[str]
    handler: Handler
    pattern: str
    auth: str  # one of AUTH_LEVELS
    address_param: str | None  # path parameter naming the queue the permission is checked on
    body: str = "json"  # one of BODY_LIMITS: which cap the server applies to the request body


# Named body caps a route picks from; the server maps them to its configured
# byte limits (http-max-body-bytes, http-max-upload-bytes).
BODY_LIMITS = ("json", "upload")


@dataclass(slots=True)
class Admission:
    """What the headers alone decide: a refusal, or the body cap to read under."""

    refusal: Response | None
    body: str = "json"


class Router:
    """Method + path pattern ('/api/queues/{name}') -> handler, with authorization."""

    def __init__(self) -> None:
        self._routes: list[Route] = []
        self.state: Any = None  # the management state (rates, metrics), set by routes.build_router

    def add(
        self,
        method: str,
        pattern: str,
        handler: Handler,
        *,
        auth: str = "user",
        address_param: str | None = None,
        body: str = "json",
    ) -> None:
        """Register a route.

        ``auth``: ``open`` (no credentials), ``user`` (any authenticated user),
        ``browse`` or ``manage`` (that permission on the queue named by the path
        parameter ``address_param``, or broker-wide ``#`` without one). Routes
        registered without ``auth`` need an authenticated user only; handlers
        may check finer permissions themselves with :func:`authorize`.
        ``body``: the named cap (:data:`BODY_LIMITS`) on the request body.
        """
        if auth not in AUTH_LEVELS:
            raise ValueError(f"unknown auth level {auth!r}")
        if body not in BODY_LIMITS:
            raise ValueError(f"unknown body limit {body!r}")
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern.rstrip("/") or "/")
        self._routes.append(
            Route(method, re.compile(f"^{regex}/?$"), handler, pattern, auth, address_param, body)
        )

    def routes(self) -> list[tuple[str, str]]:
        return [(r.method, r.pattern) for r in self._routes]

    def route_info(self) -> list[Route]:
        return list(self._routes)

    def admit(self, ctx: Context, request: Request) -> Admission:
        """Decide from the method, path and headers alone, before any body is read:
        no such route, missing credentials or permissions on the path are refused."""
        found = self._resolve(request)
        if isinstance(found, Response):
            return Admission(found)
        route, params = found
        return Admission(self._refusal(ctx, request, route, params), route.body)

    def handle(self, ctx: Context, request: Request) -> Response:
        found = self._resolve(request)
        if isinstance(found, Response):
            return found
        route, params = found
        response = self._refusal(ctx, request, route, params)
        if response is None:
            try:
                response = route.handler(ctx, request, params)
            except BrokerError as exc:
                response = _error_answer(exc)
        if request.method == "HEAD":
            response = Response(response.status, b"", response.content_type, response.headers)
        return response

    def _resolve(self, request: Request) -> tuple[Route, dict[str, str]] | Response:
        """The route for the request with its path parameters, or a 404/405 answer."""
        methods: list[str] = []
        for route in self._routes:
            match = route.regex.match(request.path)
            if match is None:
                continue
            if route.method != request.method and not (
                request.method == "HEAD" and route.method == "GET"
            ):
                methods.append(route.method)
                continue
            return route, {k: unquote(v) for k, v in match.groupdict().items()}
        if methods:
            allow = ", ".join(sorted(set(methods) | ({"HEAD"} if "GET" in methods else set())))
            resp = error_response(
                405,
                "method-not-allowed",
                f"{request.method} not allowed on {request.path}",
            )
            resp.headers.append(("Allow", allow))
            return resp
        return error_response(404, "not-found", f"no such resource {request.path}")

    def _refusal(
        self, ctx: Context, request: Request, route: Route, params: dict[str, str]
    ) -> Response | None:
        try:
            _refuse_cross_origin(request)
            self._check(ctx, request, route, params)
        except BrokerError as exc:
            return _error_answer(exc)
        return None

    @staticmethod
    def _check(ctx: Context, request: Request, route: Route, params: dict[str, str]) -> None:
        if route.auth == "open":
            return
        security = ctx.security
        if security is None or not security.enabled:
            return
        if request.user is None:
            raise Unauthenticated("authentication required (Basic or Bearer)")
        if route.auth == "user":
            return
        address = (
            params.get(route.address_param, BROKER_WIDE) if route.address_param else BROKER_WIDE
        )
        authorize(ctx, request, route.auth, address)


def _error_answer(exc: BrokerError) -> Response:
    response = broker_error_response(exc)
    if exc.code == "unauthenticated":
        response.headers.append(("WWW-Authenticate", 'Basic realm="shoal"'))
    return response


def _refuse_cross_origin(request: Request) -> None:
    """Operations from another web origin are refused (CSRF on loopback, cached Basic auth).

    Browsers send ``Origin`` with every POST/DELETE; the console's own requests
    carry this listener's origin. Scripts and the CLI send none.
    """
    if request.method in ("GET", "HEAD"):
        return
    origin = request.headers.get("origin")
    if not same_origin(origin, request.headers.get("host", "")):
        raise PermissionDenied(
            None,
            "same-origin",
            BROKER_WIDE,
            f"cross-origin {request.method} "
            f"from {origin!r} refused; use the console served by this broker",
        )
