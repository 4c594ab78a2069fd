"""The engine's error: the scenario cannot run."""


class SimulationError(RuntimeError):
    """The scenario cannot run (a call larger than KV, a layout that does not fit, ...)."""
