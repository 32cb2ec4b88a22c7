from __future__ import annotations

from pathlib import Path

import pytest

from shoal.errors import ConfigError
from shoal.server.config import config_from_dict, load_config


def test_defaults_listen_on_loopback_only():
    cfg = config_from_dict({})
    assert cfg.stomp == ("127.0.0.1", 61613)
    assert cfg.http == ("127.0.0.1", 8161)
    assert cfg.data == Path.cwd() / "data" or cfg.data == Path("data")
    cfg.check_exposure()  # loopback needs no users


def test_queue_and_address_settings_resolve_most_specific_first():
    cfg = config_from_dict(
        {
            "address-settings": {
                "#": {"max-delivery-attempts": 3},
                "orders.#": {"default-group-buckets": 16},
                "orders.eu": {"group-rebalance": True},
            },
            "queues": {"orders.eu": {"group-mode": "shared"}},
        }
    )
    resolved = cfg.address_settings.resolve("orders.eu", {"group_mode": "shared"})
    assert resolved.max_delivery_attempts == 3
    assert resolved.group_buckets == 16
    assert resolved.group_rebalance is True
    assert resolved.group_mode == "shared"
    assert cfg.address_settings.resolve("billing").group_buckets == -1


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"broker": {"stomp": "nohost"}}, "broker.stomp"),
        ({"broker": {"stomp": "127.0.0.1:99999"}}, "broker.stomp"),
        ({"broker": {"bogus": 1}}, "broker.bogus"),
        ({"queues": {"q": {"group-mode": "loose"}}}, "queues.q.group-mode"),
        ({"queues": {"q": {"no-such-setting": 1}}}, "queues.q.no-such-setting"),
        ({"address-settings": {"#": {"group-buckets": "many"}}}, "group-buckets"),
        ({"limits": {"max-frame-bytes": "big"}}, "limits.max-frame-bytes"),
        ({"limits": {"max-widgets": 1}}, "limits.max-widgets"),
        ({"users": {"bob": {"roles": ["x"]}}}, "users.bob"),
        ({"permissions": [{"match": "#", "fly": ["x"]}]}, "permissions[0].fly"),
        ({"mystery": {}}, "mystery"),
    ],
)
def test_bad_config_names_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert key in str(info.value)


def test_non_loopback_needs_users_or_insecure():
    cfg = config_from_dict({"broker": {"stomp": "0.0.0.0:61613"}})
    with pytest.raises(ConfigError, match="non-loopback"):
        cfg.check_exposure()
    cfg.replace(insecure=True).check_exposure()


