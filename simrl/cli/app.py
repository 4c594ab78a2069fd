"""The shared CLI app: one way to fail, warn, exit and write outputs, for every command.

Every SimRL command (``srl``, ``srl-regress``, ``srl-plot``, ``srl-compare``, ``srl-psrl-plot``,
``srl-workload``) is an `AppGroup` or `AppCommand` and gets from it:

- ``-h/--help`` (click's ``--help`` plus ``-h``) and shell completion (click's
  ``_<PROG>_COMPLETE`` variable, see docs/cli.md);
- ``-q/--quiet`` and ``-v/--verbose`` through `common_options`;
- the exit-code table (`EXIT_OK` ... `EXIT_IMPOSSIBLE`): a user error (a bad option, input file or
  configuration) is 2, a negative result 1, a scenario that cannot run 3;
- `abort(message)`, the one exit for user errors, and `warn(message)`, the one warning channel
  (Python warnings raised by the domain are routed to it, without source lines);
- `user_errors()`, which turns the domain's user-error exceptions into `abort`;
- SIGTERM handled like Ctrl-C: the command unwinds, so atomic writes and staged run directories
  (`simrl.atomic`) remove their temporary files, and exits 130 (SIGINT) or 143 (SIGTERM);
- the output policy: `check_output_file` / `check_output_dir` before any work starts.

Adopting it in another CLI (bench, srl-profile, srl-sweep): pass ``cls=AppGroup`` (or
``cls=AppCommand``) to ``click.group``/``click.command``, decorate commands with
`common_options`, call `abort`/`warn` instead of local copies, and wrap domain calls in
``with user_errors():`` after `register_user_error` for the package's own error classes.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import click

EXIT_OK = 0
EXIT_NEGATIVE = 1  # the command ran and its answer is "no" (e.g. a benchmark run is INVALID)
EXIT_USAGE = 2  # a user error: bad option, input file or configuration
EXIT_IMPOSSIBLE = 3  # the scenario is well-formed but cannot run (e.g. it deadlocks)
EXIT_SIGINT, EXIT_SIGTERM = 130, 143

EXIT_CODES = {
    EXIT_OK: "ok",
    EXIT_NEGATIVE: "result negative (the command ran; the answer is no)",
    EXIT_USAGE: "user error (option, input file or configuration); the message names where",
    EXIT_IMPOSSIBLE: "impossible scenario (well-formed, but it cannot run to the end)",
    EXIT_SIGINT: "interrupted (Ctrl-C); no partial output is left",
    EXIT_SIGTERM: "terminated (SIGTERM); no partial output is left",
}

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM, so the command unwinds like on Ctrl-C."""


class _State:
    quiet = False
    verbose = False
    json = False  # --json: stdout carries one JSON document, so normal output goes to stderr


state = _State()


# -- messages --------------------------------------------------------------------------------

