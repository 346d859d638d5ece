"""The status page: ``lakehouse-writer ui`` (see ``docs/OPERATIONS.md``, "See it run").

:mod:`~lakehouse_writer.ops.ui.snapshot` reads what the page shows,
:mod:`~lakehouse_writer.ops.ui.server` serves it with the page's own files (``static/``: HTML,
CSS, vanilla JavaScript and SVG plots, no build step, nothing from a CDN),
:mod:`~lakehouse_writer.ops.ui.command` is the command.
"""
