"""Spark fixture: one local SparkSession per test session, with Delta, Kafka and Avro jars.

The Spark JVMs the tests start as processes of their own (a writer run, the demo, the Thrift
server, the compat suites' writers) live for seconds to a minute, mostly compiling code they run
a few times: there C1 alone (``-XX:TieredStopAtLevel=1``) costs less than C1 and C2 together.
The session's own JVM runs for the whole suite, where C2 pays. So the flag goes to the
processes through ``SPARK_SUBMIT_OPTS``, which Spark's launcher adds to the driver's JVM, and is
left out of the session's own launch. The JIT tier changes how fast the JVM runs, not what it
does.

The session evaluates expressions without generated code (``INTERPRETED``): the suite's
batches are a few rows, and compiling Java for each new plan (Janino, and the class lookups
over every jar it makes) costs more than it saves. Spark computes the same results either way
(its own tests run both modes); the writer processes the tests start keep Spark's defaults, so
generated code stays covered. The figures: docs/PERFORMANCE.md, "The test suite".
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

    own = [o for o in os.environ.get(_SUBMIT_OPTS, "").split() if o != SHORT_LIVED_JIT]
    with pytest.MonkeyPatch.context() as env:  # the session's launch only
        env.setenv(_SUBMIT_OPTS, " ".join(own))
        session = build_spark_session(
            app_name="tests", conf={"spark.driver.memory": "2g", **INTERPRETED}
        )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
