"""Example flows built on producer_lib, and the demo (``python -m flows.demo``)."""
