"""SimRL: a discrete-event simulator of asynchronous, disaggregated RL post-training of LLMs.

`simrl.simulate(config) -> Report` runs the SimPy reference engine (docs/model.md).
Importing simrl needs none of jax, torch, vllm or ray.
"""

__version__ = "0.1.0"


def simulate(config, workload=None, costs=None):
    """Run one simulation; see `simrl.engine.sim.simulate`."""
    from simrl.engine.sim import simulate as _simulate

    return _simulate(config, workload=workload, costs=costs)
