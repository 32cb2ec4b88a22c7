"""Errors the Shoal client raises: one family under :class:`ClientError`.

``ClientError`` is a :class:`shoal.errors.BrokerError`, so a program (or the
CLI) that already handles Shoal's error family handles these too. Each
subclass also subclasses the builtin it really is (``ConnectionError``,
``TimeoutError``, ``ValueError``), so generic handlers keep working.
"""

from __future__ import annotations

from shoal.errors import CATALOGUE, BrokerError

__all__ = [
    "ClientError",
    "ClientTimeout",
    "ConnectFailed",
    "ConnectionLost",
    "InvalidURL",
    "ManagementError",
    "ServerError",
]


class ClientError(BrokerError):
    """Root of every error raised by :mod:`shoal.client`."""


class InvalidURL(ClientError, ValueError):
    """A connection URL or one of its ``?options`` is malformed or unknown."""

    code = "config"


class ConnectFailed(ClientError, ConnectionError):
    """The TCP/TLS connection to the broker could not be opened."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot connect to {address}: {reason}")
        self.address = address
        self.reason = reason


class ConnectionLost(ClientError, ConnectionError):
    """The connection closed or went silent while it was in use.

    Anything waiting (a receipt, ``receive()``) fails with this. A message
    sent without a receipt just before may or may not have been stored.
    """


class ClientTimeout(ClientError, TimeoutError):
    """The broker did not answer (CONNECTED or RECEIPT) in time."""


class ServerError(ClientError):
    """The broker sent an ERROR frame; it closes the connection after it.

    ``message`` is the frame's ``message`` header, ``details`` its body as
    text, ``code`` the broker's stable error code (see
    :data:`shoal.errors.CATALOGUE`, e.g. ``"bad-header"``,
    ``"unauthenticated"``), ``receipt_id`` the receipt of the frame that
    failed when the broker named it.
    """

    def __init__(
        self,
        message: str,
        *,
        details: str = "",
        code: str | None = None,
        receipt_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"broker error: {message}" if message else "broker error (no message)")
        self.message = message
        self.details = details
        self.code = code if code in CATALOGUE else "internal"
        self.receipt_id = receipt_id
        self.headers = dict(headers or {})


class ManagementError(ClientError):
    """The management HTTP API refused a request (4xx/5xx) or was unreachable.

    ``status`` is the HTTP status (0 when no answer came), ``code`` the
    broker's error code from the JSON body when it sent one.
    """

    def __init__(self, message: str, *, status: int = 0, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        if code in CATALOGUE:
            self.code = code
