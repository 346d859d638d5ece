"""DuckDB extensions from their PyPI packages, loaded offline.

DuckDB would download an extension on first use (``INSTALL``/autoload); machines running
flows may have no route to extensions.duckdb.org. The ``duckdb-extension-<name>`` packages
ship the binary at ``duckdb_extension_<name>/extensions/v<duckdb version>/<name>.duckdb_extension``;
``LOAD '<that path>'`` loads it without any network access.

:func:`delta_scan_location` is the location to give the delta extension's ``delta_scan`` for
a local table: version 1.5.5 drops a trailing non-ASCII character of a plain local path
(``.../x表`` opens ``.../x``), while a percent-encoded ``file://`` URL reads every name.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path
from urllib.parse import quote

import duckdb

from producer_lib.errors import SourceError

logger = logging.getLogger(__name__)

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def packaged_extension_path(name: str) -> Path | None:
    """Return the extension file the ``duckdb-extension-<name>`` package ships, if installed.

    The file built for the running DuckDB version is preferred; otherwise None.
    """
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    exact = root / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    return exact if exact.is_file() else None


def is_loaded(connection: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Return True when extension ``name`` is loaded in ``connection``'s database."""
    row = connection.execute(
        "SELECT loaded FROM duckdb_extensions() WHERE extension_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


def load_packaged_extension(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    """Load extension ``name`` from its PyPI package, without network access.

    Raises:
        SourceError: The package is not installed (for this DuckDB version) or the load
            failed; ``pip install duckdb-extension-<name>==<duckdb version>``.
    """
    if is_loaded(connection, name):
        return
    path = packaged_extension_path(name)
    if path is None:
        raise SourceError(
            f"DuckDB extension not available offline: pip install "
            f"duckdb-extension-{name}=={duckdb.__version__}",
            extension=name,
        )
    try:
        connection.execute(f"LOAD '{path.as_posix()}'")
    except duckdb.Error as exc:
        raise SourceError("Cannot load DuckDB extension", extension=name, path=str(path)) from exc
    logger.debug("duckdb extension loaded extension=%s path=%s", name, path)


def delta_scan_location(path: str) -> str:
    """The location of a Delta table as DuckDB's ``delta_scan`` reads it for any name.

    A local path (absolute or relative) becomes a percent-encoded ``file://`` URL; a URL
    (``abfss://``, ``s3://``, ``file://``) is returned as it is.

    Example:
        >>> delta_scan_location("/lake/SHOP/表")
        'file:///lake/SHOP/%E8%A1%A8'
    """
    if _SCHEME.match(path):
        return path
    return "file://" + quote(str(Path(path).absolute()))
