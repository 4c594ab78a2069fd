"""simrl_fast: the JAX lax.scan engine, vmapped over configurations, checked against the SimPy oracle (not built yet)."""
