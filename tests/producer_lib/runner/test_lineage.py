"""Column-level lineage derived from the SQL of a load (the `_lineage` documents)."""

from __future__ import annotations

import json

import duckdb
import pytest

from producer_lib.errors import ProducerLibError
from producer_lib.runner.lineage import ColumnLineage, LineageError, derive_lineage
from producer_lib.staging import load_packaged_extension

# Mixed spellings on purpose: DuckDB is case-insensitive, the lineage keeps the schema's case.
SCHEMA = {
    "tpch.orders": {
        "O_ORDERKEY": "BIGINT",
        "O_CUSTKEY": "BIGINT",
        "O_TOTALPRICE": "DECIMAL(15,2)",
        "O_ORDERDATE": "DATE",
    },
    "customer": {"c_custkey": "BIGINT", "c_name": "VARCHAR", "c_mktsegment": "VARCHAR"},
    "lineitem": {"l_orderkey": "BIGINT", "l_quantity": "INTEGER", "l_discount": "DECIMAL(15,2)"},
    "sales": {"REVENUE$": "DOUBLE", "net amount": "DOUBLE", "region": "VARCHAR"},
}


def copy(target: str, *sources: str) -> ColumnLineage:
    return ColumnLineage(target, sources, "copy")


def expr(target: str, expression: str, *sources: str) -> ColumnLineage:
    return ColumnLineage(target, sources, "expression", expression)


