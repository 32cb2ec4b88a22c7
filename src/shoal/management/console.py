"""The web console: static files shipped in the package, no build step.

``GET /`` serves ``static/index.html``; ``GET /static/NAME`` serves the other
files. The console is plain HTML, CSS and JavaScript that polls the JSON API.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from shoal.errors import NotFound
from shoal.management.http import Context, Request, Response

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
}
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
_SECURITY_HEADERS = [
    ("Cache-Control", "no-cache"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'",
    ),
]


class StaticFiles:
    """Reads each file once from the installed package and keeps it in memory."""

    def __init__(self, package: str = "shoal.management", folder: str = "static") -> None:
        self._root = resources.files(package).joinpath(folder)
        self._cache: dict[str, bytes | None] = {}

    def get(self, name: str) -> bytes | None:
        if not _NAME.match(name) or ".." in name:
            return None
        if name not in self._cache:
            entry = self._root.joinpath(name)
            self._cache[name] = entry.read_bytes() if entry.is_file() else None
        return self._cache[name]

    def response(self, name: str) -> Response:
        data = self.get(name)
        if data is None:
            raise NotFound(f"no static file {name!r}")
        suffix = name[name.rfind(".") :] if "." in name else ""
        ctype = TYPES.get(suffix, "application/octet-stream")
        return Response(200, data, ctype, list(_SECURITY_HEADERS))


def register(router: Any, files: StaticFiles | None = None) -> None:
    static = files or StaticFiles()

    def index(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        return static.response("index.html")

    def asset(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        return static.response(params["file"])

    router.add("GET", "/", index, auth="user")
    router.add("GET", "/static/{file}", asset, auth="user")
