import duckdb
import pyarrow as pa
import pytest

from producer_lib.errors import SourceError
from producer_lib.schema import AvroLong, AvroString, ValueSchema
from producer_lib.staging import check_primary_key, create_table, describe, load_packaged_extension


@pytest.fixture
def conn():
    connection = duckdb.connect()
    yield connection
    connection.close()


def _schema(*keys):
    schema = ValueSchema("T", "TEST")
    schema.add_field("ID", AvroLong())
    schema.add_field("Part No", AvroString())
    schema.set_primary_keys(*keys)
    return schema


def test_unique_keys_pass(conn):
    conn.execute('create table t as select range as "ID", \'a\' as "Part No" from range(100)')
    check_primary_key("t", _schema("ID"), conn)


def test_duplicates_name_table_columns_count_and_sample(conn):
    conn.execute('create table t as select range % 10 as "ID", \'a\' as "Part No" from range(100)')
    with pytest.raises(SourceError) as info:
        check_primary_key("t", _schema("ID", "Part No"), conn)
    error = info.value
    assert error.table == "t"
    assert error.key_columns == ("ID", "Part No")
    assert error.duplicate_keys == 10
    assert len(error.duplicate_sample) == 5
    assert error.duplicate_sample[0] == (0, "a", 10)
    assert "10 duplicate key(s)" in str(error)


def test_null_keys_are_reported(conn):
    conn.execute('create table t ("ID" bigint, "Part No" varchar)')
    conn.execute("insert into t values (1, null), (2, 'x'), (null, 'y')")
    with pytest.raises(SourceError) as info:
        check_primary_key("t", _schema("ID", "Part No"), conn)
    assert info.value.null_keys == 2
    assert sorted(info.value.null_sample, key=str) == sorted([(1, None), (None, "y")], key=str)
    assert not hasattr(info.value, "duplicate_keys")


def test_table_without_key_is_append_only(conn):
    conn.execute('create table t as select 1 as "ID", 1 as x from range(3)')
    check_primary_key("t", _schema(), conn)


def test_create_table_keeps_original_names_and_types(conn):
    schema = describe(conn, 'select 1::decimal(10,2) as "/BIC/PRICE", \'x\' as "a b"', "T", "N")
    arrow = create_table(conn, "My Table", schema.get_pyarrow(technical=False))
    assert arrow.names == ["/BIC/PRICE", "a b"]
    rows = conn.execute('describe "My Table"').fetchall()
    assert [(r[0], r[1]) for r in rows] == [("/BIC/PRICE", "DECIMAL(10,2)"), ("a b", "VARCHAR")]


def test_describe_table_reads_not_null_and_primary_key(conn):
    conn.execute("create table s (id integer primary key, name varchar not null, note varchar)")
    schema = describe(conn, "s", "S", "N")
    assert schema.pks == ("id",)
    assert [f.nullable for f in schema.fields.values()] == [False, False, True]


def test_delta_extension_loads_from_its_package_without_network(conn):
    load_packaged_extension(conn, "delta")
    loaded = conn.execute(
        "select loaded from duckdb_extensions() where extension_name = 'delta'"
    ).fetchone()
    assert loaded == (True,)


def test_missing_extension_package_says_what_to_install(conn):
    with pytest.raises(SourceError, match="pip install duckdb-extension-nosuch=="):
        load_packaged_extension(conn, "nosuch")


def test_check_keys_of_a_query_names_where_the_rows_go(conn):
    from producer_lib.staging.pk_check import check_keys

    conn.execute('create table t as select range as "ID", \'a\' as "Part No" from range(10)')
    check_keys('select * from t where "ID" < 5', ["ID"], conn)
    with pytest.raises(SourceError, match="1 duplicate key") as info:
        check_keys(
            'select * from t union all select * from t where "ID" = 3',
            ["ID"],
            conn,
            table="SHOP.T",
            topic="shop_t",
        )
    assert (info.value.table, info.value.topic) == ("SHOP.T", "shop_t")
    assert info.value.duplicate_sample == [(3, 2)]


def test_a_dotted_staging_table_says_why_it_cannot_be_made(conn):
    """DuckDB's own cause was only in ``__cause__`` (issue "silent damage", smaller items)."""
    with pytest.raises(SourceError) as raised:
        create_table(conn, "a.b", pa.schema([("ID", pa.int64())]))
    message = str(raised.value)
    assert "Schema with name a does not exist" in message
    assert "schema 'a', table 'b'" in message and "without a dot" in message
