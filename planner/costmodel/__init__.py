"""The cost model: pure functions over specs, numpy-friendly (scalars or arrays)."""
