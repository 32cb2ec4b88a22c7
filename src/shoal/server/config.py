"""One frozen Config, loaded from one TOML file plus command-line overrides.

A bad config refuses to start with a ConfigError naming the key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.broker.model import CoreLimits
from shoal.broker.settings import AddressSettings, coerce_settings
from shoal.errors import ConfigError, InvalidSetting
from shoal.security import Security, load_users_file, parse_security
from shoal.server.http_guard import AllowedHosts

DEFAULT_LINK = ("127.0.0.1", 61617)

# Named limits with their defaults; every one is configurable under [limits].
DEFAULT_LIMITS: dict[str, int] = {
    "max-frame-bytes": 10 * 1024 * 1024,
    "max-headers": 1000,
    "max-header-line-bytes": 64 * 1024,
    "max-connections": 10_000,
    # enforced by the core (shoal.broker.core.CoreLimits, built by core_limits())
    "max-subscriptions-per-connection": 1_000,
    "max-transactions-per-connection": 1_000,
    "max-transaction-size": 1_000_000,  # sends + acks + nacks buffered in one transaction
    "max-delivery-burst": 1_000,  # deliveries per round to a consumer without credit
    "global-max-size": -1,  # bytes of message bodies held in memory; -1 unbounded
    # Before CONNECTED: connections not yet authenticated have their own,
    # lower cap (max-connections counts connected clients only), and a
    # frame may not be bigger than this.
    "max-unauthenticated-connections": 1_000,
    "max-unauthenticated-frame-bytes": 64 * 1024,
    "max-auth-failures-per-minute": 10,  # per peer address; -1 off
    "max-destination-bytes": 1_024,
    # SENDs held while their address is full (policy "block"); past this the
    # connection stops being read until they drain.
    "max-held-send-bytes": 4 * 1024 * 1024,
    # What one AMQP connection may hold (docs/amqp.md "Limits"); past one, it
    # is closed with amqp:resource-limit-exceeded.
    "max-amqp-sessions-per-connection": 256,
    "max-amqp-links-per-connection": 1_000,
    "max-amqp-partial-bytes-per-connection": 32 * 1024 * 1024,  # transfers still arriving
}

# The HTTP listener's limits (docs/configuration.md, "HTTP limits"), also under [limits]; -1 turns one off.
DEFAULT_HTTP_LIMITS: dict[str, int] = {
    "http-max-connections": 256,
    "http-max-body-bytes": 1024 * 1024,  # JSON API calls
    "http-max-upload-bytes": 256 * 1024 * 1024,  # Arrow rows staged by the Spark sink
    "http-idle-timeout-ms": 30_000,  # a kept-alive connection with no request, a stalled body
    "http-header-timeout-ms": 10_000,  # from a request's first byte to the end of its headers
}
DEFAULT_LIMITS.update(DEFAULT_HTTP_LIMITS)


def parse_hostport(key: str, value: str) -> tuple[str, int]:
    host, sep, port = str(value).rpartition(":")
    if not sep or not host:
        raise ConfigError(key, f"expected HOST:PORT, got {value!r}")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(key, f"port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(key, f"port {number} is out of range")
    return host.strip("[]"), number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ClusterConfig:
    """``[cluster]`` and ``[cluster.grouping]``, with Artemis' names (docs/cluster.md)."""

    node: str
    zookeeper: str
    name: str = "shoal"
    link: tuple[str, int] = DEFAULT_LINK  # the cluster-link listener
    grouping: str = "zookeeper"
    timeout_ms: int = 5000  # a grouping decision not made by then fails the SEND (C3)
    group_timeout_ms: int = -1  # C5: a binding unused that long is reaped; -1 never
    reaper_period_ms: int = 30_000  # C5: how often the reaper looks
    rebind_after_ms: int = -1  # C6: a node out of membership that long is forgotten
    consumerless_rebind_after_ms: int = -1  # C7: groups leave a consumerless queue
    message_load_balancing: str = "ON_DEMAND"  # C9: where ungrouped messages go
    # the link's shared secret (HMAC challenge-response); None: not authenticated
    secret: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Config:
    stomp: tuple[str, int] = ("127.0.0.1", 61613)
    http: tuple[str, int] | None = ("127.0.0.1", 8161)
    stomp_tls: tuple[str, int] | None = None
    ws: tuple[str, int] | None = None  # STOMP over WebSocket
    ws_tls: tuple[str, int] | None = None
    amqp: tuple[str, int] | None = ("127.0.0.1", 5672)  # AMQP 1.0
    amqp_tls: tuple[str, int] | None = None
    allowed_hosts: tuple[str, ...] = ()  # Host/Origin names (HTTP and WebSocket); () default
    tls_cert: str | None = None
    tls_key: str | None = None
    data: Path | None = Path("data")  # None: in-memory store
    insecure: bool = False
    repair: bool = False
    heartbeat_ms: tuple[int, int] = (10_000, 10_000)  # (we send, we want)
    shutdown_timeout: float = 5.0
    journal_segment_bytes: int = 64 * 1024 * 1024
    handshake_timeout: float = 10.0  # s to complete CONNECT; 0 off
    idle_timeout: float = 300.0  # s without a frame nor a subscription; 0 off
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    address_settings: AddressSettings = field(default_factory=AddressSettings)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    security: Security = field(default_factory=Security)
    cluster: ClusterConfig | None = None

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def listeners(self) -> list[tuple[str, tuple[str, int]]]:
        """Every listener turned on, (name, (host, port)); the cluster link is ``link``."""
        listeners = [
            ("stomp", self.stomp),
            ("stomp-tls", self.stomp_tls),
            ("amqp", self.amqp),
            ("amqp-tls", self.amqp_tls),
            ("ws", self.ws),
            ("ws-tls", self.ws_tls),
            ("http", self.http),
            ("link", self.cluster.link if self.cluster is not None else None),
        ]
        return [(name, hostport) for name, hostport in listeners if hostport is not None]

    def check_exposure(self) -> None:
        """Refuse a non-loopback listener without authentication unless --insecure.

        The cluster link is authenticated by ``[cluster] secret`` only, not
        by users (docs/cluster.md): off loopback it needs one or --insecure."""
        if self.insecure:
            return
        cluster = self.cluster
        if cluster is not None and cluster.secret is None and not is_loopback(cluster.link[0]):
            raise ConfigError(
                "cluster.link",
                f"refusing to listen on non-loopback address {cluster.link[0]} without "
                "cluster.secret or cluster.secret-file; set one or pass --insecure",
            )
        if self.security.enabled:
            return
        for key, hp in self.listeners():
            if key != "link" and not is_loopback(hp[0]):
                raise ConfigError(
                    key,
                    f"refusing to listen on non-loopback address {hp[0]} without users "
                    "configured; add users or pass --insecure",
                )