def abort(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """The one exit for user errors: ``error: MESSAGE`` on stderr, then exit ``code``."""
    click.secho(f"error: {message}", fg="red", err=True)
    raise SystemExit(code)


def warn(message: str) -> None:
    """The one warning channel: ``warning: MESSAGE`` on stderr (shown even with --quiet)."""
    click.secho(f"warning: {message}", fg="yellow", err=True)


def info(message: str = "", err: bool = False) -> None:
    """Normal output; suppressed by --quiet; on stderr under --json (stdout is the document)."""
    if not state.quiet:
        click.echo(message, err=err or state.json)


def debug(message: str) -> None:
    """Detail on stderr, shown only with --verbose."""
    if state.verbose:
        click.echo(message, err=True)


# -- user errors -----------------------------------------------------------------------------

_USER_ERRORS: list[type[BaseException]] = []


def register_user_error(*classes: type[BaseException]) -> None:
    """Declare exception classes whose message is a complete user-facing error."""
    for cls in classes:
        if cls not in _USER_ERRORS:
            _USER_ERRORS.append(cls)


def user_error_types() -> tuple[type[BaseException], ...]:
    """The domain's user-error classes (imported here, lazily, so `import simrl.cli.app` is cheap)."""
    from simrl.config import ConfigError
    from simrl.cost.base import CostModelError, OutOfDomainError
    from simrl.cost.observations import ObservationError
    from simrl.engine.core import SimulationError
    from simrl.realrun.format import RealRunError
    from simrl.strictio import StrictInputError, YamlInputError
    from workloads.trace_parse import TraceError

    register_user_error(ConfigError, SimulationError, CostModelError, OutOfDomainError, ObservationError,
                        RealRunError, TraceError, StrictInputError, YamlInputError, OutputError)
    return tuple(_USER_ERRORS)


def describe_os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


@contextlib.contextmanager
def user_errors(*extra: type[BaseException]) -> Iterator[None]:
    """Turn the domain's user errors (and ``extra`` classes) into `abort`, exit 2."""
    try:
        yield
    except (*user_error_types(), *extra) as exc:
        abort(str(exc))
    except OSError as exc:  # a file the user named cannot be read or written
        abort(describe_os_error(exc))


# -- outputs ---------------------------------------------------------------------------------

class OutputError(ValueError):
    """An output path that cannot be written; the message names the option and the remedy."""


def _writable_dir(path: Path, option: str) -> None:
    """``path`` is, or can be created as, a directory we can write into."""
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise OutputError(f"{option} {path}: {probe} is a broken symbolic link")
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if not probe.is_dir():
        raise OutputError(f"{option} {path}: {probe} is a file, not a directory; choose another path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: {probe} is not writable; choose a directory you can write to")
    try:  # the real test (permissions can lie: root, read-only mounts, /proc); nothing is left behind
        fd, tmp = tempfile.mkstemp(prefix=".write-test-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write there ({exc.strerror or exc}); choose another "
                          f"directory") from None


def check_output_dir(path: str | os.PathLike, option: str = "-o/--output") -> Path:
    """Refuse, before any work, an output directory that is a file or cannot be written."""
    path = Path(path)
    if str(path) == "":
        raise OutputError(f"{option}: empty path")
    _writable_dir(path, option)
    return path


def check_output_file(path: str | os.PathLike, option: str = "-o/--output", suffixes: tuple[str, ...] = ()) -> Path:
    """Refuse, before any work, an output file that is a directory or cannot be written, or (``suffixes``: the
    formats the command writes) whose name says another format."""
    path = Path(path)
    if str(path) == "" or path.name in ("", ".", ".."):
        raise OutputError(f"{option} {str(path)!r}: expected a file path")
    if suffixes and path.suffix.lower() not in suffixes:
        raise OutputError(f"{option} {path}: expected a file name ending in {' or '.join(suffixes)} (the format "
                          f"written), got {path.suffix or 'no suffix'!r}")
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory; give a file name (e.g. {path / 'out.json'})")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{option} {path}: exists and is not writable")
    _writable_dir(path.parent, option)
    return path


# -- options ---------------------------------------------------------------------------------

class OutputPath(click.Path):
    """An output file (or, with ``directory=True``, directory) option checked when the command line
    is parsed (`check_output_file` / `check_output_dir`): a file in the way, a directory where a file
    is meant or a place that cannot be written is a usage error before any work, not a traceback
    when the results of a long profile or sweep are written."""

    def __init__(self, directory: bool = False):
        super().__init__(dir_okay=directory, file_okay=not directory)
        self.directory = directory

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        option = "/".join(param.opts) if param is not None else "-o/--output"
        try:
            (check_output_dir if self.directory else check_output_file)(value, option)
        except OutputError as exc:
            self.fail(str(exc).removeprefix(f"{option} "), param, ctx)
        return value


class FiniteFloat(click.ParamType):
    """A number option that refuses ``nan``, ``inf`` and overflow (``1e400``): click's FLOAT and
    FloatRange accept them, and a NaN compares false with every bound. ``minimum`` (exclusive with
    ``min_open``) and ``maximum`` bound it; every float option of every command uses it."""

    name = "float"

    def __init__(self, minimum: float | None = None, maximum: float | None = None, min_open: bool = False):
        self.minimum, self.maximum, self.min_open = minimum, maximum, min_open

    def convert(self, value, param, ctx):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.fail(f"{value!r} is not a number", param, ctx)
        try:
            x = float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        lo, hi = self.minimum, self.maximum
        if lo is not None and (x < lo or (self.min_open and x == lo)):
            self.fail(f"{value} is not {'>' if self.min_open else '>='} {lo:g}", param, ctx)
        if hi is not None and x > hi:
            self.fail(f"{value} is not <= {hi:g}", param, ctx)
        return x

    def get_metavar(self, param, ctx=None):  # noqa: ARG002 - click's signature
        return "FLOAT"


