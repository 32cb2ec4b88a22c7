"""Brokers the benchmark starts and stops: Shoal and its peers, on free loopback ports."""

from __future__ import annotations

from pathlib import Path


def start_broker(name: str, workdir: Path | str, **kwargs):
    """Start broker `name` (one of BROKERS) in `workdir`; returns its handle."""
    if name == "activemq":
        from bench.peers.activemq import start_activemq

        return start_activemq(workdir, **kwargs)
    if name == "artemis":
        from bench.peers.artemis import start_artemis

        return start_artemis(workdir, **kwargs)
    if name == "rabbitmq":
        from bench.peers.rabbitmq import start_rabbitmq

        return start_rabbitmq(workdir, **kwargs)
    if name == "nullsink":  # not a broker: the client's ceiling
        from bench.peers.nullsink import start_nullsink

        return start_nullsink(workdir, **kwargs)
    if name == "shoal":
        from bench.peers.shoal import start_shoal

        return start_shoal(workdir, **kwargs)
    raise ValueError(f"unknown broker {name!r} (shoal, activemq, artemis, rabbitmq, nullsink)")


BROKERS = ("shoal", "activemq", "artemis", "rabbitmq", "nullsink")
# The null sink is not a broker: `--all` runs it only where it is the client's ceiling.
NULLSINK_WORKLOADS = ("W1", "W6")
