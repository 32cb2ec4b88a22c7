"""A small HTTP client for the broker's log and sink endpoints.

Picklable on purpose: a :class:`BrokerHttp` holds only the URL and options.
Connections are opened lazily, one keep-alive connection per process and
thread, kept in a module-level table that is never pickled. Spark ships
readers and writers to executors as pickles, so nothing here may hold a
socket in an attribute.

Requests that fail because the broker is unreachable (refused, reset,
restarting) are retried for ``retry_seconds``; every request the connector
makes is idempotent (range reads, commits, staging under a fresh handle,
publishes deduplicated by batch id), so a retry is always safe.
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

_LOCAL = threading.local()
RETRYABLE_STATUS = (502, 503, 504)


class BrokerHttpError(RuntimeError):
    """The broker answered with an error status (4xx, or 5xx after retries)."""

    def __init__(self, status: int, code: str, message: str, path: str) -> None:
        super().__init__(f"{status} {code} on {path}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.path = path


class BrokerUnavailable(RuntimeError):
    """The broker could not be reached within the retry window; one line saying what to do."""

    def __init__(self, address: str, seconds: float, request: str, cause: Exception | None) -> None:
        from shoal.client._core import os_reason

        reason = os_reason(cause) if cause is not None else "no answer"
        super().__init__(
            f"shoal: no answer from the broker's HTTP port {address} for {seconds:g} s "
            f"({request}: {reason}); start the broker or point the url option (--http) at it; "
            "option retrySeconds sets how long to wait"
        )
        self.address = address


class BrokerHttp:
    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        timeout: float = 60.0,
        retry_seconds: float = 60.0,
    ) -> None:
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"broker url must be http:// or https://, not {url!r}")
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self.scheme = parts.scheme
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.auth: str | None = None
        if token:
            self.auth = f"Bearer {token}"
        elif user is not None:
            cred = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self.auth = f"Basic {cred}"

    @property
    def address(self) -> str:
        """``host:port`` (for messages)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __repr__(self) -> str:  # never show credentials
        return f"BrokerHttp({self.url!r})"

    # -- connections (per process and thread, never pickled) --------------------

    def _key(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    def _conn(self) -> http.client.HTTPConnection:
        conns = getattr(_LOCAL, "conns", None)
        if conns is None:
            conns = _LOCAL.conns = {}
        conn = conns.get(self._key())
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = cls(self.host, self.port, timeout=self.timeout)
            conns[self._key()] = conn
        return conn

    def _drop(self) -> None:
        conns = getattr(_LOCAL, "conns", {})
        conn = conns.pop(self._key(), None)
        if conn is not None:
            conn.close()

    # -- requests ----------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        retry_seconds: float | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request; returns (status, headers lower-cased, body). Raises on errors."""
        target = self.prefix + path
        if query:
            target += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "*/*"}
        if content_type:
            headers["Content-Type"] = content_type
        if self.auth:
            headers["Authorization"] = self.auth
        window = self.retry_seconds if retry_seconds is None else retry_seconds
        deadline = time.monotonic() + window
        delay = 0.05
        last: Exception | None = None
        while True:
            try:
                conn = self._conn()
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                rh = {k.lower(): v for k, v in resp.getheaders()}
                if rh.get("connection", "").lower() == "close":
                    self._drop()
                status = resp.status
                if status in RETRYABLE_STATUS and time.monotonic() < deadline:
                    last = BrokerHttpError(
                        status, "unavailable", data[:200].decode(errors="replace"), path
                    )
                    raise _Retry()
                if status >= 400:
                    raise _error(status, data, path)
                return status, rh, data
            except (OSError, http.client.HTTPException, _Retry) as exc:
                self._drop()
                if not isinstance(exc, _Retry):
                    last = exc
                if time.monotonic() >= deadline:
                    if isinstance(last, BrokerHttpError):
                        raise last from None
                    raise BrokerUnavailable(
                        self.address, window, f"{method} {path}", last
                    ) from None
                time.sleep(delay)
                delay = min(1.0, delay * 2)

    def get_json(self, path: str, **kw: Any) -> Any:
        _, _, data = self.request("GET", path, **kw)
        return json.loads(data)

    def post_json(self, path: str, obj: Any, **kw: Any) -> Any:
        _, _, data = self.request(
            "POST", path, body=json.dumps(obj).encode(), content_type="application/json", **kw
        )
        return json.loads(data) if data else None


class _Retry(Exception):
    pass


def _error(status: int, data: bytes, path: str) -> BrokerHttpError:
    try:
        obj = json.loads(data)
        return BrokerHttpError(status, str(obj.get("error")), str(obj.get("message")), path)
    except (ValueError, AttributeError):
        return BrokerHttpError(status, "http", data[:200].decode(errors="replace"), path)


# --- log queues --------------------------------------------------------------------


def log_path(queue: str) -> str:
    """The HTTP path of a log queue's view (its reads and commit hang below it)."""
    return "/api/logs/" + quote(queue, safe="")


def log_view(http: BrokerHttp, queue: str) -> dict[str, Any]:
    """``GET /api/logs/{queue}``: start, end, committed and lag per bucket."""
    view: dict[str, Any] = http.get_json(log_path(queue))
    return view


def log_end_total(http: BrokerHttp, queue: str) -> int:
    """How many messages the log queue has ever taken (the sum of its end offsets)."""
    return sum(int(v) for v in log_view(http, queue)["end"].values())


def ensure_log_queue(http: BrokerHttp, name: str, topic: str, buckets: int) -> bool:
    """Create log queue ``name`` subscribed to ``topic``; False when it exists already."""
    settings = {
        "queue-type": "log",
        "log-buckets": buckets,
        "address": topic,
        "routing": "multicast",
    }
    try:
        http.post_json("/api/queues", {"name": name, "settings": settings})
        return True
    except BrokerHttpError as exc:
        if exc.status == 409:
            return False
        raise


def close_connections() -> None:
    """Close this thread's cached connections (tests, shutdown)."""
    conns = getattr(_LOCAL, "conns", {})
    for conn in conns.values():
        conn.close()
    conns.clear()
