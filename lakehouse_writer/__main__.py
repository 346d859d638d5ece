"""``python -m lakehouse_writer``: the same as the ``lakehouse-writer`` command."""

import sys

from lakehouse_writer.cli import main

sys.exit(main())
