"""The status page in headless chromium against hostile data: values stay text.

Table names, errors, function names and samples come from Kafka messages that anyone allowed
to produce may shape. The page must show them as they are and run none of them. The data here
is a document handed to the real server (what it claims is how the page draws data, not how
the data is read: that is ``test_see_it_run.py``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from lakehouse_writer.ops.ui.server import FUNCTION_NAME, UiServer
from producer_lib.auth import Authenticator, AuthSettings
from tests.support.browser import chromium, wait_until

pytestmark = pytest.mark.browser

HOSTILE = '<img src=x onerror="window.pwned=1">'
SCRIPT = "<script>window.pwned=2</script>"


def _document() -> dict[str, Any]:
    now = time.time()
    return {
        "generated_at": "2026-01-01T00:00:00+00:00",
        "refresh_s": 60,
        "step_s": 10,
        "writer": {
            "state": HOSTILE,
            "healthy": False,
            "problems": [SCRIPT],
            "last_batch_id": 3,
            "age_s": 1.0,
            "pending_commits": 0,
        },
        "tables": [
            {
                "name": HOSTILE,
                "rows": 5,
                "version": 1,
                "committed_at": None,
                "operation": None,
                "newest_change": None,
                "freshness_s": None,
                "stopped": True,
                "stopped_error": SCRIPT,
            }
        ],
        "topics": [{"topic": HOSTILE, "lag": 1, "series": [{"t": now, "lag": 1, "rows_per_s": 0}]}],
        "runs": [
            {
                "run_id": "r1",
                "function": HOSTILE,
                "dataflow": SCRIPT,
                "load": "delta",
                "status": "FAILED",
                "started_at": None,
                "finished_at": None,
                "duration_s": None,
                "rows": 0,
                "error": SCRIPT,
            }
        ],
        "rejected": [
            {
                "table": HOSTILE,
                "error": SCRIPT,
                "rows": 2,
                "sample": {"topic": HOSTILE, "partition": 0, "offset": 1, "value_hex": SCRIPT},
            }
        ],
    }


def test_hostile_names_and_errors_show_as_text_and_run_nothing():
    authenticator = Authenticator.from_settings(FUNCTION_NAME, AuthSettings())  # loopback
    with UiServer(_document, authenticator) as server, chromium() as driver:
        driver.get(f"http://127.0.0.1:{server.port}/")
        text = wait_until(
            "the page drawn",
            lambda: (
                (t := driver.execute_script("return document.body.innerText"))
                and HOSTILE in t
                and t
            ),
            30,
        )
        assert driver.execute_script("return window.pwned === undefined")
        assert (
            driver.execute_script(
                "return document.querySelectorAll('main img, main script').length"
            )
            == 0
        )
        assert text.count(SCRIPT) >= 4 and text.count(HOSTILE) >= 4
