"""Registration that cannot happen is an error naming table and catalog, never a skip.

Spark's in-memory session catalog of the test session (a real catalog, not the Hive one of
``test_catalog_hive.py``): what is checked here is the writer's side, not the metastore's.
"""

from __future__ import annotations

import uuid

import pytest

from lakehouse_writer.tables.catalog import CatalogError, TableCatalog
from lakehouse_writer.tables.manager import TableManager
from tests.support.writer import sample_schema

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_two_tables_folding_to_one_name_and_an_unknown_catalog_are_errors(spark, tmp_path):
    lake = str(tmp_path / "lake")
    namespace = f"NS_{uuid.uuid4().hex[:8]}"  # the session's catalog outlives the test
    tables = TableManager(spark, lake)
    first = tables.ensure(sample_schema("A$B", namespace))
    second = tables.ensure(sample_schema("A_B", namespace))
    catalog = TableCatalog(spark, "spark_catalog", "lakehouse_system", lake)

    catalog.register(first.ref.qualified, first.path)
    catalog.register(first.ref.qualified, first.path)  # once a process: no second look
    with pytest.raises(CatalogError) as taken:
        catalog.register(second.ref.qualified, second.path)

    message = str(taken.value)
    assert "another location" in message
    assert f"table='{namespace}.A_B'" in message and "catalog='spark_catalog'" in message
    assert f"name='spark_catalog.{namespace.lower()}.a_b'" in message
    name = f"`{namespace.lower()}`.`a_b`"
    location = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    assert any(r[0] == "Location" and r[1].endswith("/A$B") for r in location)  # untouched

    unknown = TableCatalog(spark, "no_such_catalog", "lakehouse_system", lake)
    with pytest.raises(CatalogError) as refused:
        unknown.register(first.ref.qualified, first.path)
    assert "could not be registered" in str(refused.value)
    assert "catalog='no_such_catalog'" in str(refused.value)
    assert f"table='{namespace}.A$B'" in str(refused.value)


def test_the_in_memory_session_catalog_is_refused_at_start(spark, tmp_path):
    in_memory = TableCatalog(spark, "spark_catalog", "lakehouse_system", str(tmp_path))
    assert spark.conf.get("spark.sql.catalogImplementation") == "in-memory"
    with pytest.raises(CatalogError, match="in-memory one: names registered there are gone"):
        in_memory.check()
    TableCatalog(spark, "main", "lakehouse_system", str(tmp_path)).check()  # not its business
