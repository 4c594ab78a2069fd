"""The harness's user-facing error: raised by the domain, printed by the CLI without a traceback."""


class BenchError(Exception):
    """A problem the user can act on (bad flag, busy GPU, held lease, stale image)."""

    exit_code = 1


class LeaseConflict(BenchError):
    """Another lease holds one of the requested GPUs."""

    exit_code = 3


class GpuBusy(BenchError):
    """A requested GPU has compute processes or memory in use."""

    exit_code = 4


class ManifestError(BenchError):
    """A manifest that cannot be read as one: not a JSON object, or a field of the wrong type."""

    exit_code = 2
