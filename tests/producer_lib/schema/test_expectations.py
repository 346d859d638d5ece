"""Expectations on a value schema: declared, compiled to SQL, kept in the schema JSON, checked
in DuckDB with one scan (``producer_lib/staging/expectations.py``)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import duckdb
import pytest

from producer_lib.errors import SchemaError
from producer_lib.schema import AvroDecimal, AvroLong, AvroString, ValueSchema
from producer_lib.schema.expectations import Expectation, sql_literal
from producer_lib.staging.expectations import FAILED_COLUMN, check_expectations, merge_reports


def orders() -> ValueSchema:
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("AMOUNT", AvroDecimal(10, 2))
    schema.add_field("STATUS", AvroString())
    schema.add_field("E-MAIL", AvroString())
    schema.pks = ["ID"]
    return schema


def test_column_checks_compile_to_one_predicate_with_a_name_that_says_them() -> None:
    schema = orders()
    email = schema.expect_column("E-MAIL", not_null=True, matches=r"^[^@]+@[^@]+$", action="warn")
    status = schema.expect_column("STATUS", in_set=["open", "it's closed"])
    amount = schema.expect_column("AMOUNT", between=(0, None), action="drop", name="amount_ok")
    assert (email.name, email.action, email.column) == ("E_MAIL_not_null_matches", "warn", "E-MAIL")
    assert email.sql == ('"E-MAIL" IS NOT NULL AND regexp_full_match("E-MAIL", \'^[^@]+@[^@]+$\')')
    assert status.sql == "\"STATUS\" IN ('open', 'it''s closed')" and status.action == "fail"
    assert amount.sql == '"AMOUNT" >= 0' and amount.name == "amount_ok"
    assert [e.name for e in schema.expectations] == [email.name, status.name, "amount_ok"]


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (True, "TRUE"),
        (3, "3"),
        (Decimal("1.50"), "1.50"),
        (0.25, "0.25"),
        ("o'k", "'o''k'"),
        (date(2024, 5, 1), "DATE '2024-05-01'"),
        (datetime(2024, 5, 1, 12, 0, tzinfo=UTC), "TIMESTAMPTZ '2024-05-01 12:00:00+00:00'"),
    ],
    ids=["bool", "int", "decimal", "float", "text", "date", "timestamptz"],
)
def test_values_become_duckdb_literals(value, literal) -> None:
    assert sql_literal(value) == literal


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda s: s.expect("ID > 0", name="bad name"), "name is 1-128"),
        (lambda s: s.expect("ID > 0", name="ok", action="skip"), "action is one of"),
        (lambda s: s.expect("ID > 0; DROP TABLE x", name="ok"), "one boolean expression"),
        (lambda s: s.expect_column("NOPE", not_null=True), "No such column"),
        (lambda s: s.expect_column("ID"), "needs a check"),
        (lambda s: s.expect_column("ID", in_set=[]), "at least one value"),
        (lambda s: s.expect_column("ID", between=(None, None)), "one of them may be None"),
        (lambda s: s.expect_column("ID", in_set=[object()]), "No SQL literal"),
    ],
    ids=["name", "action", "two-statements", "column", "no-check", "empty-set", "open", "value"],
)
def test_a_bad_declaration_is_refused_when_made(declare, message) -> None:
    with pytest.raises(SchemaError, match=message):
        declare(orders())


def test_a_name_is_unique_within_the_table() -> None:
    schema = orders()
    schema.expect("ID > 0", name="id_positive")
    with pytest.raises(SchemaError, match="has the name") as info:
        schema.expect("ID >= 1", name="id_positive")
    assert info.value.context == {"table": "ORDERS", "expectation": "id_positive"}


def test_expectations_travel_in_the_schema_json_and_come_back() -> None:
    schema = orders()
    schema.expect('"AMOUNT" >= 0', name="amount_positive", action="drop")
    schema.expect_column("STATUS", in_set=["open", "closed"], action="warn")
    avro = schema.to_avro_json()
    assert avro["expectations"] == [
        {"name": "amount_positive", "sql": '"AMOUNT" >= 0', "action": "drop"},
        {
            "name": "STATUS_in_set",
            "sql": "\"STATUS\" IN ('open', 'closed')",
            "action": "warn",
            "column": "STATUS",
        },
    ]
    again = ValueSchema.from_avro_json(schema.to_json())
    assert again.expectations == schema.expectations and again == schema
    assert "expectations" not in orders().to_avro_json()  # none declared: the JSON is as before


def staged() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(
        """create table ORDERS as select * from (values
            (1, 10.00, 'open', 'a@x.org'), (2, -1.00, 'open', null), (3, null, 'lost', 'c@x.org'),
            (4, -5.00, 'closed', 'no-at-sign')) t("ID", "AMOUNT", "STATUS", "E-MAIL")"""
    )
    return con


def test_one_scan_counts_the_rows_failing_each_and_null_passes() -> None:
    schema = orders()
    schema.expect('"AMOUNT" >= 0', name="amount_positive", action="drop")
    schema.expect_column("STATUS", in_set=["open", "closed"], action="warn")
    schema.expect_column("E-MAIL", matches=r"[^@]+@[^@]+", action="warn", name="email")
    report = check_expectations(
        staged(), "ORDERS", schema.expectations, table="SHOP.ORDERS", flow="shop"
    )
    assert report.rows_checked == 4
    assert {c.expectation.name: c.failed for c in report.counts} == {
        "amount_positive": 2,  # -1 and -5; the null amount passes, as in a CHECK constraint
        "STATUS_in_set": 1,
        "email": 1,  # the null e-mail passes; ask not_null for that
    }
    assert report.to_json()["expectations"]["amount_positive"] == {"action": "drop", "failed": 2}


def test_the_rows_a_drop_fails_leave_the_export_with_the_names_of_what_they_failed() -> None:
    con = staged()
    schema = orders()
    schema.expect('"AMOUNT" >= 0', name="amount_positive", action="drop")
    schema.expect_column("E-MAIL", not_null=True, action="drop", name="email_given")
    schema.expect_column("STATUS", in_set=["open"], action="warn")
    report = check_expectations(con, "ORDERS", schema.expectations, table="SHOP.ORDERS", flow="f")
    kept = con.sql(f"select ID from ({report.kept_sql}) order by ID").fetchall()
    dropped = con.sql(f'select ID, {FAILED_COLUMN} from ({report.dropped_sql}) order by "ID"')
    assert kept == [(1,), (3,)]  # a warn expectation drops nothing
    assert dropped.fetchall() == [(2, ["amount_positive", "email_given"]), (4, ["amount_positive"])]


def test_a_predicate_duckdb_refuses_is_named_with_flow_table_and_expectation() -> None:
    schema = orders()
    schema.expect('"AMOUNT" >= 0', name="amount_positive")
    schema.expect('"AMOUNTT" >= 0', name="typo")
    with pytest.raises(SchemaError) as info:
        check_expectations(
            staged(), "select * from ORDERS", schema.expectations, table="SHOP.ORDERS", flow="shop"
        )
    assert info.value.context == {
        "flow": "shop",
        "table": "SHOP.ORDERS",
        "expectation": "typo",
        "sql": '"AMOUNTT" >= 0',
    }
    assert "AMOUNTT" in info.value.message and "cannot be checked" in info.value.message


def test_reports_of_a_runs_exports_add_up_per_table() -> None:
    con = staged()
    rules = (Expectation("amount_positive", '"AMOUNT" >= 0', "warn"),)
    first = check_expectations(con, "ORDERS", rules, table="SHOP.ORDERS", flow="f")
    second = check_expectations(
        con, 'select * from ORDERS where "ID" > 2', rules, table="SHOP.ORDERS", flow="f"
    )
    assert merge_reports({}, [first, second]) == {
        "SHOP.ORDERS": {
            "rows_checked": 6,
            "expectations": {"amount_positive": {"action": "warn", "failed": 3}},
        }
    }
