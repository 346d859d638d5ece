"""The writer on the Spark 4.0 line (Fabric runtime 2.0: Spark 4.0, Delta 4.0, Scala 2.13).

Runs, from the main suite, the curated tests (``tests/compat/curated.py``, the same as on 3.5)
in the 4.0 line's venv (``devstack compat 4.0``: pyspark and delta-spark 4.0.1, Python 3.12
where found). ``test_lines.py`` is run by hand there.
"""

from __future__ import annotations

import pytest

from tests.compat.curated import run_on_line

LINE = "4.0"  # the venv conftest.py builds early


@pytest.mark.slow
def test_the_row_types_and_the_writer_pass_on_spark_40(kafka_bootstrap):
    run_on_line(LINE, kafka_bootstrap)
