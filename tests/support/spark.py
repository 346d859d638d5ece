"""Spark fixture: one local SparkSession per test session, with Delta, Kafka and Avro jars."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A ``local[2]`` SparkSession (jars from devstack's Maven resolution, UI off)."""
    from lakehouse_writer.runtime.session import build_spark_session

    session = build_spark_session(app_name="tests", conf={"spark.driver.memory": "2g"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
