"""The streaming query and its micro-batch.

:mod:`~lakehouse_writer.stream.job` starts the query (Kafka, read_committed → ``foreachBatch``)
and drives it; :mod:`~lakehouse_writer.stream.batch` is one micro-batch as its steps, the page
a newcomer reads first. Both only call into the folders before them (``read/``, ``route/``,
``engines/``, ``tables/``, ``commit/``, ``runtime/``); nothing there imports this folder.
"""
