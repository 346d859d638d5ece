"""Benchmark: AvroEncoder vs fastavro.schemaless_writer on TPC-H lineitem rows.

Run: ``.venv/bin/python bench/encode.py [--rows N] [--fastavro-rows M]``

Generates lineitem with DuckDB's tpch extension (loaded offline from the
duckdb-extension-tpch wheel), takes 10 columns (longs, an int, decimals, a double, a
date, a UTC timestamp, strings; three of them nullable), encodes them with
:class:`AvroEncoder` and with fastavro (``to_pylist`` + one ``schemaless_writer`` call
per row), checks that the bytes are identical and prints a last line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import time
from pathlib import Path

import duckdb
import fastavro
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from producer_lib.schema.encoder import AvroEncoder  # noqa: E402

LINEITEM_ROWS_PER_SF = 6_001_215

SCHEMA = {
    "type": "record",
    "name": "lineitem",
    "namespace": "bench.tpch",
    "fields": [
        {"name": "l_orderkey", "type": "long"},
        {"name": "l_partkey", "type": ["null", "long"]},
        {"name": "l_linenumber", "type": "int"},
        {
            "name": "l_quantity",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 15, "scale": 2},
        },
        {
            "name": "l_extendedprice",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 15, "scale": 2},
            ],
        },
        {"name": "l_discount", "type": "double"},
        {"name": "l_shipdate", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "l_commit_ts",
            "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
        },
        {"name": "l_shipmode", "type": {"type": "string", "logicalType": "VARCHAR", "length": 10}},
        {"name": "l_comment", "type": {"type": "string", "logicalType": "NVARCHAR", "length": 44}},
    ],
}

QUERY = """
select l_orderkey,
       case when l_orderkey % 7 = 0 then null else l_partkey end as l_partkey,
       l_linenumber::integer as l_linenumber,
       l_quantity,
       case when l_orderkey % 11 = 0 then null else l_extendedprice end as l_extendedprice,
       l_discount::double as l_discount,
       l_shipdate,
       case when l_orderkey % 13 = 0 then null
            else (l_commitdate + to_microseconds(l_orderkey * 7919 % 86400000000))::timestamptz
       end as l_commit_ts,
       l_shipmode,
       l_comment
from lineitem
limit {rows}
"""


def lineitem(rows: int) -> pa.Table:
    """Generate ``rows`` lineitem rows with the tpch extension of the installed wheel."""
    import duckdb_extension_tpch

    ext = Path(duckdb_extension_tpch.__file__).parent / "extensions"
    path = next(ext.glob("*/tpch.duckdb_extension"))
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"LOAD '{path}'")
    scale = max(0.01, math.ceil(rows / LINEITEM_ROWS_PER_SF * 102) / 100)
    con.execute(f"CALL dbgen(sf={scale})")
    return con.sql(QUERY.format(rows=rows)).to_arrow_table()


def time_encoder(enc: AvroEncoder, table: pa.Table, repeat: int) -> tuple[float, list[bytes]]:
    """Median seconds of ``enc.encode`` over ``repeat`` runs, and the last output."""
    times, out = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        out = enc.encode(table)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def time_buffer(enc: AvroEncoder, table: pa.Table, repeat: int) -> float:
    """Median seconds of ``enc.encode_buffer`` (no per-row bytes objects)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        enc.encode_buffer(table)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_fastavro(table: pa.Table) -> tuple[float, list[bytes]]:
    """Seconds of to_pylist + schemaless_writer per row, and the bytes."""
    parsed = fastavro.parse_schema(SCHEMA)
    write = fastavro.schemaless_writer
    start = time.perf_counter()
    out = []
    for row in table.to_pylist():
        buf = io.BytesIO()
        write(buf, parsed, row)
        out.append(buf.getvalue())
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--fastavro-rows", type=int, default=0, help="fastavro sample size (0: all rows)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    table = lineitem(args.rows).combine_chunks()
    print(f"generated {table.num_rows} lineitem rows in {time.perf_counter() - start:.1f}s")
    print(f"arrow types: {', '.join(f'{f.name}:{f.type}' for f in table.schema)}")

    enc = AvroEncoder(SCHEMA)
    enc_s, enc_out = time_encoder(enc, table, args.repeat)
    buf_s = time_buffer(enc, table, args.repeat)
    rows = table.num_rows
    print(f"encoder encode():        {enc_s:.3f}s  {rows / enc_s:,.0f} rows/s")
    print(f"encoder encode_buffer(): {buf_s:.3f}s  {rows / buf_s:,.0f} rows/s")
    print(f"encoder list-of-bytes split costs {enc_s - buf_s:.3f}s")

    sample_rows = args.fastavro_rows or rows
    sample = table.slice(0, sample_rows)
    if sample.num_rows < rows:
        print(f"fastavro runs on a sample: the first {sample.num_rows} of {rows} rows")
    fa_s, fa_out = time_fastavro(sample)
    print(
        f"fastavro (to_pylist + schemaless_writer): {fa_s:.3f}s  "
        f"{sample.num_rows / fa_s:,.0f} rows/s"
    )
    identical = fa_out == enc_out[: sample.num_rows]
    print(
        f"identical bytes on {sample.num_rows} rows: {identical}; "
        f"NVARCHAR truncations: {enc.truncations}"
    )
    result = {
        "encoder_rows_per_s": round(rows / enc_s),
        "fastavro_rows_per_s": round(sample.num_rows / fa_s),
        "ratio": round((rows / enc_s) / (sample.num_rows / fa_s), 2),
        "identical": identical,
    }
    print("RESULT " + json.dumps(result))
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
