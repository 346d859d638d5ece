"""``lakehouse-writer ui``: serve the status page of a writer until SIGTERM or Ctrl-C.

Standalone, beside the writer rather than inside it: it reads only what the writer leaves in
the checkpoint and the lakehouse, so it shows a writer that failed or is stopped as well as a
running one, its reads take no time from the writer's driver, and the writer's own endpoint
(``LAKEHOUSE_METRICS_PORT``) stays a ``/metrics`` without data values that Prometheus may
scrape without credentials.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakehouse_writer.ops.ui.server import FUNCTION_NAME, UiServer
from lakehouse_writer.ops.ui.snapshot import Overview
from lakehouse_writer.runtime.storage import is_local
from producer_lib.auth import Authenticator, check_exposure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.settings import LakehouseSettings

__all__ = ["DEFAULT_PORT", "ui_command"]

log = logging.getLogger(__name__)

DEFAULT_PORT = 8790


def ui_command(
    settings: LakehouseSettings,
    session: Callable[[], SparkSession],
    host: str,
    port: int,
    insecure: bool,
    refresh_s: float,
    stop: threading.Event,
) -> int:
    """Serve the page until ``stop`` is set; returns the exit code (0).

    Raises:
        ConfigError: No authentication is configured and ``host`` is not loopback (without
            ``insecure``), or the ``FLOW_AUTH_*`` settings are wrong.
        UiUnavailable: The address cannot be listened on.
    """
    authenticator = Authenticator.from_settings(FUNCTION_NAME)
    check_exposure(host, authenticator, insecure=insecure)
    local = is_local(settings.checkpoint_path) and is_local(settings.lakehouse_path)
    overview = Overview(settings, None if local else session(), refresh_s)
    with UiServer(overview.document, authenticator, host, port, insecure) as server:
        log.info("status page auth: %s", authenticator.describe())
        print(f"status page: http://{host}:{server.port}/ (Ctrl-C stops it)", flush=True)
        stop.wait()
    return 0
