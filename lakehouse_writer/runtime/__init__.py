"""Where the writer runs: the Spark session, its jars, file systems."""
