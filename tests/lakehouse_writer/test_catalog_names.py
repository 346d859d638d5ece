"""Catalog names and the SQL that registers a table (no Spark: pure text)."""

from __future__ import annotations

import pytest

from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.tables.catalog import (
    CatalogName,
    catalog_name,
    create_schema_sql,
    register_sql,
    same_location,
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("SHOP", "shop"),
        ("ORDERS", "orders"),
        ("/BIC/AZSALES$", "_bic_azsales_"),
        ("Müller", "m_ller"),
        ("a.b-c d", "a_b_c_d"),
        ("_commits", "_commits"),
    ],
    ids=["upper", "table", "sap-name", "umlaut", "punctuation", "system"],
)
def test_a_name_folds_to_what_the_session_catalog_allows(name: str, expected: str) -> None:
    assert catalog_name(name) == expected


def test_the_session_catalog_gets_two_level_names() -> None:
    name = CatalogName.of("spark_catalog", "SHOP", "ORDERS")
    assert create_schema_sql(name) == "CREATE SCHEMA IF NOT EXISTS `shop`"
    assert register_sql(name, "/lake/SHOP/ORDERS") == (
        "CREATE TABLE IF NOT EXISTS `shop`.`orders` USING DELTA LOCATION '/lake/SHOP/ORDERS'"
    )
    assert str(name) == "spark_catalog.shop.orders"


def test_another_catalog_gets_three_level_names() -> None:
    name = CatalogName.of("main", "lakehouse_system", "_commits")
    assert create_schema_sql(name) == "CREATE SCHEMA IF NOT EXISTS `main`.`lakehouse_system`"
    assert register_sql(name, "abfss://c@a.dfs.core.windows.net/lake/_commits") == (
        "CREATE TABLE IF NOT EXISTS `main`.`lakehouse_system`.`_commits` USING DELTA "
        "LOCATION 'abfss://c@a.dfs.core.windows.net/lake/_commits'"
    )


def test_a_location_is_quoted_as_a_literal() -> None:
    name = CatalogName.of("weird`cat", "S", "T")
    sql = register_sql(name, "/lake/it's/${x}")
    assert sql.startswith("CREATE TABLE IF NOT EXISTS `weird``cat`.`s`.`t`")
    assert sql.endswith("LOCATION '/lake/it\\'s/\\u0024{x}'")  # no ${...} substitution


@pytest.mark.parametrize(
    ("registered", "path", "same"),
    [
        ("file:/lake/SHOP/ORDERS", "/lake/SHOP/ORDERS", True),
        ("file:///lake/SHOP/ORDERS", "/lake/SHOP/ORDERS/", True),
        ("abfss://c@a/lake/T", "abfss://c@a/lake/T", True),
        ("file:/lake/SHOP/A%20B", "/lake/SHOP/A B", True),
        ("file:/lake/SHOP/A_B", "/lake/SHOP/A$B", False),
    ],
    ids=["file-uri", "triple-slash", "remote", "uri-escaped", "another-table"],
)
def test_a_registered_location_is_compared_without_its_scheme(
    registered: str, path: str, same: bool
) -> None:
    assert same_location(registered, path) is same


def test_registration_is_off_unless_a_catalog_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAKEHOUSE_CATALOG", raising=False)
    assert LakehouseSettings().catalog is None
    monkeypatch.setenv("LAKEHOUSE_CATALOG", "")
    assert LakehouseSettings().catalog is None
    monkeypatch.setenv("LAKEHOUSE_CATALOG", "spark_catalog")
    settings = LakehouseSettings()
    assert (settings.catalog, settings.catalog_system_namespace) == (
        "spark_catalog",
        "lakehouse_system",
    )