CASES = [
    pytest.param(
        "select c_custkey as id, c_name from customer",
        ["customer"],
        [copy("id", "customer.c_custkey"), copy("c_name", "customer.c_name")],
        id="alias-rename-is-a-copy",
    ),
    pytest.param(
        "SELECT C_CUSTKEY, C_NAME AS Name FROM CUSTOMER",
        ["CUSTOMER"],
        [copy("c_custkey", "CUSTOMER.c_custkey"), copy("Name", "CUSTOMER.c_name")],
        id="uppercase-sql-lowercase-schema",
    ),
    pytest.param(
        "select o_orderkey, o.o_custkey as cust from tpch.orders o",
        ["tpch.orders"],
        [copy("O_ORDERKEY", "tpch.orders.O_ORDERKEY"), copy("cust", "tpch.orders.O_CUSTKEY")],
        id="lowercase-sql-uppercase-schema-qualified-table-alias",
    ),
    pytest.param(
        "select o.o_orderkey, c.c_name from tpch.orders o "
        "join customer c on o.o_custkey = c.c_custkey",
        ["customer", "tpch.orders"],
        [copy("O_ORDERKEY", "tpch.orders.O_ORDERKEY"), copy("c_name", "customer.c_name")],
        id="join-qualified-columns",
    ),
    pytest.param(
        "select o_orderkey, c_name, l_quantity from tpch.orders "
        "join customer on o_custkey = c_custkey join lineitem on l_orderkey = o_orderkey",
        ["customer", "lineitem", "tpch.orders"],
        [
            copy("O_ORDERKEY", "tpch.orders.O_ORDERKEY"),
            copy("c_name", "customer.c_name"),
            copy("l_quantity", "lineitem.l_quantity"),
        ],
        id="join-unqualified-columns-resolved-by-schema",
    ),
    pytest.param(
        "select e.c_name, m.c_name as manager from customer e "
        "join customer m on e.c_custkey = m.c_custkey",
        ["customer"],
        [copy("c_name", "customer.c_name"), copy("manager", "customer.c_name")],
        id="self-join",
    ),
    pytest.param(
        "with big as (select o_orderkey as k, o_totalprice * 2 as p from tpch.orders) "
        "select k, p + 1 as q from big",
        ["tpch.orders"],
        [
            copy("k", "tpch.orders.O_ORDERKEY"),
            expr("q", "(tpch.orders.O_TOTALPRICE * 2) + 1", "tpch.orders.O_TOTALPRICE"),
        ],
        id="cte-traced-to-base-table",
    ),
    pytest.param(
        "with o as (select o_orderkey, o_custkey from tpch.orders), "
        "oc as (select o.o_orderkey as id, c.c_name as name from o "
        "join customer c on o.o_custkey = c.c_custkey) "
        "select id, name from oc",
        ["customer", "tpch.orders"],
        [copy("id", "tpch.orders.O_ORDERKEY"), copy("name", "customer.c_name")],
        id="cte-chain-with-join",
    ),
    pytest.param(
        "select s.n, s.twice from (select c_name as n, c_custkey * 2 as twice from customer) s",
        ["customer"],
        [
            copy("n", "customer.c_name"),
            expr("twice", "customer.c_custkey * 2", "customer.c_custkey"),
        ],
        id="subquery-in-from",
    ),
    pytest.param(
        "select * from customer",
        ["customer"],
        [
            copy("c_custkey", "customer.c_custkey"),
            copy("c_name", "customer.c_name"),
            copy("c_mktsegment", "customer.c_mktsegment"),
        ],
        id="star-from-schema",
    ),
    pytest.param(
        "select c.*, o.o_orderkey from customer c join tpch.orders o on o.o_custkey = c.c_custkey",
        ["customer", "tpch.orders"],
        [
            copy("c_custkey", "customer.c_custkey"),
            copy("c_name", "customer.c_name"),
            copy("c_mktsegment", "customer.c_mktsegment"),
            copy("O_ORDERKEY", "tpch.orders.O_ORDERKEY"),
        ],
        id="table-star-in-join",
    ),
    pytest.param(
        "with x as (select * from customer) select x.* from x",
        ["customer"],
        [
            copy("c_custkey", "customer.c_custkey"),
            copy("c_name", "customer.c_name"),
            copy("c_mktsegment", "customer.c_mktsegment"),
        ],
        id="star-through-cte",
    ),
    pytest.param(
        "select o_totalprice + o_custkey as s, upper(c_name) as u, "
        "case when o_totalprice > 100 then 'big' else c_mktsegment end as seg "
        "from tpch.orders join customer on o_custkey = c_custkey",
        ["customer", "tpch.orders"],
        [
            expr(
                "s",
                "tpch.orders.O_TOTALPRICE + tpch.orders.O_CUSTKEY",
                "tpch.orders.O_CUSTKEY",
                "tpch.orders.O_TOTALPRICE",
            ),
            expr("u", "UPPER(customer.c_name)", "customer.c_name"),
            expr(
                "seg",
                "CASE WHEN tpch.orders.O_TOTALPRICE > 100 THEN 'big' "
                "ELSE customer.c_mktsegment END",
                "customer.c_mktsegment",
                "tpch.orders.O_TOTALPRICE",
            ),
        ],
        id="expressions-arithmetic-function-case",
    ),
    pytest.param(
        "select o_custkey, sum(o_totalprice) as total, count(*) as n "
        "from tpch.orders group by o_custkey",
        ["tpch.orders"],
        [
            copy("O_CUSTKEY", "tpch.orders.O_CUSTKEY"),
            expr("total", "SUM(tpch.orders.O_TOTALPRICE)", "tpch.orders.O_TOTALPRICE"),
            expr("n", "COUNT(*)"),
        ],
        id="aggregates-group-by",
    ),
    pytest.param(
        "select 1 as one, 'x' as s, null as nothing from customer",
        ["customer"],
        [expr("one", "1"), expr("s", "'x'"), expr("nothing", "NULL")],
        id="literals-have-no-sources",
    ),
    pytest.param(
        "select cast(c_custkey as int) as id, c_custkey::varchar as s from customer",
        ["customer"],
        [
            expr("id", "CAST(customer.c_custkey AS INT)", "customer.c_custkey"),
            expr("s", "CAST(customer.c_custkey AS TEXT)", "customer.c_custkey"),
        ],
        id="casts-are-expressions",
    ),
    pytest.param(
        "select row_number() over (partition by o_custkey order by o_orderdate) as rn "
        "from tpch.orders",
        ["tpch.orders"],
        [
            expr(
                "rn",
                "ROW_NUMBER() OVER (PARTITION BY tpch.orders.O_CUSTKEY "
                "ORDER BY tpch.orders.O_ORDERDATE)",
                "tpch.orders.O_CUSTKEY",
                "tpch.orders.O_ORDERDATE",
            )
        ],
        id="window-function",
    ),
    pytest.param(
        "select c_name as name from customer union all select region from sales",
        ["customer", "sales"],
        [copy("name", "customer.c_name", "sales.region")],
        id="union-of-copies",
    ),
    pytest.param(
        "select upper(c_name) as name from customer union select region from sales",
        ["customer", "sales"],
        [
            expr(
                "name",
                "(UPPER(customer.c_name) UNION sales.region)",
                "customer.c_name",
                "sales.region",
            )
        ],
        id="union-with-expression",
    ),
    pytest.param(
        'select "REVENUE$", "net amount" * 2 as "Net x2" from sales',
        ["sales"],
        [
            copy("REVENUE$", "sales.REVENUE$"),
            expr("Net x2", 'sales."net amount" * 2', "sales.net amount"),
        ],
        id="quoted-column-names",
    ),
    pytest.param(
        "select c_name from customer where c_custkey in (select o_custkey from tpch.orders)",
        ["customer", "tpch.orders"],
        [copy("c_name", "customer.c_name")],
        id="filter-only-table-is-a-source",
    ),
    pytest.param(
        "select c_name, (select max(o.o_totalprice) from tpch.orders o "
        "where o.o_custkey = c.c_custkey) as top from customer c",
        ["customer", "tpch.orders"],
        [
            copy("c_name", "customer.c_name"),
            expr(
                "top",
                "(SELECT MAX(o.o_totalprice) AS _col_0 FROM tpch.orders AS o "
                "WHERE o.o_custkey = c.c_custkey)",
                "tpch.orders.O_TOTALPRICE",
            ),
        ],
        id="scalar-subquery",
    ),
]


