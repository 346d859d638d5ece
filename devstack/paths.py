"""Where devstack keeps its state: jars, broker data, logs and pid files.

Everything lives under one folder, ``DEVSTACK_HOME`` if set, else ``.devstack/`` at the root of
the source checkout (git-ignored), else ``~/.cache/flow-platform/devstack`` for an installed
package.
"""

from __future__ import annotations

import os
from pathlib import Path

POM = Path(__file__).with_name("pom.xml")


def home() -> Path:
    """Return devstack's state folder, created if missing."""
    explicit = os.environ.get("DEVSTACK_HOME")
    if explicit:
        root = Path(explicit)
    else:
        checkout = Path(__file__).resolve().parent.parent
        if (checkout / "pyproject.toml").is_file():
            root = checkout / ".devstack"
        else:
            root = Path.home() / ".cache" / "flow-platform" / "devstack"
    root.mkdir(parents=True, exist_ok=True)
    return root
