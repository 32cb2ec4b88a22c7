"""Fixtures for side-by-side tests: the same scenario against ActiveMQ 5.17, Artemis 2.40
and Shoal.

`activemq` is one private ActiveMQ instance for the whole session (bench/peers/activemq.py;
each test uses its own queue). It is skipped only if the Debian package is missing and
cannot be installed. `artemis` is one private Artemis instance (bench/peers/artemis.py,
fetched with Maven). `sidebyside_broker` is parametrised over the three brokers.
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
from bench.peers import artemis as art  # noqa: E402
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


@pytest.fixture(scope="session")
def artemis(tmp_path_factory):
    """A private Apache Artemis 2.40 (Maven Central) with STOMP on a free loopback port."""
    handle = art.start_artemis(tmp_path_factory.mktemp("artemis"))
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


def pytest_generate_tests(metafunc):
    """ActiveMQ and Shoal for every scenario; Artemis too for those marked `artemis`
    (Artemis counts a STOMP consumer's window in bytes, so scenarios built on a prefetch
    counted in messages do not carry over)."""
    if "sidebyside_broker" in metafunc.fixturenames:
        brokers = ["activemq", "shoal"]
        if metafunc.definition.get_closest_marker("artemis") is not None:
            brokers.insert(1, "artemis")
        metafunc.parametrize("sidebyside_broker", brokers, indirect=True)


@pytest.fixture
def sidebyside_broker(request) -> Broker:
    if request.param in ("activemq", "artemis"):
        h = request.getfixturevalue(request.param)
        return Broker(request.param, h.stomp_port)
    return request.getfixturevalue("shoal_broker")
