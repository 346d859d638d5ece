"""What applies the rows to Delta: Spark's Delta, and delta-rs in the driver."""
