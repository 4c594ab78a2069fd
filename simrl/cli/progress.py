"""A progress display for long commands: shown after ~2 s, on a terminal, unless --quiet.

`sim_progress(sim)` watches a running `Simulation` from a background thread that only reads
(simulated time, training steps recorded): the engine is not touched, so a run with and without
the display processes the same events and writes the same files. The display is `rich`'s
progress bar (rate, ETA) when rich is installed (``pip install rich``; it is in the ``dev``
extra), else one plain line rewritten in place on stderr.

It stays silent when stderr is not a terminal (pipes, CI, tests), with ``-q/--quiet``, and for
commands that finish within `DELAY_S`.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator

DELAY_S = 2.0  # commands that finish sooner show nothing
REFRESH_S = 0.25


def enabled(stream=None) -> bool:
    """Whether a progress display may be drawn: a terminal, and not --quiet."""
    from simrl.cli.app import state

    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return not state.quiet and bool(isatty and isatty())


class _PlainLine:
    """``label: 12.3 / 60.0 s simulated (20%), 3/10 steps, 4.1 s`` rewritten with ``\\r``."""

    def __init__(self, stream) -> None:
        self.stream, self.width = stream, 0

    def update(self, text: str) -> None:
        pad = max(0, self.width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self.width = len(text)

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def describe(now: float, horizon: float, steps: int, total_steps: int) -> tuple[str, float | None]:
    """The progress text and the fraction done (None when neither bound is known).

    The fraction is the larger of simulated time / horizon and steps / training steps: a run
    ends at whichever bound it reaches first.
    """
    parts, fracs = [], []
    if math.isfinite(horizon) and horizon > 0:
        parts.append(f"{now:.1f} / {horizon:.1f} s simulated")
        fracs.append(now / horizon)
    else:
        parts.append(f"{now:.1f} s simulated")
    if total_steps > 0:
        parts.append(f"{steps}/{total_steps} steps")
        fracs.append(steps / total_steps)
    else:
        parts.append(f"{steps} steps")
    frac = min(1.0, max(fracs)) if fracs else None
    return ", ".join(parts), frac


@contextlib.contextmanager
def watch(poll: Callable[[], tuple[str, float | None]], label: str, stream=None,
          delay_s: float = DELAY_S, refresh_s: float = REFRESH_S, force: bool = False) -> Iterator[None]:
    """Show ``poll()``'s text and fraction while the body runs, once it has run ``delay_s``."""
    stream = stream if stream is not None else sys.stderr
    if not (force or enabled(stream)):
        yield
        return
    stop = threading.Event()

    def loop() -> None:
        if stop.wait(delay_s):
            return
        bar = _open(stream, label)
        try:
            while True:
                text, frac = poll()
                bar(text, frac)
                if stop.wait(refresh_s):
                    break
        finally:
            bar(None, None)

    thread = threading.Thread(target=loop, name="srl-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _open(stream, label: str):
    """A draw function ``(text, fraction)``; ``(None, None)`` closes the display."""
    try:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    except ImportError:
        line, t0 = _PlainLine(stream), time.perf_counter()

        def draw_plain(text, frac):
            if text is None:
                line.close()
                return
            pct = f" ({frac:.0%})" if frac is not None else ""
            line.update(f"{label}: {text}{pct}, {time.perf_counter() - t0:.0f} s")

        return draw_plain

    prog = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                    TextColumn("{task.fields[text]}"), TimeElapsedColumn(), TextColumn("ETA"),
                    TimeRemainingColumn(), console=Console(file=stream), transient=True)
    task = prog.add_task(label, total=1000, text="")
    prog.start()

    def draw_rich(text, frac):
        if text is None:
            prog.stop()
            return
        prog.update(task, completed=int((frac or 0.0) * 1000), text=text)

    return draw_rich


def sim_progress(sim, stream=None, **kw):
    """`watch` a `Simulation`: simulated time against the horizon, steps against training steps."""
    horizon = float(sim.cfg.run.time_horizon_s)
    total = int(sim.cfg.run.training_steps)

    def poll():
        return describe(sim.env.now, horizon, len(sim.recorder.steps), total)

    return watch(poll, "simulating", stream=stream, **kw)
