"""``python -m devstack`` is the ``devstack`` command."""

import sys

from devstack.cli import main

sys.exit(main())
