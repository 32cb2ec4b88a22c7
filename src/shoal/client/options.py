"""Connection URLs: ``stomp://user:pass@host:port?option=value&...``.

Schemes: ``stomp`` (plain TCP, default port 61613) and ``stomp+ssl``
(``stomp+tls`` is the same; TLS with the standard :mod:`ssl` module, default
port 61614). User and password are percent-decoded.

Options (names are case-insensitive; ``-`` and ``_`` are ignored, so
``autoGroup``, ``auto-group`` and ``auto_group`` are one option):

=====================  ===============================================================
``autoGroup``          ``true``: every producer gets its own random group id, sent as
                       ``JMSXGroupID`` on everything it sends (default ``false``).
``groupID``            a fixed group id for everything sent on this connection.
``heartbeat``          ``CX,CY`` in milliseconds: how often we send, how often we want
                       to hear from the broker (default ``10000,10000``; ``0,0`` off).
``reconnect``          ``true``: reconnect with backoff when the connection drops, and
                       subscribe again (default ``false``).
``reconnectDelay``     first backoff in ms (default 100); doubles up to
``reconnectMaxDelay``  (default 5000 ms).
``reconnectAttempts``  give up after this many failed attempts in a row (default -1:
                       never).
``timeout``            ms to wait for CONNECTED and for receipts (default 30000).
``host``               the STOMP ``host`` header (virtual host; default the URL host).
``clientId``           the ``client-id`` header.
``cafile``             TLS: CA bundle to verify the broker with (default system CAs).
``verify``             TLS: ``false`` skips certificate and host name checks.
``certfile``           TLS: client certificate (PEM), with ``keyfile``.
=====================  ===============================================================
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from shoal.client.errors import InvalidURL

__all__ = ["DEFAULT_URL", "ClientOptions", "parse_url"]

DEFAULT_URL = "stomp://127.0.0.1:61613"

_SCHEMES = {"stomp": False, "stomp+tcp": False, "stomp+ssl": True, "stomp+tls": True}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Everything a connection URL says, validated."""

    host: str = "127.0.0.1"
    port: int = 61613
    tls: bool = False
    login: str | None = None
    passcode: str | None = None
    auto_group: bool = False
    group_id: str | None = None
    heartbeat: tuple[int, int] = (10_000, 10_000)
    reconnect: bool = False
    reconnect_delay: float = 0.1  # s
    reconnect_max_delay: float = 5.0  # s
    reconnect_attempts: int = -1
    timeout: float = 30.0  # s
    vhost: str | None = None
    client_id: str | None = None
    cafile: str | None = None
    verify: bool = True
    certfile: str | None = None
    keyfile: str | None = None

    @property
    def address(self) -> str:
        """``host:port`` as people write it (for messages)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def url(self, *, password: bool = False) -> str:
        """The URL back (without options); the password is masked unless asked."""
        scheme = "stomp+ssl" if self.tls else "stomp"
        auth = ""
        if self.login is not None:
            auth = self.login
            if self.passcode is not None:
                auth += ":" + (self.passcode if password else "***")
            auth += "@"
        return f"{scheme}://{auth}{self.address}"

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.cafile)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidURL(f"URL option {name!r} must be true or false, not {value!r}")


def _int(name: str, value: str, minimum: int) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise InvalidURL(f"URL option {name!r} must be an integer, not {value!r}") from None
    if n < minimum:
        raise InvalidURL(f"URL option {name!r} must be >= {minimum}, not {n}")
    return n


def _heartbeat(name: str, value: str) -> tuple[int, int]:
    parts = value.split(",")
    if len(parts) != 2:
        raise InvalidURL(f"URL option {name!r} must be two integers 'CX,CY' (ms), not {value!r}")
    return _int(name, parts[0], 0), _int(name, parts[1], 0)


def parse_url(url: str | None = None, **overrides: object) -> ClientOptions:
    """Parse a connection URL into :class:`ClientOptions`.

    ``overrides`` (field names of :class:`ClientOptions`) win over the URL:
    ``parse_url("stomp://h:1", reconnect=True)``. Raises :class:`InvalidURL`
    naming the part that is wrong.
    """
    url = url or DEFAULT_URL
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        reason = str(exc)
        raise InvalidURL(f"invalid URL {url!r}: {reason[:1].lower()}{reason[1:]}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise InvalidURL(
            f"unsupported URL scheme {parts.scheme!r} in {url!r}; use stomp:// or stomp+ssl://"
        )
    tls = _SCHEMES[scheme]
    if parts.path not in ("", "/"):
        raise InvalidURL(f"unexpected path {parts.path!r} in {url!r} (give options as ?k=v)")
    kw: dict[str, object] = {
        "host": parts.hostname or "127.0.0.1",
        "port": port if port is not None else (61614 if tls else 61613),
        "tls": tls,
        "login": unquote(parts.username) if parts.username is not None else None,
        "passcode": unquote(parts.password) if parts.password is not None else None,
    }
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidURL(f"malformed options {parts.query!r} in {url!r}") from None
    for raw_name, value in query:
        name = raw_name.lower().replace("-", "").replace("_", "")
        if name == "autogroup":
            kw["auto_group"] = _bool(raw_name, value)
        elif name in ("groupid", "group"):
            if not value:
                raise InvalidURL(f"URL option {raw_name!r} must not be empty")
            kw["group_id"] = value
        elif name in ("heartbeat", "heartbeats"):
            kw["heartbeat"] = _heartbeat(raw_name, value)
        elif name == "reconnect":
            kw["reconnect"] = _bool(raw_name, value)
        elif name == "reconnectdelay":
            kw["reconnect_delay"] = _int(raw_name, value, 1) / 1000
        elif name == "reconnectmaxdelay":
            kw["reconnect_max_delay"] = _int(raw_name, value, 1) / 1000
        elif name in ("reconnectattempts", "maxreconnectattempts"):
            kw["reconnect_attempts"] = _int(raw_name, value, -1)
        elif name == "timeout":
            kw["timeout"] = _int(raw_name, value, 1) / 1000
        elif name in ("host", "vhost"):
            kw["vhost"] = value
        elif name == "clientid":
            kw["client_id"] = value
        elif name == "cafile":
            kw["cafile"] = value
        elif name == "verify":
            kw["verify"] = _bool(raw_name, value)
        elif name == "certfile":
            kw["certfile"] = value
        elif name == "keyfile":
            kw["keyfile"] = value
        else:
            raise InvalidURL(f"unknown URL option {raw_name!r} in {url!r}")
    if kw.get("auto_group") and kw.get("group_id"):
        raise InvalidURL("URL options autoGroup and groupID exclude each other")
    for key in overrides:
        if key not in ClientOptions.__dataclass_fields__:
            raise TypeError(f"unknown connection option {key!r}")
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return ClientOptions(**kw)  # type: ignore[arg-type]
