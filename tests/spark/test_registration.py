"""The registered ``shoal`` data source survives queries that start at the same time.

Spark keeps one function object per registered Python data source and shares
its environment map with every reader, writer and task of that source. Each
streaming query's source runner puts its keys into that map from the query's
own thread as the query starts (Spark 4.3, ``PythonStreamingSourceRunner.init``),
unsynchronized. Into a plain HashMap, racing puts can leave the map's size off
from its entries; every task carrying it then fails to deserialize with
``java.io.OptionalDataException``, for every query and every restart, until the
JVM exits (the kill -9 test's restart failed that way once in CI).
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("pyspark")

from shoal.spark import register

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

THREADS = 8
PUTS = 1500
ROUNDS = 10


def registered_env(spark):
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    return manager.lookupDataSource("shoal").dataSourceCls().envVars()


def damage(spark, env, expected: int) -> str | None:
    """What is wrong with ``env`` after ``expected`` entries went in; None if nothing."""
    utils = spark._jvm.org.apache.commons.lang3.SerializationUtils
    try:
        if env.size() != expected:
            return f"size {env.size()}, expected {expected}"
        copy = utils.clone(env)  # what Spark does to it in every task: Java serialization
        if copy.size() != expected or not copy.equals(env):
            return f"a serialized copy has {copy.size()} entries, expected {expected}"
    except Exception as exc:  # a corrupt HashMap: OptionalDataException, index out of bounds
        return str(exc).splitlines()[1][:300] if "\n" in str(exc) else str(exc)[:300]
    return None


def test_concurrent_puts_from_query_threads_leave_the_env_whole(spark) -> None:
    # Python threads get a JVM thread each (pinned thread mode), so these
    # puts race inside the JVM as the query threads' puts do, only more often.
    try:
        for _ in range(ROUNDS):
            register(spark)  # a fresh function with a fresh map
            env = registered_env(spark)
            base = env.size()

            def put(thread: int, env=env) -> None:
                for i in range(PUTS):
                    env.put(f"SHOAL_TEST_{thread}_{i}", "x")

            threads = [threading.Thread(target=put, args=(t,)) for t in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            problem = damage(spark, env, base + THREADS * PUTS)
            assert problem is None, problem
    finally:
        register(spark)  # later tests get a map without the test's keys
