"""Shoal and Apache Spark: log-queue source, exactly-once sink, ordered per-group state.

``shoal.spark.register(spark)`` makes ``format("shoal")`` available; see
docs/spark.md. ``explain(exc)`` turns a failed query's exception into the
one line that says what went wrong. Importing this package does not import
pyspark; the submodules do.
"""

from __future__ import annotations

import re
from typing import Any

# "shoal.spark.options.ShoalOptionError: shoal source: ..." inside a Spark error's text
_OURS = re.compile(r"(?:^|\s)(?:[\w.]+\.)?\w+: (shoal(?: source| sink| pipeline)?: .*)$")
_PYTHON_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception|Unavailable|Failed)): (.+)$")


def register(spark: Any) -> None:
    """Register the ``shoal`` data source on a SparkSession.

    As ``spark.dataSource.register(ShoalDataSource)`` does, with one change:
    the environment map of the registered function is a ConcurrentHashMap,
    not a HashMap. Spark shares that one map with every reader, writer and
    task of the data source, and each streaming query's source runner puts
    its keys into it as the query starts, unsynchronized (Spark 4.3,
    ``PythonStreamingSourceRunner.init``). Two shoal queries starting at once
    could corrupt a HashMap (its size off from its entries); every task that
    carries it then fails to deserialize (``java.io.OptionalDataException``),
    every query, every restart, until the JVM exits.

    It first checks that the Python Spark runs the data source with (the
    session's ``PYSPARK_PYTHON``) can import shoal, and raises
    ``shoal.spark.jobs.SetupError`` naming PYSPARK_PYTHON if not, instead of
    letting every query fail later in Spark's worker.
    """
    from shoal.spark.datasource import ShoalDataSource
    from shoal.spark.jobs import check_python

    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:  # Spark Connect: the server side registers it
        spark.dataSource.register(ShoalDataSource)
        return
    from pyspark.core.rdd import _prepare_for_python_RDD

    sc = spark.sparkContext
    check_python(sc.pythonExec)
    jvm = sc._jvm
    command, broadcasts, env, includes = _prepare_for_python_RDD(sc, ShoalDataSource)
    env_vars = jvm.java.util.concurrent.ConcurrentHashMap()
    for key, value in env.items():
        if value is not None:  # a ConcurrentHashMap holds no nulls
            env_vars.put(key, value)
    func = jvm.SimplePythonFunction(
        bytearray(command),
        env_vars,
        includes,
        sc.pythonExec,
        sc.pythonVer,
        broadcasts,
        sc._javaAccumulator,
    )
    source = getattr(
        jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource"
    )(func)
    jsession.dataSource().registerPython(ShoalDataSource.name(), source)


def explain(exc: BaseException | str) -> str:
    """The cause of a failure, in one line, whole.

    Spark wraps an error raised in the connector in its own exceptions and a
    Python traceback; the line that matters is the connector's message
    (``shoal source: ...``, ``shoal sink: ...``), else the last Python error
    in the text, else its first line.
    """
    lines = [ln.rstrip() for ln in str(exc).splitlines() if ln.strip()]
    for line in reversed(lines):
        found = _OURS.search(line)
        if found:
            return found.group(1)
    for line in reversed(lines):
        found = _PYTHON_ERROR.match(line)
        if found:
            return f"{found.group(1)}: {found.group(2)}"
    return lines[0].strip() if lines else type(exc).__name__
