"""Spark fixture: one local SparkSession per test session, with Delta, Kafka and Avro jars.

The Spark JVMs the tests start as processes of their own (a writer run, the demo, the Thrift
server, the compat suites' writers) live for seconds to a minute, mostly compiling code they run
a few times: there C1 alone (``-XX:TieredStopAtLevel=1``) costs less than C1 and C2 together
(the kill-point tests, each a writer process: 157 s against 200 s, docs/PERFORMANCE.md, "The
test suite"). The session's own JVM runs for the whole suite, where C2 pays (the apply tests:
180 s against 203 s with C1 alone). So the flag goes to the processes through
``SPARK_SUBMIT_OPTS``, which Spark's launcher adds to the driver's JVM, and is left out of the
session's own launch. The JIT tier changes how fast the JVM runs, not what it does.

The session evaluates expressions without generated code (``INTERPRETED``): the suite's
batches are a few rows, and compiling Java for each new plan (Janino, and the class lookups
over every jar it makes) cost more than it saved — the apply tests took 151 s against 178 s.
Spark computes the same results either way (its own tests run both modes); the writer
processes the tests start keep Spark's defaults, so generated code stays covered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SHORT_LIVED_JIT = "-XX:TieredStopAtLevel=1"
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
_SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"


def pytest_configure(config: pytest.Config) -> None:
    """Give every Spark JVM the tests start in a process of their own the short-lived JIT."""
    options = os.environ.get(_SUBMIT_OPTS, "").split()
    if SHORT_LIVED_JIT not in options:
        os.environ[_SUBMIT_OPTS] = " ".join([*options, SHORT_LIVED_JIT])


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A ``local[2]`` SparkSession (devstack's jars, UI off, C2 on, expressions interpreted)."""
    from lakehouse_writer.runtime.session import build_spark_session

    given = os.environ.get(_SUBMIT_OPTS)
    own = [o for o in (given or "").split() if o != SHORT_LIVED_JIT]
    os.environ[_SUBMIT_OPTS] = " ".join(own)
    try:
        session = build_spark_session(
            app_name="tests", conf={"spark.driver.memory": "2g", **INTERPRETED}
        )
    finally:
        if given is None:
            os.environ.pop(_SUBMIT_OPTS)
        else:
            os.environ[_SUBMIT_OPTS] = given
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
