"""Fixtures for side-by-side tests: the same scenario against ActiveMQ 5.17, Artemis 2.40
and Shoal.

`activemq` is one private ActiveMQ instance for the whole session (bench/peers/activemq.py;
each test uses its own queue). It is skipped only if the Debian package is missing and
cannot be installed. `artemis` is one private Artemis instance (bench/peers/artemis.py,
fetched with Maven). `sidebyside_broker` is parametrised over the three brokers.

Each scenario says what it observed on each broker (`observe`). With
SHOAL_RECORD_BEHAVIOUR=PATH set, the session writes those outcomes to PATH as JSON
(bench/recorded/behaviour-*.json), which bench/report.py shows as the behaviour table.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
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
    version: str = ""


@dataclass
class Behaviour:
    """What each scenario observed, per broker, for the record SHOAL_RECORD_BEHAVIOUR asks for."""

    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    def observer(self, broker: Broker) -> Callable[[str, str], None]:
        self.versions[broker.name] = broker.version

        def observe(scenario: str, outcome: str) -> None:
            self.outcomes.setdefault(scenario, {})[broker.name] = outcome

        return observe


BEHAVIOUR = Behaviour()


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get("SHOAL_RECORD_BEHAVIOUR")
    if not path or not BEHAVIOUR.outcomes:
        return
    doc = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "SHOAL_RECORD_BEHAVIOUR=PATH python -m pytest " + " ".join(session.config.args),
        "passed": exitstatus == 0,
        "brokers": BEHAVIOUR.versions,
        "scenarios": BEHAVIOUR.outcomes,
    }
    Path(path).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


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
    from bench.peers.shoal import shoal_version, start_shoal

    if factory is not None:
        srv = factory()
        yield Broker("shoal", srv.stomp_port, shoal_version())
        return
    handle = start_shoal(tmp_path / "shoal")
    try:
        yield Broker("shoal", handle.stomp_port, handle.version)
    finally:
        handle.stop()


def pytest_generate_tests(metafunc):
    """Every scenario against ActiveMQ, Artemis and Shoal."""
    if "sidebyside_broker" in metafunc.fixturenames:
        metafunc.parametrize("sidebyside_broker", ["activemq", "artemis", "shoal"], indirect=True)


@pytest.fixture
def sidebyside_broker(request) -> Broker:
    if request.param in ("activemq", "artemis"):
        h = request.getfixturevalue(request.param)
        return Broker(request.param, h.stomp_port, h.version)
    return request.getfixturevalue("shoal_broker")


@pytest.fixture
def observe(sidebyside_broker) -> Callable[[str, str], None]:
    """observe(scenario, outcome): what this scenario saw on this broker, for the record."""
    return BEHAVIOUR.observer(sidebyside_broker)
