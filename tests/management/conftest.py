"""Helpers for the management tests that run against a real `shoal serve`."""

from __future__ import annotations

import base64
import threading
import time
from collections import deque
from typing import Any

import pytest
import stomp

from support import http_json, http_request


class Api:
    """JSON calls against one broker's HTTP listener, as one user (or none)."""

    def __init__(self, base_url: str, user: str | None = None, password: str | None = None) -> None:
        self.base_url = base_url
        self.auth = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.auth = f"Basic {token}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": self.auth} if self.auth else {}

    def as_user(self, user: str | None, password: str | None = None) -> Api:
        return Api(self.base_url, user, password)

    def raw(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
        return http_request(self.base_url + path, method, body, headers=self.headers)

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http_json(self.base_url + path, method, body, headers=self.headers)

    def get(self, path: str) -> Any:
        status, body = self("GET", path)
        assert status == 200, (path, status, body)
        return body


class Consumer(stomp.ConnectionListener):
    """A stomp.py client-individual consumer that records (and optionally acks) messages."""

    def __init__(
        self,
        port: int,
        queue: str,
        sub_id: str,
        *,
        ack: bool = True,
        ack_delay: float = 0.0,
        prefetch: int | None = None,
        login: str | None = None,
        passcode: str | None = None,
    ) -> None:
        """``ack``: acknowledge each message, after ``ack_delay`` seconds when given
        (so that groups always hold messages in flight while traffic flows)."""
        self.queue = queue
        self.sub_id = sub_id
        self.auto_ack = ack
        self.ack_delay = ack_delay
        self.to_ack: deque[tuple[float, str]] = deque()
        self.stopping = threading.Event()
        self.settler: threading.Thread | None = None
        if ack and ack_delay > 0:
            self.settler = threading.Thread(target=self._settle, daemon=True)
            self.settler.start()
        self.lock = threading.Lock()
        self.messages: list[stomp.utils.Frame] = []
        self.errors: list[stomp.utils.Frame] = []
        self.session: str | None = None
        self.conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
        self.conn.set_listener("c", self)
        self.conn.connect(login, passcode, wait=True)
        headers = {"activemq.prefetchSize": str(prefetch)} if prefetch else {}
        self.conn.subscribe(f"/queue/{queue}", id=sub_id, ack="client-individual", headers=headers)

    @property
    def consumer_id(self) -> str:
        return f"{self.session}/{self.sub_id}"

    def on_connected(self, frame) -> None:
        self.session = frame.headers.get("session")

    def on_message(self, frame) -> None:
        with self.lock:
            self.messages.append(frame)
        if self.settler is not None:
            self.to_ack.append((time.monotonic() + self.ack_delay, frame.headers["ack"]))
        elif self.auto_ack:
            self.conn.ack(frame.headers["ack"])

    def _settle(self) -> None:
        while not self.stopping.wait(0.01):
            now = time.monotonic()
            while self.to_ack and self.to_ack[0][0] <= now:
                _due, ack_id = self.to_ack.popleft()
                try:
                    self.conn.ack(ack_id)
                except Exception:
                    return

    def on_error(self, frame) -> None:
        self.errors.append(frame)

    def groups(self) -> set[str]:
        with self.lock:
            return {m.headers.get("JMSXGroupID") for m in self.messages}

    def ack_all(self) -> None:
        with self.lock:
            pending = list(self.messages)
        for m in pending:
            self.conn.ack(m.headers["ack"])

    def close(self) -> None:
        self.stopping.set()
        if self.settler is not None:
            self.settler.join(5)
        if self.conn.is_connected():
            self.conn.disconnect()


class Producer:
    def __init__(self, port: int, login: str | None = None, passcode: str | None = None) -> None:
        self.conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
        self.conn.connect(login, passcode, wait=True)

    def send(self, queue: str, body: str, group: str | None = None, **headers: str) -> None:
        if group is not None:
            headers["JMSXGroupID"] = group
        self.conn.send(f"/queue/{queue}", body, headers=headers)

    def close(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect()


@pytest.fixture
def stomp_clients():
    """Factory for consumers and producers; everything is disconnected afterwards."""
    made: list[Any] = []

    class Clients:
        @staticmethod
        def consumer(*args: Any, **kwargs: Any) -> Consumer:
            c = Consumer(*args, **kwargs)
            made.append(c)
            return c

        @staticmethod
        def producer(*args: Any, **kwargs: Any) -> Producer:
            p = Producer(*args, **kwargs)
            made.append(p)
            return p

    yield Clients
    for client in made:
        try:
            client.close()
        except Exception:
            pass


@pytest.fixture
def api_for():
    return Api
