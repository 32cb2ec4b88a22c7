"""Schemathesis against the OpenAPI document of a live broker: no 5xx, responses match.

Every operation in the document is exercised with generated (valid and
invalid) input, with schemathesis' default checks: server errors, status
codes and content types that the document declares, response bodies against
their schemas, invalid input rejected with 4xx, valid input not rejected.

The schema is loaded from the same builder that serves /openapi.json (the
first test checks the live document is exactly that), so collection needs
no running broker; the requests go to one broker per module.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from shoal.management.openapi import build_document
from support import ShoalProcess, get_json, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

schema = schemathesis.openapi.from_dict(build_document(security=False))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """One broker with some real objects for generated requests to find."""
    import stomp

    srv = ShoalProcess(tmp_path_factory.mktemp("schemathesis")).start()
    consumer = stomp.Connection12([("127.0.0.1", srv.stomp_port)], heartbeats=(0, 0))
    producer = stomp.Connection12([("127.0.0.1", srv.stomp_port)], heartbeats=(0, 0))
    try:
        consumer.connect(wait=True)
        consumer.subscribe("/queue/orders", id="s1", ack="client-individual")
        producer.connect(wait=True)
        for i in range(6):
            producer.send("/queue/orders", f"m{i}", headers={"JMSXGroupID": f"g{i % 3}"})
        producer.send("/queue/backlog", "waiting", headers={"JMSXGroupID": "g0"})

        def delivered() -> bool:
            return get_json(f"{srv.http_url}/api/queues/orders")["in_flight"] == 6

        wait_for(delivered)
        yield srv
    finally:
        for conn in (consumer, producer):
            if conn.is_connected():
                conn.disconnect()
        srv.stop()


def test_served_document_is_the_tested_one(live):
    assert get_json(f"{live.http_url}/openapi.json") == build_document(security=False)


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_management_api_conforms_to_its_openapi_document(case, live):
    case.call_and_validate(base_url=live.http_url)


secured_schema = schemathesis.openapi.from_dict(build_document(security=True))


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with users: an admin (browse + manage) and a viewer (browse only)."""
    from shoal.security import add_user

    base = tmp_path_factory.mktemp("schemathesis-secured")
    users = base / "users.json"
    add_user(users, "admin", "pw", ["admin"])
    add_user(users, "viewer", "pw", ["viewer"])
    config = base / "shoal.toml"
    config.write_text(
        f'[broker]\nusers-file = "{users}"\n'
        '[[permissions]]\nmatch = "#"\nsend = ["admin"]\nconsume = ["admin"]\n'
        'browse = ["admin", "viewer"]\nmanage = ["admin"]\n'
    )
    srv = ShoalProcess(base / "data", config).start()
    yield srv
    srv.stop()


@secured_schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@pytest.mark.parametrize("user", ["admin", "viewer"])
def test_secured_api_conforms_with_basic_auth(case, secured, user):
    case.call_and_validate(base_url=secured.http_url, auth=(user, "pw"))
