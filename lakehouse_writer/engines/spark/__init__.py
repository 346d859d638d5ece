"""The Spark engine: Delta's MERGE, DELETE and appends on Spark."""
