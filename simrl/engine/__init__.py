"""The SimPy reference engine: the oracle that defines the simulation semantics (docs/model.md)."""
