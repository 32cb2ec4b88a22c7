"""One error family for the whole broker.

Every error a client can see has a stable ``code`` from :data:`CATALOGUE`.
Layers raise these; only the boundaries (the STOMP glue in ``server/``, the
HTTP handlers in ``management/``, the CLI) turn them into ERROR frames, HTTP
statuses or messages.
"""

from __future__ import annotations

# code -> (HTTP status, one-line meaning). Client-visible and stable.
CATALOGUE: dict[str, tuple[int, str]] = {
    "protocol": (400, "the frame breaks the STOMP specification"),
    "limit": (413, "a configured limit was exceeded"),
    "bad-header": (400, "a header has a value the broker cannot use"),
    "bad-destination": (400, "the destination is malformed or unknown"),
    "bad-parameter": (400, "a destination parameter or setting is unknown or invalid"),
    "not-found": (404, "no such queue, group, subscription, transaction or connection"),
    "conflict": (409, "the object exists or is in a state that forbids the operation"),
    "unauthenticated": (401, "credentials are missing or wrong"),
    "forbidden": (403, "the user lacks the permission for this address"),
    "full": (507, "a memory or disk limit refused the message"),
    "store": (503, "the journal could not write or read"),
    "config": (400, "the configuration is invalid"),
    "no-decision": (503, "the cluster could not decide where a message group goes in time"),
    "internal": (500, "an unexpected broker fault"),
    # HTTP listener only (docs/configuration.md, "HTTP limits")
    "misdirected": (421, "the Host header names a host the broker does not answer to"),
    "timeout": (408, "the client did not send its request in time"),
    "busy": (503, "the listener is at its connection limit"),
}


class BrokerError(Exception):
    """Root of every error Shoal raises on purpose."""

    code = "internal"

    @property
    def http_status(self) -> int:
        return CATALOGUE[self.code][0]


# --- protocol ---------------------------------------------------------------


class ProtocolError(BrokerError):
    """The STOMP conversation went wrong."""

    code = "protocol"

    def __init__(self, message: str, *, error_frame_hint: str | None = None) -> None:
        super().__init__(message)
        self.error_frame_hint = error_frame_hint or message


class LocalProtocolError(ProtocolError):
    """We misused the protocol API (a bug on our side of the wire)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the STOMP specification; answer with an ERROR frame."""


class LimitExceeded(RemoteProtocolError):
    """A frame, header or connection limit was passed."""

    code = "limit"

    def __init__(self, limit_name: str, limit: int, message: str | None = None) -> None:
        super().__init__(message or f"{limit_name} exceeded (limit {limit})")
        self.limit_name = limit_name
        self.limit = limit


# --- broker core ------------------------------------------------------------


class InvalidHeader(BrokerError, ValueError):
    """A header value is unusable, e.g. a JMSXGroupSeq that is not an integer."""

    code = "bad-header"

    def __init__(self, header: str, value: str, reason: str) -> None:
        super().__init__(f"header {header!r} has invalid value {value!r}: {reason}")
        self.header = header
        self.value = value


class InvalidSelector(InvalidHeader):
    """A SUBSCRIBE ``selector`` that does not parse or cannot be boolean."""

    def __init__(self, selector: str, reason: str) -> None:
        shown = selector if len(selector) <= 200 else selector[:200] + "..."
        super().__init__("selector", shown, reason)
        self.reason = reason


class InvalidDestination(BrokerError, ValueError):
    code = "bad-destination"


class InvalidSetting(BrokerError, ValueError):
    """An unknown or malformed queue setting / destination parameter."""

    code = "bad-parameter"

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class NotFound(BrokerError, LookupError):
    code = "not-found"


class Conflict(BrokerError):
    code = "conflict"


class Unauthenticated(BrokerError, PermissionError):
    code = "unauthenticated"


class Forbidden(BrokerError, PermissionError):
    code = "forbidden"


class ResourceFull(BrokerError):
    """A queue's or the broker's memory limit refused a message (policy 'fail')."""

    code = "full"


# --- store ------------------------------------------------------------------


class StoreError(BrokerError, OSError):
    """The journal failed to write or sync (disk full, I/O error)."""

    code = "store"


class CorruptRecordError(StoreError):
    """A damaged record before the tail: needs `shoal serve --repair`."""

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(
            f"corrupt record in {segment} at offset {offset}: {reason}. The broker will not "
            "start on a damaged journal; `shoal journal check DIR` shows the damage and "
            "`shoal serve --repair` keeps every valid record and moves the damaged bytes aside"
        )
        self.segment = segment
        self.offset = offset
        self.reason = reason


# --- configuration ----------------------------------------------------------


class ConfigError(BrokerError, ValueError):
    """The configuration file or a CLI option is invalid; names the key."""

    code = "config"

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class ListenerUnavailable(ConfigError):
    """A listener cannot bind its address (in use, not local, not permitted):
    ``shoal serve`` prints one line naming it and exits with status 2."""


class GroupDecisionTimeout(BrokerError):
    """Cluster (C3): no grouping decision within the timeout; the SEND is refused."""

    code = "no-decision"