def test_load_config_reports_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[broker\nstomp=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


@pytest.mark.parametrize(
    ("raw", "budget"),
    [
        ({}, False),
        ({"limits": {"global-max-size": 0}}, True),
        ({"address-settings": {"orders.#": {"max-size-bytes": 1000}}}, True),
        ({"address-settings": {"orders.#": {"max-size-bytes": -1}}}, False),
        ({"queues": {"q": {"max-size-bytes": 10}}}, True),
    ],
)
def test_a_memory_budget_anywhere_makes_the_journal_recover_lazily(raw, budget):
    from shoal.server.app import has_memory_budget

    assert has_memory_budget(config_from_dict(raw)) is budget


def test_core_limits_come_from_the_config_and_the_core_enforces_them():
    from shoal.broker.core import Broker
    from shoal.errors import LimitExceeded
    from shoal.server.config import core_limits

    cfg = config_from_dict(
        {"limits": {"max-subscriptions-per-connection": 2, "max-transactions-per-connection": 1}}
    )
    b = Broker(cfg.address_settings, 0.0, limits=core_limits(cfg.limits))
    b.connect(1, 0.0)
    b.subscribe(1, "a", "/queue/q", "auto", {}, 0.0)
    b.subscribe(1, "b", "/queue/q", "auto", {}, 0.0)
    with pytest.raises(LimitExceeded, match="max-subscriptions-per-connection"):
        b.subscribe(1, "c", "/queue/q", "auto", {}, 0.0)
    b.begin(1, "t1", 0.0)
    with pytest.raises(LimitExceeded, match="max-transactions-per-connection"):
        b.begin(1, "t2", 0.0)


def _cluster(**over):
    raw = {"node": "n1", "zookeeper": "127.0.0.1:2181"}
    grouping = over.pop("grouping", None)
    raw.update(over)
    if grouping is not None:
        raw["grouping"] = grouping
    return {"cluster": raw}


def test_cluster_defaults_are_artemis_names_and_values():
    c = config_from_dict(_cluster()).cluster
    assert c.node == "n1" and c.name == "shoal" and c.link == ("127.0.0.1", 61617)
    assert c.grouping == "zookeeper" and c.timeout_ms == 5000
    assert (c.group_timeout_ms, c.reaper_period_ms, c.rebind_after_ms) == (-1, 30_000, -1)
    assert c.consumerless_rebind_after_ms == -1
    assert c.message_load_balancing == "ON_DEMAND"
    assert config_from_dict({}).cluster is None
    for mode in ("STRICT", "OFF"):
        raw = _cluster(**{"message-load-balancing": mode})
        assert config_from_dict(raw).cluster.message_load_balancing == mode


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"node": ""}, "cluster.node"),
        ({"node": "a/b"}, "cluster.node"),
        ({"name": 3}, "cluster.name"),
        ({"link": "nohost"}, "cluster.link"),
        ({"zookeeper": ""}, "cluster.zookeeper"),
        ({"zookeeper": "zk:notaport"}, "cluster.zookeeper"),
        ({"color": "red"}, "cluster.color"),
        ({"grouping": {"type": "global"}}, "cluster.grouping.type"),
        ({"grouping": {"timeout": 0}}, "cluster.grouping.timeout"),
        ({"grouping": {"timeout": "5s"}}, "cluster.grouping.timeout"),
        ({"grouping": {"reaper-period": -1}}, "cluster.grouping.reaper-period"),
        ({"grouping": {"group-timeout": 0}}, "cluster.grouping.group-timeout"),
        ({"grouping": {"rebind-after": 0}}, "cluster.grouping.rebind-after"),
        (
            {"grouping": {"consumerless-rebind-after": "1s"}},
            "cluster.grouping.consumerless-rebind-after",
        ),
        ({"grouping": {"speed": 1}}, "cluster.grouping.speed"),
        ({"message-load-balancing": "on_demand"}, "cluster.message-load-balancing"),
        ({"message-load-balancing": "OFF_WITH_REDISTRIBUTION"}, "cluster.message-load-balancing"),
    ],
)
def test_bad_cluster_config_names_the_key(over, key):
    with pytest.raises(ConfigError) as info:
        config_from_dict(_cluster(**over))
    assert key in str(info.value)


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_local_and_remote_handlers_are_accepted_and_still_need_zookeeper(kind):
    assert config_from_dict(_cluster(grouping={"type": kind})).cluster.grouping == kind
    with pytest.raises(ConfigError, match="cluster.zookeeper"):  # membership stays there
        config_from_dict({"cluster": {"node": "n1", "grouping": {"type": kind}}})


@pytest.mark.parametrize("key", ["group-timeout", "rebind-after", "consumerless-rebind-after"])
def test_bindings_that_move_work_with_every_handler(key):
    for kind in ("zookeeper", "local", "remote"):
        cluster = config_from_dict(_cluster(grouping={"type": kind, key: 60_000})).cluster
        assert cluster is not None and cluster.grouping == kind


def test_missing_node_is_named():
    with pytest.raises(ConfigError, match="cluster.node"):
        config_from_dict({"cluster": {"zookeeper": "127.0.0.1:2181"}})


def test_cluster_link_off_loopback_needs_insecure_even_with_users():
    raw = _cluster(link="10.1.2.3:61617")
    raw["users"] = {"bob": {"password-hash": "x", "roles": ["r"]}}
    with pytest.raises(ConfigError, match="cluster.link"):
        config_from_dict(raw).check_exposure()
    config_from_dict(raw).replace(insecure=True).check_exposure()