_BROKER_KEYS = {
    "stomp",
    "http",
    "stomp-tls",
    "tls-cert",
    "tls-key",
    "data",
    "insecure",
    "heartbeat",
    "shutdown-timeout",
    "journal-segment-bytes",
    "users-file",
    "ws",
    "ws-tls",
    "allowed-hosts",
    "amqp",
    "amqp-tls",
    "handshake-timeout",
    "idle-timeout",
}


def load_config(path: str | Path | None) -> Config:
    """Parse a TOML file (or nothing) into a Config."""
    raw: dict[str, Any] = {}
    base_dir = Path.cwd()
    if path is not None:
        p = Path(path)
        base_dir = p.parent
        try:
            raw = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError("--config", f"file {str(p)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(p), f"not valid TOML: {exc}") from None
    return config_from_dict(raw, base_dir)


def config_from_dict(raw: dict[str, Any], base_dir: Path | None = None) -> Config:
    base_dir = base_dir or Path.cwd()
    known = {
        "broker",
        "limits",
        "address-settings",
        "queues",
        "topics",
        "users",
        "permissions",
        "cluster",
    }
    for key in raw:
        if key not in known:
            raise ConfigError(key, f"unknown section; expected one of {', '.join(sorted(known))}")
    cfg: dict[str, Any] = {}
    broker = _table(raw, "broker")
    for key in broker:
        if key not in _BROKER_KEYS:
            raise ConfigError(f"broker.{key}", "unknown key")
    if "stomp" in broker:
        cfg["stomp"] = parse_hostport("broker.stomp", broker["stomp"])
    if "http" in broker:
        cfg["http"] = parse_hostport("broker.http", broker["http"]) if broker["http"] else None
    if broker.get("stomp-tls"):
        cfg["stomp_tls"] = parse_hostport("broker.stomp-tls", broker["stomp-tls"])
    for key in ("ws", "ws-tls", "amqp-tls"):
        if broker.get(key):
            cfg[key.replace("-", "_")] = parse_hostport(f"broker.{key}", broker[key])
    if "amqp" in broker:  # "" turns the AMQP listener off
        cfg["amqp"] = parse_hostport("broker.amqp", broker["amqp"]) if broker["amqp"] else None
    if "allowed-hosts" in broker:
        cfg["allowed_hosts"] = _allowed_hosts("broker.allowed-hosts", broker["allowed-hosts"])
    for key in ("tls-cert", "tls-key"):
        if key in broker:
            cfg[key.replace("-", "_")] = str(base_dir / broker[key])
    if "data" in broker:
        cfg["data"] = (base_dir / broker["data"]) if broker["data"] else None
    if "insecure" in broker:
        cfg["insecure"] = _bool("broker.insecure", broker["insecure"])
    if "heartbeat" in broker:
        hb = broker["heartbeat"]
        if not (
            isinstance(hb, list) and len(hb) == 2 and all(isinstance(x, int) and x >= 0 for x in hb)
        ):
            raise ConfigError(
                "broker.heartbeat", "must be [send_ms, receive_ms], two integers >= 0"
            )
        cfg["heartbeat_ms"] = (hb[0], hb[1])
    if "shutdown-timeout" in broker:
        cfg["shutdown_timeout"] = _number("broker.shutdown-timeout", broker["shutdown-timeout"])
    for key in ("handshake-timeout", "idle-timeout"):
        if key in broker:
            cfg[key.replace("-", "_")] = _number(f"broker.{key}", broker[key])
    if "journal-segment-bytes" in broker:
        cfg["journal_segment_bytes"] = _int(
            "broker.journal-segment-bytes", broker["journal-segment-bytes"], 4096
        )

    limits = dict(DEFAULT_LIMITS)
    for key, value in _table(raw, "limits").items():
        if key not in DEFAULT_LIMITS:
            raise ConfigError(f"limits.{key}", f"unknown limit; known: {', '.join(DEFAULT_LIMITS)}")
        limits[key] = _int(f"limits.{key}", value, -1)
    cfg["limits"] = limits

    try:
        settings_raw = _table(raw, "address-settings")
        for pattern, values in settings_raw.items():
            if not isinstance(values, dict):
                raise ConfigError(f"address-settings.{pattern}", "must be a table")
        cfg["address_settings"] = AddressSettings.from_raw(settings_raw)
    except InvalidSetting as exc:
        raise ConfigError(f"address-settings: {exc.name}", str(exc)) from None
    queues = {}
    for name, values in _table(raw, "queues").items():
        if not isinstance(values, dict):
            raise ConfigError(f"queues.{name}", "must be a table of queue settings")
        try:
            coerce_settings(values)
        except InvalidSetting as exc:
            raise ConfigError(f"queues.{name}.{exc.name}", str(exc)) from None
        queues[name] = dict(values)
    cfg["queues"] = queues
    topics = raw.get("topics", [])
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise ConfigError("topics", "must be a list of topic names")
    cfg["topics"] = tuple(topics)

    users_raw = dict(_table(raw, "users"))
    if "users-file" in broker:
        users_raw.update(load_users_file(base_dir / broker["users-file"]))
    permissions = raw.get("permissions", [])
    if not isinstance(permissions, list):
        raise ConfigError("permissions", "must be an array of tables ([[permissions]])")
    cfg["security"] = parse_security(users_raw, permissions)
    if "cluster" in raw:
        cfg["cluster"] = parse_cluster(_table(raw, "cluster"), base_dir)
    return Config(**cfg)


_CLUSTER_KEYS = {
    "name",
    "node",
    "link",
    "zookeeper",
    "grouping",
    "message-load-balancing",
    "secret",
    "secret-file",
}
MIN_SECRET_BYTES = 16
_LOAD_BALANCING = ("ON_DEMAND", "STRICT", "OFF")  # Artemis' names (C9)
# [cluster.grouping] key -> (ClusterConfig field, default, smallest value)
_GROUPING_TIMES = {
    "timeout": ("timeout_ms", 5000, 1),
    "group-timeout": ("group_timeout_ms", -1, -1),
    "reaper-period": ("reaper_period_ms", 30_000, 1),
    "rebind-after": ("rebind_after_ms", -1, -1),
    "consumerless-rebind-after": ("consumerless_rebind_after_ms", -1, -1),
}
_GROUPING_TYPES = ("zookeeper", "local", "remote")


def parse_cluster(raw: dict[str, Any], base_dir: Path | None = None) -> ClusterConfig:
    for key in raw:
        if key not in _CLUSTER_KEYS:
            raise ConfigError(
                f"cluster.{key}", f"unknown key; known: {', '.join(sorted(_CLUSTER_KEYS))}"
            )
    out: dict[str, Any] = {}
    for key in ("name", "node"):
        value = raw.get(key, "shoal" if key == "name" else None)
        if value is None:
            raise ConfigError(f"cluster.{key}", "missing: every node needs a unique id")
        if not isinstance(value, str) or not value or not _is_plain_name(value):
            raise ConfigError(
                f"cluster.{key}",
                f"must be a non-empty name of letters, digits, '.', '_' or '-', got {value!r}",
            )
        out[key] = value
    if "link" in raw:
        out["link"] = parse_hostport("cluster.link", raw["link"])
    out["secret"] = _cluster_secret(raw, base_dir or Path.cwd())
    balancing = raw.get("message-load-balancing", "ON_DEMAND")
    if balancing not in _LOAD_BALANCING:
        raise ConfigError(
            "cluster.message-load-balancing",
            f"must be one of {', '.join(_LOAD_BALANCING)}, got {balancing!r}",
        )
    out["message_load_balancing"] = balancing
    grouping = _table(raw, "grouping")
    for key in grouping:
        if key != "type" and key not in _GROUPING_TIMES:
            raise ConfigError(f"cluster.grouping.{key}", "unknown key")
    kind = grouping.get("type", "zookeeper")
    if kind not in _GROUPING_TYPES:
        raise ConfigError(
            "cluster.grouping.type", f"must be one of {', '.join(_GROUPING_TYPES)}, got {kind!r}"
        )
    out["grouping"] = kind
    for key, (field_name, default, minimum) in _GROUPING_TIMES.items():
        value = _int(f"cluster.grouping.{key}", grouping.get(key, default), minimum)
        if minimum == -1 and value == 0:
            raise ConfigError(
                f"cluster.grouping.{key}",
                "must be -1 (off) or a positive number of milliseconds, got 0",
            )
        out[field_name] = value
    zk = raw.get("zookeeper")
    if not isinstance(zk, str) or not zk.strip():
        raise ConfigError(
            "cluster.zookeeper",
            "missing: the ZooKeeper connect string, e.g. "
            "'127.0.0.1:2181' (membership, and the zookeeper grouping handler's decisions)",
        )
    for part in zk.split("/", 1)[0].split(","):
        parse_hostport("cluster.zookeeper", part)
    out["zookeeper"] = zk
    return ClusterConfig(**out)


def _cluster_secret(raw: dict[str, Any], base_dir: Path) -> bytes | None:
    """``secret``, or the first line of ``secret-file``; at least MIN_SECRET_BYTES."""
    if "secret" in raw and "secret-file" in raw:
        raise ConfigError(
            "cluster.secret-file", "set either cluster.secret or secret-file, not both"
        )
    if "secret-file" in raw:
        key = "cluster.secret-file"
        if not isinstance(raw["secret-file"], str) or not raw["secret-file"]:
            raise ConfigError(key, f"must be a file name, got {raw['secret-file']!r}")
        path = base_dir / raw["secret-file"]
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(key, f"cannot read {str(path)!r}: {exc}") from None
        value: Any = lines[0].strip() if lines else ""
    elif "secret" in raw:
        key, value = "cluster.secret", raw["secret"]
        if not isinstance(value, str):
            raise ConfigError(key, "must be a string")
    else:
        return None
    secret = value.encode()
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(
            key, f"the secret must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}"
        )
    return bytes(secret)


def _is_plain_name(value: str) -> bool:
    return all(c.isalnum() or c in "._-" for c in value)


def _table(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a table")
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
    return value


def _int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _allowed_hosts(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(key, 'must be a list of host names ("name" or "name:port")')
    try:
        AllowedHosts.parse(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None
    return tuple(v.strip().lower() for v in value)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(key, f"must be a non-negative number, got {value!r}")
    return float(value)


def core_limits(limits: dict[str, int]) -> CoreLimits:
    """The core's share of ``[limits]``: one place enforces each limit."""
    return CoreLimits(
        max_subscriptions_per_connection=limits["max-subscriptions-per-connection"],
        max_transactions_per_connection=limits["max-transactions-per-connection"],
        max_transaction_size=limits["max-transaction-size"],
        max_delivery_burst=limits["max-delivery-burst"],
    )
