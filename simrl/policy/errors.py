"""The policy seam's own error: a policy found that the run cannot go on.

Presets raise `PolicyError` from their hooks (for example ART's discard-queue collapse, or a
batch that can never form); the engine re-raises it as `simrl.engine.core.SimulationError`, so
presets never import the engine.
"""


class PolicyError(RuntimeError):
    """Raised by a policy hook when the scenario cannot continue; the message says why."""
