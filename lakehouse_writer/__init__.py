"""The Lakehouse Writer: a Spark Structured Streaming job that applies change rows to Delta.

Quickstart::

    from lakehouse_writer.session import build_spark_session
    spark = build_spark_session()   # local[2], Delta + Kafka + Avro jars via devstack
"""

__all__: list[str] = []
