"""The documentation's "Transformations" snippet: a ValueSchema's pyarrow schema and DuckDB.

The snippet's lines are the body of :func:`transformations`, which returns what the last one
selected. Fixed, each with a comment at the spot: the first line is not Python
(``ValueSchema table_schema = ...``); pyarrow takes the 3.14 for a DECIMAL(15,2) column only
as a ``Decimal`` (a float is refused); and ``pa.Table.from_pylist`` takes the pyarrow schema
``pa_schema`` that the snippet computes, not the ValueSchema (a TypeError).
"""

# The documentation's code keeps its own layout (a tab, long lines); DuckDB finds the local
# pa_table by name (a replacement scan), which ruff cannot see.
# ruff: noqa: E501, W191, E101, F841

from decimal import Decimal

import duckdb
import pyarrow as pa

from producer_lib import AvroDecimal, ValueSchema


def transformations():
    """Run the snippet; return ``sum(Amount)``."""
    # ---- from the documentation, verbatim (three fixes marked) ----------------------------
    # fmt: off
    table_schema: ValueSchema = ValueSchema("name", "namespace")  # fixed: was `ValueSchema table_schema = ...`
    table_schema.add_field("Amount", AvroDecimal(15,2))

    pa_schema = table_schema.get_pyarrow()

    data = [
    	{ "Amount": Decimal("3.14") }  # fixed: was 3.14, a float pyarrow refuses for a decimal
    ]

    pa_table = pa.Table.from_pylist(data, pa_schema)  # fixed: was `table_schema`, not a pyarrow schema

    duckdb.execute("select sum(Amount) from pa_table")
    # fmt: on
    # ---- end of the snippet ---------------------------------------------------------------
    return duckdb.fetchone()[0]
