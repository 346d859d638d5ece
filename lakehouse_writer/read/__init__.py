"""Kafka to decoded change rows: framing, schemas, keys, the scan, the decode."""