@pytest.mark.parametrize(("sql", "sources", "columns"), CASES)
def test_lineage_of_sql(sql: str, sources: list[str], columns: list[ColumnLineage]) -> None:
    lineage = derive_lineage(sql, "sales.target", schema=SCHEMA)

    assert lineage.sources == tuple(sources)
    assert list(lineage.columns) == columns


def test_output_columns_name_the_targets() -> None:
    # DuckDB names an unaliased expression after its text; the loaded schema carries that name.
    lineage = derive_lineage(
        "select o_totalprice * 2, c_name from tpch.orders join customer on o_custkey = c_custkey",
        "sales.target",
        schema=SCHEMA,
        output_columns=["(o_totalprice * 2)", "c_name"],
    )

    assert [column.target for column in lineage.columns] == ["(o_totalprice * 2)", "c_name"]
    assert lineage.columns[0].kind == "expression"


def test_table_functions_without_schema() -> None:
    lineage = derive_lineage(
        "select id, amount * 100 as cents from read_parquet('/data/pay.parquet')", "pay.cents"
    )

    assert lineage.sources == ("read_parquet('/data/pay.parquet')",)
    assert list(lineage.columns) == [
        copy("id", "read_parquet('/data/pay.parquet').id"),
        expr("cents", "amount * 100", "read_parquet('/data/pay.parquet').amount"),
    ]


def test_star_without_schema_uses_output_columns_of_the_only_table() -> None:
    lineage = derive_lineage(
        "select *, a * 2 as twice from delta_scan('/lake/sales/orders')",
        "sales.orders",
        output_columns=["a", "Name", "twice"],
    )

    source = "delta_scan('/lake/sales/orders')"
    assert lineage.sources == (source,)
    assert list(lineage.columns) == [
        copy("a", f"{source}.a"),
        copy("Name", f"{source}.Name"),
        expr("twice", "a * 2", f"{source}.a"),
    ]


def test_star_without_schema_through_cte() -> None:
    lineage = derive_lineage(
        "with x as (select * from ORDERS) select a, b + 1 as c from x", "sales.orders"
    )

    assert lineage.sources == ("ORDERS",)
    assert list(lineage.columns) == [copy("a", "ORDERS.a"), expr("c", "ORDERS.b + 1", "ORDERS.b")]


def test_recursive_cte_terminates() -> None:
    lineage = derive_lineage(
        "with recursive r as (select 1 as n union all select n + 1 from r where n < 3) "
        "select n from r",
        "sales.numbers",
    )

    assert lineage.sources == ()
    assert [(c.target, c.sources, c.kind) for c in lineage.columns] == [("n", (), "expression")]


def test_postgres_dialect_keeps_quoted_identifiers_case_sensitive() -> None:
    schema = {"public.orders": {"OrderKey": "bigint", "amount": "numeric"}}

    lineage = derive_lineage(
        'select "OrderKey", AMOUNT * 2 as doubled from public.orders',
        "sales.orders",
        schema=schema,
        dialect="postgres",
    )

    assert list(lineage.columns) == [
        copy("OrderKey", "public.orders.OrderKey"),
        expr("doubled", "public.orders.amount * 2", "public.orders.amount"),
    ]
    with pytest.raises(LineageError, match="'orderkey' is not in the schema of public.orders"):
        derive_lineage(
            "select OrderKey from public.orders", "t.t", schema=schema, dialect="postgres"
        )


@pytest.fixture(scope="module")
def tpch() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    load_packaged_extension(connection, "tpch")
    connection.execute("CALL dbgen(sf=0)")  # the TPC-H tables, empty
    return connection


