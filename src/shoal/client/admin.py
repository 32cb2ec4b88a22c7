"""A small client for Shoal's management HTTP API (standard library only).

::

    from shoal.client.admin import Admin

    admin = Admin("http://127.0.0.1:8161", user="admin", password="secret")
    admin.create_queue("orders", {"group-mode": "shared", "group-buckets": 1024})
    for g in admin.groups("orders", state="owned"):
        print(g["group"], g["owner"], g["backlog"])
    admin.reset_groups("orders", group="AAPL")

Every method returns the decoded JSON. A refused request raises
:class:`~shoal.client.errors.ManagementError` carrying the HTTP status and
the broker's message; an unreachable broker raises it with status 0 and
names the address.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any, cast
from urllib.parse import quote, urlencode, urlsplit

from shoal.client._core import os_reason
from shoal.client.errors import InvalidURL, ManagementError

__all__ = ["DEFAULT_HTTP", "GROUP_KEYS", "Admin"]

DEFAULT_HTTP = "http://127.0.0.1:8161"
#: The keys of one group in ``shoal groups list --json`` (DESIGN "Management output").
GROUP_KEYS = ("group", "owner", "backlog", "in_flight", "oldest_age_ms", "state", "node")
_PAGE = 10_000  # the API's largest page of groups


class Admin:
    """Talks to ``/api/...`` on the broker's HTTP port, with Basic auth if given."""

    def __init__(
        self,
        url: str | None = None,
        *,
        user: str | None = None,
        password: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        url = (url or DEFAULT_HTTP).rstrip("/")
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidURL(f"management URL must look like http://HOST:PORT, not {url!r}")
        self.url = url
        self.timeout = timeout
        self._auth: str | None = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self._auth = f"Basic {token}"

    # --- transport -----------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
    ) -> Any:
        """One API call; ``path`` starts with ``/api``. Returns the JSON body."""
        url = self.url + path
        if query:
            clean = {k: v for k, v in query.items() if v is not None}
            if clean:
                url += "?" + urlencode(clean)
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._auth is not None:
            headers["Authorization"] = self._auth
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(method, path, exc) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            why = os_reason(reason) if isinstance(reason, BaseException) else str(reason)
            raise ManagementError(f"cannot reach the management API at {self.url}: {why}") from None
        except TimeoutError:
            raise ManagementError(
                f"the management API at {self.url} did not answer within {self.timeout:g} s"
            ) from None
        except OSError as exc:
            raise ManagementError(
                f"cannot reach the management API at {self.url}: {os_reason(exc)}"
            ) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ManagementError(
                f"{method} {path}: the broker answered with something that is not JSON"
            ) from None

    def _object(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """``request`` for the endpoints that answer with a JSON object."""
        return cast("dict[str, Any]", self.request(method, path, body))

    # --- reads ---------------------------------------------------------------

    def broker(self) -> dict[str, Any]:
        """Broker facts: version, uptime, listeners, journal, totals."""
        return self._object("GET", "/api/broker")

    def cluster(self) -> dict[str, Any]:
        """The cluster as this node sees it (``/api/cluster``; 404 on a single node)."""
        return self._object("GET", "/api/cluster")

    def queues(self) -> list[dict[str, Any]]:
        """Every queue the user may browse, with depth, in-flight, consumers, ..."""
        data = self.request("GET", "/api/queues")
        return data.get("queues", []) if isinstance(data, dict) else list(data or [])

    def queue(self, name: str) -> dict[str, Any]:
        return self._object("GET", f"/api/queues/{_q(name)}")

    def groups(
        self,
        queue: str,
        *,
        state: str | None = None,
        owner: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """The groups of ``queue`` (all pages), optionally only those in
        ``state`` (ready, owned, draining, parked; comma-separated for
        several) or owned by ``owner`` (a consumer id, a connection id, or
        ``none``), at most ``limit`` of them."""
        out: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = _PAGE if limit is None else min(_PAGE, limit - len(out))
            if page <= 0:
                return out
            data = self.request(
                "GET",
                f"/api/queues/{_q(queue)}/groups",
                query={"state": state, "owner": owner, "limit": page, "offset": offset},
            )
            groups = data.get("groups", []) if isinstance(data, dict) else list(data or [])
            out.extend(groups)
            offset += len(groups)
            total = data.get("total") if isinstance(data, dict) else None
            if not groups or total is None or offset >= total:
                return out

    # --- operations ----------------------------------------------------------

    def create_queue(self, name: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create a queue with kebab-case ``settings`` (``group-mode``, ...)."""
        return self._object("POST", "/api/queues", {"name": name, "settings": settings or {}})

    def delete_queue(self, name: str) -> dict[str, Any]:
        return self._object("DELETE", f"/api/queues/{_q(name)}")

    def purge_queue(self, name: str) -> dict[str, Any]:
        """Drop every message not in flight; the answer says how many."""
        return self._object("POST", f"/api/queues/{_q(name)}/purge")

    def reset_groups(self, queue: str, group: str | None = None) -> dict[str, Any]:
        """Unbind one group or all; returns once requested (moves finish as
        the groups drain)."""
        body = {} if group is None else {"group": group}
        return self._object("POST", f"/api/queues/{_q(queue)}/groups/reset", body)

    def park_group(self, queue: str, group: str) -> dict[str, Any]:
        return self._object("POST", f"/api/queues/{_q(queue)}/groups/{_q(group)}/park")

    def resume_group(self, queue: str, group: str) -> dict[str, Any]:
        return self._object("POST", f"/api/queues/{_q(queue)}/groups/{_q(group)}/resume")

    def forget_node(self, node: str) -> dict[str, Any]:
        """C6: start releasing a lost node's bindings (``forgets`` in ``cluster()``)."""
        return self._object("POST", f"/api/cluster/nodes/{_q(node)}/forget")

    def rebalance_queue(self, queue: str) -> dict[str, Any]:
        """C7: start a cluster rebalance of ``queue`` (``rebalances`` in ``cluster()``)."""
        return self._object("POST", f"/api/cluster/queues/{_q(queue)}/rebalance")


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _http_error(method: str, path: str, exc: urllib.error.HTTPError) -> ManagementError:
    status = exc.code
    code = None
    message = ""
    try:
        payload = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        payload = None
    if isinstance(payload, dict):
        message = str(payload.get("message") or "")
        code = payload.get("error")
    if not message:
        message = f"{method} {path} failed"
    detail = f"HTTP {status}" + (f" {code}" if code else "")
    return ManagementError(f"{message} ({detail})", status=status, code=code)
