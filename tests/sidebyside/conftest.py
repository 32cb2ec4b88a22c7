"""Fixtures for side-by-side tests: the same scenario against ActiveMQ 5.17 and Shoal.

`activemq` is one private ActiveMQ instance for the whole session (bench/peers/activemq.py;
each test uses its own queue). It is skipped only if the Debian package is missing and
cannot be installed. `sidebyside_broker` is parametrised over both brokers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # bench/

from bench.peers import activemq as amq  # noqa: E402
from bench.peers.common import have_package  # noqa: E402

from skips import skip_missing  # noqa: E402


@dataclass
class Broker:
    name: str
    stomp_port: int


@pytest.fixture(scope="session")
def activemq(tmp_path_factory):
    """A private ActiveMQ 5.17 (Debian package) with STOMP on a free loopback port."""
    if not have_package(amq.PACKAGE):
        try:
            amq.ensure_installed()
        except Exception as exc:
            skip_missing("activemq", f"make sysdeps; installing it here failed: {exc}")
    handle = amq.start_activemq(tmp_path_factory.mktemp("activemq"))
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def shoal_broker(request, tmp_path):
    """`shoal serve` on free ports: the shared `shoal_server` fixture if there is one."""
    try:
        factory = request.getfixturevalue("shoal_server")
    except pytest.FixtureLookupError:
        factory = None
    if factory is not None:
        srv = factory()
        yield Broker("shoal", srv.stomp_port)
        return
    from bench.peers.shoal import start_shoal

    handle = start_shoal(tmp_path / "shoal")
    try:
        yield Broker("shoal", handle.stomp_port)
    finally:
        handle.stop()


@pytest.fixture(params=["activemq", "shoal"])
def sidebyside_broker(request) -> Broker:
    if request.param == "activemq":
        h = request.getfixturevalue("activemq")
        return Broker("activemq", h.stomp_port)
    return request.getfixturevalue("shoal_broker")