def describe(connection: duckdb.DuckDBPyConnection, *tables: str) -> dict[str, dict[str, str]]:
    """Table → {column: type} from DuckDB's DESCRIBE, as the DuckDB reader passes it."""
    return {
        table: {row[0]: row[1] for row in connection.execute(f"DESCRIBE {table}").fetchall()}
        for table in tables
    }


TPCH_Q3 = """
    select l.l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue,
           o_orderdate, o_shippriority, count(*) as lines
    from customer c
    join orders o on c.c_custkey = o.o_custkey
    join lineitem l on l.l_orderkey = o.o_orderkey
    where c_mktsegment = 'BUILDING' and o_orderdate < date '1995-03-15'
    group by l.l_orderkey, o_orderdate, o_shippriority
"""


def test_tpch_join_with_schema_from_duckdb_describe(tpch: duckdb.DuckDBPyConnection) -> None:
    # How the DuckDB reader integrates: schema from DESCRIBE, output columns from the result.
    schema = describe(tpch, "customer", "orders", "lineitem")
    output = [d[0] for d in tpch.execute(TPCH_Q3).description]

    lineage = derive_lineage(TPCH_Q3, "sales.q3", schema=schema, output_columns=output)
    document = json.loads(json.dumps(lineage.to_json("commit-42")))

    assert document == {
        "target": "sales.q3",
        "sources": ["customer", "lineitem", "orders"],
        "columns": [
            {
                "target": "l_orderkey",
                "sources": ["lineitem.l_orderkey"],
                "kind": "copy",
                "expression": None,
            },
            {
                "target": "revenue",
                "sources": ["lineitem.l_discount", "lineitem.l_extendedprice"],
                "kind": "expression",
                "expression": "SUM(lineitem.l_extendedprice * (1 - lineitem.l_discount))",
            },
            {
                "target": "o_orderdate",
                "sources": ["orders.o_orderdate"],
                "kind": "copy",
                "expression": None,
            },
            {
                "target": "o_shippriority",
                "sources": ["orders.o_shippriority"],
                "kind": "copy",
                "expression": None,
            },
            {"target": "lines", "sources": [], "kind": "expression", "expression": "COUNT(*)"},
        ],
        "sql": TPCH_Q3,
        "commit_id": "commit-42",
        "dialect": "duckdb",
    }


def test_star_over_tpch_matches_duckdb_result_columns(tpch: duckdb.DuckDBPyConnection) -> None:
    sql = "select * from nation n join region r on n.n_regionkey = r.r_regionkey"
    schema = describe(tpch, "nation", "region")
    output = [d[0] for d in tpch.execute(sql).description]

    lineage = derive_lineage(sql, "geo.nations", schema=schema, output_columns=output)

    assert [c.target for c in lineage.columns] == output
    assert [c.sources for c in lineage.columns] == [
        (f"{'nation' if name.startswith('n_') else 'region'}.{name}",) for name in output
    ]
    assert {c.kind for c in lineage.columns} == {"copy"}


ERRORS = [
    pytest.param("select from where", {}, "Cannot parse the SQL", id="parse-error"),
    pytest.param("insert into t select 1", {}, "exactly one query", id="not-a-query"),
    pytest.param("select 1; select 2", {}, "exactly one query", id="two-statements"),
    pytest.param(
        "select a, b from t join u on t.id = u.id",
        {},
        "Cannot tell which of ['t', 'u'] column 'a' comes from",
        id="unqualified-column-in-join-without-schema",
    ),
    pytest.param(
        "select * from t join u on t.id = u.id",
        {"output_columns": ["id", "a"]},
        "Cannot expand `*` over ['t', 'u']",
        id="star-over-join-without-schema",
    ),
    pytest.param(
        "select * from read_parquet('x.parquet')",
        {},
        "Cannot expand `*`: give the schema of its table or the output columns",
        id="star-without-schema-or-output-columns",
    ),
    pytest.param(
        "select c_name from customer",
        {"schema": SCHEMA, "output_columns": ["c_name", "extra"]},
        "The SQL selects 1 columns but the result has ['c_name', 'extra']",
        id="output-columns-do-not-match",
    ),
]


@pytest.mark.parametrize(("sql", "kwargs", "message"), ERRORS)
def test_lineage_errors_name_the_target(sql: str, kwargs: dict, message: str) -> None:
    with pytest.raises(LineageError) as caught:
        derive_lineage(sql, "sales.broken", **kwargs)

    assert message in str(caught.value)
    assert caught.value.target == "sales.broken"
    assert isinstance(caught.value, ProducerLibError)