def _set(name: str):
    def callback(_ctx, _param, value):
        if value:
            setattr(state, name, True)
        return value

    return callback


def common_options(f):
    """``-q/--quiet`` and ``-v/--verbose`` (read them through `state`, `info` and `debug`)."""
    f = click.option("-v", "--verbose", is_flag=True, expose_value=False, is_eager=True,
                     callback=_set("verbose"), help="Print more detail (on stderr).")(f)
    f = click.option("-q", "--quiet", is_flag=True, expose_value=False, is_eager=True,
                     callback=_set("quiet"), help="Print only errors, warnings and requested data.")(f)
    return f


def to_json(data, indent: int | None = 1) -> str:
    """Machine output: sorted keys, and standard JSON (NaN and infinities, which JSON cannot
    hold, become null; a null ``time_horizon_s`` reads back as "no limit")."""
    import json
    import math

    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(data), indent=indent, sort_keys=True, default=str, allow_nan=False)


def _json_flag(_ctx, _param, value: bool) -> bool:
    state.json = bool(value)
    return value


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, callback=_json_flag,
                        help="Print the result as JSON (machine output).")(f)


# -- running ---------------------------------------------------------------------------------

def _show_warning(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
    warn(str(message))


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM raises `Terminated` in the main thread while the command runs."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(_signum, _frame):
        raise Terminated()

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class _AppMixin:
    def __init__(self, *args, **kwargs):
        settings = dict(kwargs.pop("context_settings", None) or {})
        for k, val in CONTEXT_SETTINGS.items():
            settings.setdefault(k, val)
        super().__init__(*args, context_settings=settings, **kwargs)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        state.quiet = state.verbose = state.json = False
        old_show = warnings.showwarning
        warnings.showwarning = _show_warning
        code = EXIT_OK
        try:
            with _signals():
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if type(rv) is int else EXIT_OK
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except click.ClickException as exc:
            if not standalone_mode:
                raise
            exc.show()
            code = EXIT_USAGE if exc.exit_code in (1, 2) else exc.exit_code
        except (click.Abort, KeyboardInterrupt):
            if not standalone_mode:
                raise
            click.echo("\ninterrupted; no partial output was left behind", err=True)
            code = EXIT_SIGINT
        except Terminated:
            if not standalone_mode:
                raise
            click.echo("terminated; no partial output was left behind", err=True)
            code = EXIT_SIGTERM
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
        except Exception as exc:
            if not isinstance(exc, user_error_types()):
                raise
            click.secho(f"error: {exc}", fg="red", err=True)  # a command that forgot `with user_errors()`
            code = EXIT_USAGE
        finally:
            warnings.showwarning = old_show
        if not standalone_mode:
            return code
        sys.exit(code)


class AppCommand(_AppMixin, click.Command):
    """A single-command CLI of the app."""


class AppGroup(_AppMixin, click.Group):
    """A CLI with subcommands; subcommands (and theirs, at any depth) inherit -h/--help."""

    group_class = type  # click: `@app.group()` makes another AppGroup, so nested groups keep the rule below

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        # every subcommand carries -h/--help itself: click (8.2+) builds a command's help option once, from
        # the first context it sees, so a subcommand first shown on its own (a docs generator, a test
        # resolving `cli.commands[...]`) would otherwise keep only --help for every later call
        _give_help_names(cmd)
        super().add_command(cmd, name)


def _give_help_names(cmd: click.Command) -> None:
    for k, val in CONTEXT_SETTINGS.items():
        cmd.context_settings.setdefault(k, val)
    if isinstance(cmd, click.Group):  # a plain click group added whole: its commands too
        for sub in cmd.commands.values():
            _give_help_names(sub)
