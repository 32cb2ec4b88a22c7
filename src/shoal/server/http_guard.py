"""Which Host and Origin a listener answers to: DNS rebinding and cross-site checks.

Pure functions over header values, shared by the HTTP listener (server/http.py)
and the WebSocket upgrade, so that both refuse the same requests:

* ``host_allowed(host_header, allowed)``: the ``Host`` header names one of the
  broker's own names (``allowed-hosts``). A page that rebinds its own DNS name to
  the broker's address still sends its name in ``Host``; refuse it (HTTP 421).
* ``origin_allowed(origin, allowed)``: a browser's ``Origin`` names an allowed host
  (for the WebSocket handshake, which browsers make cross-origin freely).
* ``same_origin(origin, host_header)``: a browser's state-changing request comes
  from a page this listener served (the management API's POST/DELETE rule).

A missing header is allowed: only browsers send ``Origin``, and only HTTP/1.0
clients omit ``Host`` (h11 refuses an HTTP/1.1 request without one).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

# Names every listener answers to unless allowed-hosts says otherwise.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ANY_HOST = "*"  # an allowed-hosts entry that turns the check off
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")


def split_host(value: str) -> tuple[str, int | None] | None:
    """``"Example.COM:80"`` -> ``("example.com", 80)``, ``"[::1]"`` -> ``("::1", None)``;
    None when the value is not a host with an optional port."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else None
    elif value.count(":") > 1:  # a bare IPv6 address, as in allowed-hosts = ["::1"]
        host, port = value, None
    else:
        host, _, port = value.partition(":")
        port = port if ":" in value else None
    if not host:
        return None
    if port is None:
        return host, None
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        return None
    return host, int(port)


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """Host names a listener answers to: any port for a bare name, one port for ``name:port``.

    ``any_address``: a listener on every address (``0.0.0.0``, ``::``) also
    takes any IP address in ``Host``: each is one of its addresses, and DNS
    rebinding needs a name.
    """

    names: frozenset[str]
    pairs: frozenset[tuple[str, int]] = frozenset()
    any_host: bool = False
    any_address: bool = False

    @classmethod
    def parse(cls, entries: Iterable[str], *, any_address: bool = False) -> AllowedHosts:
        """Build from ``allowed-hosts`` entries; ValueError names a malformed one."""
        names: set[str] = set()
        pairs: set[tuple[str, int]] = set()
        any_host = False
        for entry in entries:
            if entry.strip() == ANY_HOST:
                any_host = True
                continue
            parsed = split_host(entry)
            if parsed is None:
                raise ValueError(f"{entry!r} is not a host name with an optional port")
            host, port = parsed
            if port is None:
                names.add(host)
            else:
                pairs.add((host, port))
        return cls(frozenset(names), frozenset(pairs), any_host, any_address)

    @classmethod
    def for_listener(cls, configured: Sequence[str], listen_host: str) -> AllowedHosts:
        """``allowed-hosts`` as configured, or by default the listener's own address,
        ``localhost``, ``127.0.0.1`` and ``[::1]`` (and, when the listener binds
        every address, this machine's host name and any IP address)."""
        if configured:
            return cls.parse(configured)
        wildcard = listen_host in WILDCARD_ADDRESSES
        entries = [*LOOPBACK_NAMES, listen_host.strip("[]")]
        if wildcard:
            entries.append(socket.gethostname())
        return cls.parse((e for e in entries if e), any_address=wildcard)

    def allows(self, hostport: str) -> bool:
        """``hostport`` (a Host header, an origin's authority) names an allowed host."""
        if self.any_host:
            return True
        parsed = split_host(hostport)
        if parsed is None:
            return False
        host, port = parsed
        host = host.rstrip(".")  # "localhost." is the same name
        if host in self.names:
            return True
        return port is not None and (host, port) in self.pairs


def host_allowed(host_header: str | None, allowed: AllowedHosts) -> bool:
    """May a request with this ``Host`` header be answered (DNS rebinding check)?"""
    if host_header is None or allowed.allows(host_header):
        return True
    parsed = split_host(host_header)
    return allowed.any_address and parsed is not None and is_ip_literal(parsed[0])


def origin_allowed(origin: str | None, allowed: AllowedHosts) -> bool:
    """May a browser page of this ``Origin`` use the listener (e.g. a WebSocket)?
    Only a named host will do: an address says nothing about whose page it is."""
    if origin is None:
        return True  # not a browser
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        return False  # "null" (sandboxed pages, file:) and anything unparsable
    return allowed.allows(parts.netloc)


def same_origin(origin: str | None, host_header: str | None) -> bool:
    """Does a browser request come from a page served by the host it addresses?"""
    if origin is None:
        return True  # not a browser
    netloc = urlsplit(origin.strip()).netloc
    return bool(netloc) and netloc.lower() == (host_header or "").strip().lower()


__all__ = [
    "LOOPBACK_NAMES",
    "AllowedHosts",
    "host_allowed",
    "origin_allowed",
    "same_origin",
    "split_host",
]
