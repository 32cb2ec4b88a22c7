"""The core's plain data: what a client connection owns, an open
transaction, a topic, and the per-connection limits.

No behaviour beyond bookkeeping: the commands that change these live with
their concern (connections.py, transactions.py, addresses.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.broker.consumer import Consumer
    from shoal.broker.message import Message


@dataclass(frozen=True, slots=True)
class CoreLimits:
    """Per-connection limits the core enforces (LimitExceeded names the limit).

    The server builds them from ``[limits]`` (``shoal.server.config.core_limits``).
    """

    max_subscriptions_per_connection: int = 10_000
    max_transactions_per_connection: int = 1_000
    max_transaction_size: int = 1_000_000  # sends + acks + nacks buffered in one tx
    # deliveries per round to a consumer without a credit limit (auto-ack, prefetch 0)
    max_delivery_burst: int = 1000


class Connection:
    __slots__ = (
        "id",
        "user",
        "client_id",
        "writable",
        "subs",
        "acks",
        "txs",
        "temps",
        "temp_topics",
        "blocked_on",
        "since",
        "sent",
    )

    def __init__(self, conn_id: int, user: str | None, client_id: str | None, now: float) -> None:
        self.id = conn_id
        self.user = user
        self.client_id = client_id
        self.writable = True
        self.subs: dict[str, Consumer] = {}
        self.acks: dict[int, Message] = {}  # unsettled deliveries by message id
        self.txs: dict[str, Transaction] = {}
        self.temps: dict[str, str] = {}  # short name -> temp queue name
        self.temp_topics: dict[str, str] = {}
        self.blocked_on: dict[Any, None] = {}  # queues that block this producer
        self.since = now
        self.sent = 0


class Transaction:
    __slots__ = ("id", "sends", "acks", "nacks")

    def __init__(self, tx_id: str) -> None:
        self.id = tx_id
        self.sends: list[tuple[str, dict[str, str], bytes]] = []
        self.acks: list[Message] = []
        self.nacks: list[Message] = []

    def size(self) -> int:
        return len(self.sends) + len(self.acks) + len(self.nacks)


class Topic:
    __slots__ = ("name", "subs", "temp_owner")

    def __init__(self, name: str, temp_owner: int | None = None) -> None:
        self.name = name
        self.subs: list[Any] = []  # subscription queues
        self.temp_owner = temp_owner
