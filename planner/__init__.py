"""planner: which way of splitting a model across a cluster fits, and which runs fastest."""

__version__ = "0.1.0"
