"""The writer on the Spark 3.5 line (Fabric runtime 1.3: Spark 3.5, Delta 3.2, Scala 2.12).

Runs, from the main suite, the curated tests (``tests/compat/curated.py``) in the 3.5 line's
venv (``devstack compat 3.5``) (192-207 s on 2 cores; ``test_lines.py`` is run by hand there).
"""

from __future__ import annotations

import pytest

from tests.compat.curated import run_on_line

LINE = "3.5"  # the venv conftest.py builds early


@pytest.mark.slow
def test_the_row_types_and_the_writer_pass_on_spark_35(kafka_bootstrap):
    run_on_line(LINE, kafka_bootstrap)
