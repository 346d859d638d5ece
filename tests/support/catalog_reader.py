"""What a second Spark process finds by name in a Hive metastore: ``python -m`` this module.

Usage::

    python -m tests.support.catalog_reader <metastore folder>

Starts its own local session on the embedded Derby metastore of that folder (one JVM at a
time: run it after the writer has exited) and prints one JSON object: the tables of each
namespace, rows read by name, and ``DESCRIBE TABLE EXTENDED`` of ``shop.orders``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def hive_conf(folder: str) -> dict[str, str]:
    """Spark settings of an embedded Derby metastore kept in ``folder``."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder}/metastore_db;create=true"
        ),
        "spark.sql.warehouse.dir": f"{folder}/warehouse",
    }


def read(spark: Any) -> dict[str, Any]:
    """The catalog as the reader sees it."""
    namespaces = sorted(r[0] for r in spark.sql("SHOW SCHEMAS").collect())
    tables = {
        ns: sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN `{ns}`").collect())
        for ns in namespaces
    }
    described = spark.sql("DESCRIBE TABLE EXTENDED shop.orders").collect()
    detail = {r[0]: r[1] for r in described if r[0] and not r[0].startswith("#")}
    columns = {}
    for r in described:
        if not r[0]:
            break  # the blank line before "# Detailed Table Information"
        columns[r[0]] = r[2]
    return {
        "namespaces": namespaces,
        "tables": tables,
        "orders": sorted(
            [r.ID, r.STATUS] for r in spark.sql("SELECT ID, STATUS FROM shop.orders").collect()
        ),
        "early": sorted(r.ID for r in spark.sql("SELECT ID FROM shop.early").collect()),
        "kunden": sorted(r.ID for r in spark.sql("SELECT ID FROM shop.kunden_").collect()),
        "rejected": spark.sql("SELECT * FROM lakehouse_system._rejected").count(),
        "state_columns": spark.table("lakehouse_system._writer_state").columns,
        "columns": columns,
        "properties": detail.get("Table Properties", ""),
        "location": detail.get("Location", ""),
        "comment": detail.get("Comment", ""),
    }


def main(folder: str) -> None:
    """Print what :func:`read` finds, as JSON on the last line of stdout."""
    from lakehouse_writer.runtime.session import build_spark_session

    spark = build_spark_session(
        master="local[1]", app_name="catalog-reader", conf=hive_conf(folder)
    )
    try:
        print(json.dumps(read(spark)))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
