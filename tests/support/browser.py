"""Debian's headless chromium through its chromedriver (selenium), and Debian's Prometheus.

``make test`` installs both (scripts/install-browser-tools.sh); where no package manager could,
the tests that need them skip and say which program is missing.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"  # tests/artifacts (git-ignored)
_INSTALL = (
    "scripts/install-browser-tools.sh (make browser-tools) found no package manager to install it"
)


def need(program: str) -> str:
    """The path of ``program``, or skip the test saying that it is missing."""
    found = shutil.which(program)
    if found is None:
        pytest.skip(f"{program} is not installed: {_INSTALL}")
    return found


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 1000) -> Iterator[Any]:
    """A selenium driver of headless chromium (Debian's binary and chromedriver, no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = need("chromium")
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container: chromium's sandbox needs user namespaces
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-extensions",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(need("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def full_page_screenshot(driver: Any, path: Path) -> Path:
    """Save a PNG of the whole page (the window grown to the page's height)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.execute_script("return document.documentElement.scrollWidth")
    driver.set_window_size(max(width, 1280), height + 120)
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path


def wait_until(what: str, check: Any, timeout_s: float, every_s: float = 0.5) -> Any:
    """Call ``check`` until it returns something truthy; fail naming ``what`` at the timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - not there yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every_s)
    raise AssertionError(f"not {what} within {timeout_s:.0f} s; last: {last!r}")


class PrometheusServer:
    """``prometheus`` on a loopback port with a temporary configuration; a context manager."""

    def __init__(self, config: Path, port: int, data: Path, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(log, "ab")  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(
            [
                need("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.log = log

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a GET on the HTTP API (``/api/v1/<path>``)."""
        import json

        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now."""
        return list(self.api("query", query=expr)["result"])

    def __enter__(self) -> PrometheusServer:
        wait_until("Prometheus ready", lambda: self._ready(), 60)
        return self

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-2000:]
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
            return answer.status == 200

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()
