"""The delta-rs engine: small tables merged and appended in the driver."""
