"""The ``zookeeper`` grouping handler's I/O (C2, C8): kazoo, off the event loop.

Layout under ``/shoal/<cluster name>``:

- ``nodes/<node>``: ephemeral, JSON ``{"link": "host:port", "consumers":
  [queues with consumers]}``; gone when the node's session ends.
- ``bindings/<queue>/<group>``: persistent, the holding node's id. Created
  with a plain ``create``: the first proposal wins atomically, a later one
  gets ``NodeExists`` and reads the binding instead.

Names are percent-encoded (a queue or group may hold ``/``). Decisions use
kazoo's async API; membership is kept by one worker thread that polls every
``POLL_INTERVAL``. Results go back into the event loop with
``call_soon_threadsafe``; the core only ever sees them as commands.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from shoal.errors import ConfigError

log = logging.getLogger("shoal.cluster.zookeeper")

POLL_INTERVAL = 0.5  # s between membership reads (and own-entry refreshes)
SESSION_TIMEOUT = 6.0  # s: a dead node's membership entry disappears after this
RETRY_AFTER = 0.25  # s before a failed proposal is asked again (while still pending)


def require_kazoo() -> None:
    """Refuse a cluster node without the ``cluster`` extra in one line, before anything starts."""
    try:
        import kazoo  # noqa: F401
    except ImportError:
        raise ConfigError(
            "cluster",
            "a cluster node needs the ZooKeeper client kazoo, which is not installed: "
            "pip install 'shoal[cluster]' (in a clone: .venv/bin/pip install -e '.[cluster]')",
        ) from None


def znode_name(name: str) -> str:
    """A queue or group name as one znode name ('.' and '..' are reserved)."""
    encoded = quote(name, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


class ZooKeeperGrouping:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        connect: str,
        cluster_name: str,
        node: str,
        *,
        on_decided: Callable[[str, str, str], None],
        on_members: Callable[[dict[str, dict[str, Any]]], None],
        still_pending: Callable[[str, str], bool],
        on_plan: Callable[[str, dict[str, Any]], None] | None = None,
        on_contact: Callable[[int, int, int], None] = lambda sent_ms, session, session_ms: None,
        on_lost: Callable[[], None] = lambda: None,
        on_rechecked: Callable[[int, int, dict[tuple[str, str], str | None] | None], None] = (
            lambda sent_ms, session, view: None
        ),
    ) -> None:
        self.loop = loop
        self.connect = connect
        self.node = node
        self.root = f"/shoal/{znode_name(cluster_name)}"
        self.on_decided = on_decided
        self.on_members = on_members
        self.still_pending = still_pending
        self.on_plan = on_plan
        self._plans_seen: dict[str, int] = {}  # rebalance znode -> mzxid reported
        self.on_contact = on_contact
        self.on_lost = on_lost
        self.on_rechecked = on_rechecked
        self._recheck: tuple[int, list[tuple[str, str]]] | None = None  # (session, keys)
        self.info: dict[str, Any] = {}
        self._published: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.client: Any = None
        self.proposals = 0
        self.errors = 0

    # --- life cycle ---------------------------------------------------------

    def start(self, info: dict[str, Any]) -> None:
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        self.info = dict(info)
        self.client = KazooClient(
            hosts=self.connect,
            timeout=SESSION_TIMEOUT,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        )
        self.client.add_listener(self._state_changed)
        self.client.start_async()  # never blocks start-up: ZooKeeper may come later
        self._thread = threading.Thread(
            target=self._membership_loop, name="shoal-zookeeper", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.client is not None:
            try:
                self.client.stop()  # ends the session: our membership entry goes at once
                self.client.close()
            except Exception:
                log.debug("closing the ZooKeeper client failed", exc_info=True)

    @property
    def state(self) -> str:
        return "stopped" if self.client is None else str(self.client.state).lower()

    def set_info(self, info: dict[str, Any]) -> None:
        """This node's membership data; the worker publishes it when it changed."""
        self.info = dict(info)

    # --- decisions ----------------------------------------------------------

    def propose(self, queue: str, group: str, proposal: str) -> None:
        """C2: create the binding if absent; either way report the winner."""
        self.proposals += 1
        path = f"{self.root}/bindings/{znode_name(queue)}/{znode_name(group)}"
        result = self.client.create_async(path, proposal.encode(), makepath=True)
        result.rawlink(lambda r: self._created(r, path, queue, group, proposal))

    def _created(self, result: Any, path: str, queue: str, group: str, proposal: str) -> None:
        from kazoo.exceptions import NodeExistsError

        try:
            result.get()
        except NodeExistsError:
            self.client.get_async(path).rawlink(lambda r: self._read(r, queue, group, proposal))
            return
        except Exception as exc:
            self._failed(queue, group, proposal, exc)
            return
        self.loop.call_soon_threadsafe(self.on_decided, queue, group, proposal)

    def _read(self, result: Any, queue: str, group: str, proposal: str) -> None:
        try:
            data, _stat = result.get()
        except Exception as exc:
            self._failed(queue, group, proposal, exc)
            return
        self.loop.call_soon_threadsafe(self.on_decided, queue, group, data.decode())

    def _failed(self, queue: str, group: str, proposal: str, exc: Exception) -> None:
        self.errors += 1
        log.debug("binding %r/%r: %r; asking again while the SEND waits", queue, group, exc)
        self.loop.call_soon_threadsafe(self._retry_later, queue, group, proposal)

    def _retry_later(self, queue: str, group: str, proposal: str) -> None:
        def retry() -> None:
            if self.still_pending(queue, group) and not self._stop.is_set():
                self.propose(queue, group, proposal)

        self.loop.call_later(RETRY_AFTER, retry)

    # --- membership ---------------------------------------------------------

    def _state_changed(self, state: str) -> None:
        # kazoo's thread; must not block. The worker re-registers on its next pass.
        self._published = None
        log.info("ZooKeeper connection %s", str(state).lower())
        if str(state).upper() == "LOST":  # the session expired: our groups may move
            self.loop.call_soon_threadsafe(self.on_lost)

    def recheck(self, session: int, keys: list[tuple[str, str]]) -> None:
        """Read the bindings of ``keys`` in ``session`` (the worker's next pass),
        then ``on_rechecked(sent_ms, session, view)``; view None if it failed."""
        self._recheck = (session, list(keys))

    def _membership_loop(self) -> None:
        while not self._stop.wait(POLL_INTERVAL):
            if not self.client.connected:
                continue
            # fencing (FenceClock): a request sent now and answered proves the
            # session lives until now + the session timeout
            sent_ms = int(time.monotonic() * 1000)
            client_id = self.client.client_id
            if client_id is None:
                continue
            session = int(client_id[0])
            try:
                self._run_recheck(sent_ms, session)
                self._publish()
                self._read_members()
                self._read_plans()
            except Exception as exc:
                log.debug("ZooKeeper membership pass failed: %r", exc)
                continue
            session_ms = int(getattr(self.client, "_session_timeout", SESSION_TIMEOUT * 1000))
            self.loop.call_soon_threadsafe(self.on_contact, sent_ms, session, session_ms)

    def _run_recheck(self, sent_ms: int, session: int) -> None:
        job, self._recheck = self._recheck, None
        if job is None:
            return
        asked, keys = job
        view: dict[tuple[str, str], str | None] | None = None
        if asked == session:
            try:
                view = self._read_bindings(keys)
            except Exception as exc:
                log.debug("re-checking bindings failed: %r", exc)
        self.loop.call_soon_threadsafe(self.on_rechecked, sent_ms, asked, view)

    def _read_bindings(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
        """Each key's binding; an unbound one is claimed for this node first
        (as a proposal would: the first create wins), so messages of it held
        here are delivered here or parked, never unbound."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        base = f"{self.root}/bindings"
        paths = {k: f"{base}/{znode_name(k[0])}/{znode_name(k[1])}" for k in keys}
        asyncs = [(k, self.client.get_async(path)) for k, path in paths.items()]
        view: dict[tuple[str, str], str | None] = {}
        for key, result in asyncs:
            try:
                data, _stat = result.get(timeout=SESSION_TIMEOUT)
                view[key] = data.decode()
            except NoNodeError:
                try:
                    self.client.create(paths[key], self.node.encode(), makepath=True)
                    view[key] = self.node
                except NodeExistsError:
                    view[key] = self.client.get(paths[key])[0].decode()
        return view

    def _publish(self) -> None:
        from kazoo.exceptions import NodeExistsError

        info = dict(self.info)
        if info == self._published:
            return
        client = self.client
        path = f"{self.root}/nodes/{znode_name(self.node)}"
        data = json.dumps(info, sort_keys=True).encode()
        client.ensure_path(f"{self.root}/nodes")
        client.ensure_path(f"{self.root}/bindings")
        try:
            client.create(path, data, ephemeral=True)
        except NodeExistsError:
            _data, stat = client.get(path)
            if stat.ephemeralOwner != client.client_id[0]:
                # our previous life's entry (a restart before its session ended)
                client.delete(path)
                client.create(path, data, ephemeral=True)
            else:
                client.set(path, data)
        self._published = info

    def _read_members(self) -> None:
        client = self.client
        members: dict[str, dict[str, Any]] = {}
        for child in client.get_children(f"{self.root}/nodes"):
            try:
                data, _stat = client.get(f"{self.root}/nodes/{child}")
                members[unquote(child)] = json.loads(data.decode() or "{}")
            except Exception as exc:
                log.debug("membership entry %r: %r", child, exc)
                continue
        self.loop.call_soon_threadsafe(self.on_members, members)

    # --- cluster rebalance ----------------------------------------------------

    def write_plan(self, queue: str, plan: dict[str, Any]) -> None:
        """Publish a rebalance plan for ``queue`` (``rebalance/<queue>``,
        persistent, replaced by the next one); every node reads it on its
        next membership pass. Blocking: off the event loop."""
        client = self.client
        if client is None or not client.connected:
            raise ConnectionError("not connected to ZooKeeper")
        path = f"{self.root}/rebalance/{znode_name(queue)}"
        data = json.dumps(plan, sort_keys=True).encode()
        if client.exists(path):
            client.set(path, data)
        else:
            client.create(path, data, makepath=True)

    def _read_plans(self) -> None:
        if self.on_plan is None:
            return
        from kazoo.exceptions import NoNodeError

        client = self.client
        try:
            children = client.get_children(f"{self.root}/rebalance")
        except NoNodeError:
            return
        for child in children:
            try:
                data, stat = client.get(f"{self.root}/rebalance/{child}")
                if self._plans_seen.get(child) == stat.mzxid:
                    continue
                plan = json.loads(data.decode() or "{}")
            except Exception as exc:
                log.debug("rebalance plan %r: %r", child, exc)
                continue
            self._plans_seen[child] = stat.mzxid
            self.loop.call_soon_threadsafe(self.on_plan, unquote(child), plan)

    def holders(self, queue: str) -> dict[str, str]:
        """group -> node for every binding of ``queue``. Blocking."""
        from kazoo.exceptions import NoNodeError

        client = self.client
        if client is None or not client.connected:
            raise ConnectionError("not connected to ZooKeeper")
        base = f"{self.root}/bindings/{znode_name(queue)}"
        out: dict[str, str] = {}
        try:
            children = client.get_children(base)
        except NoNodeError:
            return out
        for g in children:
            try:
                data, _stat = client.get(f"{base}/{g}")
            except NoNodeError:
                continue
            out[unquote(g)] = data.decode()
        return out

    # --- views --------------------------------------------------------------

    def bindings(self, timeout: float = 2.0) -> dict[str, dict[str, str]] | None:
        """queue -> group -> node as ZooKeeper holds them; None if unreachable.
        Blocking: for the CLI and tests, never the event loop."""
        client = self.client
        if client is None or not client.connected:
            return None
        out: dict[str, dict[str, str]] = {}
        base = f"{self.root}/bindings"
        for q in client.get_children(base):
            groups = out.setdefault(unquote(q), {})
            for g in client.get_children(f"{base}/{q}"):
                data, _stat = client.get(f"{base}/{q}/{g}")
                groups[unquote(g)] = data.decode()
        return out


class BindingWatches:
    """Bindings that move (C5-C7): watches, lease refreshes, releases, forget.

    Kept apart from ``ZooKeeperGrouping`` (same client, same layout). Every
    binding this node caches gets a data watch (``watch``): when its znode
    changes or goes, the watch re-reads it and reports a move
    (``on_moved(queue, group, node or None)``) unless only its last use was
    refreshed (same node). A lease refresh (``watch(touch=True)``) rewrites
    the same data, which moves the znode's ``mtime``: that is the binding's
    last use, which the holder's reaper reads (``release``).
    """

    def __init__(
        self,
        zk: ZooKeeperGrouping,
        *,
        on_moved: Callable[[str, str, str | None], None],
        on_refreshed: Callable[[str, str, str], None],
        on_released: Callable[[str, str, bool], None],
    ) -> None:
        self.zk = zk
        self.on_moved = on_moved
        self.on_refreshed = on_refreshed
        self.on_released = on_released
        self.known: dict[str, str] = {}  # watched path -> the node it named
        self._listening = False

    def _path(self, queue: str, group: str) -> str:
        return f"{self.zk.root}/bindings/{znode_name(queue)}/{znode_name(group)}"

    def _names(self, path: str) -> tuple[str, str]:
        q, g = path.rsplit("/", 2)[1:]
        return unquote(q), unquote(g)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        self.zk.loop.call_soon_threadsafe(fn, *args)

    def watch(self, queue: str, group: str, node: str, *, touch: bool = False) -> None:
        """Watch the binding (once per path); ``touch``: refresh its last use."""
        client = self.zk.client
        if client is None:
            return
        if not self._listening:
            self._listening = True
            client.add_listener(self._session_state)
        path = self._path(queue, group)
        first = path not in self.known
        self.known[path] = node
        if first:
            client.get_async(path, watch=self._fired).rawlink(lambda r: self._checked(r, path))
        if touch:
            client.get_async(path).rawlink(lambda r: self._touch(r, path))

    def _checked(self, result: Any, path: str) -> None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _stat = result.get()
        except NoNodeError:
            self._gone(path)
            return
        except Exception as exc:  # connection loss: the next refresh/proposal asks again
            log.debug("watching %s: %r", path, exc)
            self.known.pop(path, None)
            return
        node = data.decode()
        if self.known.get(path) != node:
            self.known[path] = node
            self._post(self.on_moved, *self._names(path), node)

    def _gone(self, path: str) -> None:
        if self.known.pop(path, None) is not None:
            self._post(self.on_moved, *self._names(path), None)

    def _fired(self, event: Any) -> None:
        # kazoo's thread: a one-shot watch; re-arm and compare
        path = event.path
        if path not in self.known:
            return
        self.zk.client.get_async(path, watch=self._fired).rawlink(lambda r: self._checked(r, path))

    def _touch(self, result: Any, path: str) -> None:
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = result.get()
        except NoNodeError:
            self._gone(path)
            return
        except Exception as exc:
            log.debug("refreshing %s: %r", path, exc)
            return
        # a version clash means someone else refreshed or moved it: the watch tells
        self.zk.client.set_async(path, data, version=stat.version)
        queue, group = self._names(path)
        self._post(self.on_refreshed, queue, group, data.decode())

    def _session_state(self, state: str) -> None:
        # A new session after an expired one has none of our watches: arm them again.
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:
            self._post(self._rearm_later)

    def _rearm_later(self) -> None:
        paths = list(self.known)
        self.known.clear()

        def rearm() -> None:
            client = self.zk.client
            if client is None or not client.connected:
                self.zk.loop.call_later(0.5, rearm)
                return
            for path in paths:
                self.known[path] = ""
                client.get_async(path, watch=self._fired).rawlink(
                    lambda r, p=path: self._checked(r, p)
                )

        self.zk.loop.call_later(0.5, rearm)

    # --- the holder's side: the reaper (C5) and C7 -----------------------------

    def release(self, queue: str, group: str, node: str, idle_ms: int, to: str = "") -> None:
        """Delete the binding if it is still ``node``'s and ZooKeeper saw no
        use of it for ``idle_ms`` (others' lease refreshes move its mtime).
        With ``to`` (cluster rebalance), then propose ``to`` in its place: a
        plain create, so a proposal that got in between wins, as any would."""
        path = self._path(queue, group)
        client = self.zk.client

        def answer(released: bool) -> None:
            self._post(self.on_released, queue, group, released)

        def read(result: Any) -> None:
            from kazoo.exceptions import NoNodeError

            try:
                data, stat = result.get()
            except NoNodeError:
                answer(True)
                return
            except Exception as exc:
                log.debug("releasing %s: %r", path, exc)
                answer(False)
                return
            if data.decode() != node:
                answer(True)  # not ours any more: nothing to release
                return
            if time.time() * 1000 - stat.mtime < idle_ms:
                answer(False)  # another node used it within group-timeout
                return
            client.delete_async(path, version=stat.version).rawlink(deleted)

        def deleted(result: Any) -> None:
            from kazoo.exceptions import NoNodeError

            try:
                result.get()
            except NoNodeError:
                pass
            except Exception as exc:  # BadVersion: refreshed meanwhile; or connection loss
                log.debug("releasing %s: %r", path, exc)
                answer(False)
                return
            if to:  # answered once created (or not): the holder's waiting messages ask then
                client.create_async(path, to.encode(), makepath=True).rawlink(
                    lambda _r: answer(True)
                )
                return
            answer(True)

        client.get_async(path).rawlink(read)

    # --- C6: forget a lost node ----------------------------------------------

    def forget(self, node: str) -> int:
        """Delete every binding held by ``node``; how many. Blocking: run it
        off the event loop. Each deletion fires the watches of the nodes that
        cached it, which take back what they queued for ``node``."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        client = self.zk.client
        if client is None or not client.connected:
            raise ConnectionError("not connected to ZooKeeper")
        base = f"{self.zk.root}/bindings"
        released = 0
        try:
            queues = client.get_children(base)
        except NoNodeError:
            return 0
        for q in queues:
            for g in client.get_children(f"{base}/{q}"):
                path = f"{base}/{q}/{g}"
                try:
                    data, stat = client.get(path)
                    if data.decode() == node:
                        client.delete(path, version=stat.version)
                        released += 1
                except (NoNodeError, BadVersionError):
                    continue  # gone or moved meanwhile: not node's to release
        return released
