"""`srl step`: SimPy step debugging of one run.

Step event by event, run until a time or an event kind, and print an instance, the queues,
the buffer or the trainer between steps. Commands come from the terminal, or from
``--do "s 5; i 0; k train_end"`` for scripted use.
"""

from __future__ import annotations

import math

import click

from simrl.cli.app import common_options, user_errors
from simrl.config import load_config
from simrl.strictio import did_you_mean

HELP = """commands:
  s [N]        step: run N SimPy events (default 1) and print the telemetry they produced
  t TIME       until: run until simulated time TIME (seconds)
  k KIND       kind: run until an event of KIND (call_admit, call_finish, group_done, batch_ready,
               train_start, train_end, publish_end, abort, preempt, pull_end, ...)
  i N          instance: print rollout instance N
  qu           queues: print the router queue and every instance's waiting queue
  b            buffer: print the trainer's buffer of finished groups
  tr           trainer: print the trainer and policy state
  c            continue to the end of the run
  snap PATH    write a snapshot of this instant (JSON, docs/predict.md) for srl-predict
  h, help, ?   this help
  q, quit, x   quit (also exit, or end of input)"""


def fmt_instance(sim, n: int) -> str:
    if not 0 <= n < len(sim.instances):
        return f"no instance {n} (there are {len(sim.instances)})"
    i = sim.instances[n]
    lines = [
        f"instance {n}: version {i.version}{' (paused)' if i.paused else ''}, iteration {i.it}, "
        f"busy {i.busy_s:.3f} s",
        f"  running {len(i.running)} (decoding {i.n_decoding}, prefilling {len(i.prefilling)}), "
        f"waiting {len(i.waiting)}",
        f"  KV used {i.kv_used} / {i.capacity} tokens, cached prefixes {i.cache_tokens} tokens "
        f"in {len(i.cache)} entries",
    ]
    for r in i.running[:8]:
        lines.append(
            f"  - rid {r.rid} group {r.group.wg} traj {r.traj.tid} turn {r.turn}: "
            f"{i.generated_of(r)}/{r.completion_tokens} tokens, prefill left {r.prefill_remaining}, v{r.version}"
        )
    if len(i.running) > 8:
        lines.append(f"  ... {len(i.running) - 8} more")
    return "\n".join(lines)


def fmt_queues(sim) -> str:
    q = sim.router.queue
    lines = [f"router queue: {len(q)} calls" + (f"; head rid {q[0].rid} (group {q[0].group.wg})" if q else "")]
    for i in sim.instances:
        lines.append(f"instance {i.index} waiting: {[r.rid for r in list(i.waiting)[:10]]}"
                     + (" ..." if len(i.waiting) > 10 else ""))
    return "\n".join(lines)


def fmt_buffer(sim) -> str:
    buf = sim.st.buffer
    lines = [f"buffer: {len(buf)} finished groups"]
    for g in buf[:12]:
        lines.append(f"  - gid {g.gid} (prompt {g.wg}) dispatched v{g.dispatch_version}, "
                     f"versions {g.min_version}..{g.max_version}, {g.completion_tokens} tokens")
    return "\n".join(lines)


def fmt_trainer(sim) -> str:
    st = sim.st
    return (
        f"trainer: {sim.trainer_phase}; version {st.version}, steps done {st.steps_done}\n"
        f"policy {sim.policy.kind}: dispatched {st.groups_dispatched}, running {st.n_running}, "
        f"accepted {st.groups_accepted}, dropped {st.groups_dropped}, admission "
        f"{'open' if sim.policy.admit(st) else 'closed'}"
    )


def run_until(sim, pred) -> list[dict]:
    """Step until ``pred(new_events)`` holds or nothing is left; returns the new events."""
    seen = len(sim.events)
    while sim.step():
        new = sim.events[seen:]
        if pred(new):
            return new
    return sim.events[seen:]


def execute(sim, line: str, echo) -> bool:
    """Run one debugger command; False means exit."""
    parts = line.split()
    if not parts:
        return True
    cmd, args = parts[0], parts[1:]
    try:
        if cmd in ("q", "quit", "x", "exit"):
            return False
        if cmd in ("h", "help", "?"):
            echo(HELP)
        elif cmd in ("s", "step"):
            n = int(args[0]) if args else 1
            seen = len(sim.events)
            for _ in range(n):
                if not sim.step():
                    break
            for e in sim.events[seen:][-20:]:
                echo(f"  {e['t']:.6f} {e['kind']} " + " ".join(f"{k}={v}" for k, v in e.items()
                                                             if k not in ("t", "kind")))
            echo(f"t = {sim.env.now:.6f} s")
        elif cmd in ("t", "until"):
            target = float(args[0])
            while sim.env.peek() <= target and sim.step():
                pass
            echo(f"t = {sim.env.now:.6f} s")
        elif cmd in ("k", "kind"):
            kind = args[0]
            new = run_until(sim, lambda evs: any(e["kind"] == kind for e in evs))
            hit = next((e for e in new if e["kind"] == kind), None)
            echo(f"t = {sim.env.now:.6f} s: " + (str(hit) if hit else f"no {kind} event before the end"))
        elif cmd in ("i", "instance"):
            echo(fmt_instance(sim, int(args[0]) if args else 0))
        elif cmd in ("qu", "queues"):
            echo(fmt_queues(sim))
        elif cmd in ("b", "buffer"):
            echo(fmt_buffer(sim))
        elif cmd in ("tr", "trainer"):
            echo(fmt_trainer(sim))
        elif cmd == "snap":
            if not args:
                raise ValueError("snap needs a file path")
            from simrl.snapshot import SnapshotError, take_snapshot, write_snapshot

            try:
                write_snapshot(take_snapshot(sim), args[0])
            except (OSError, SnapshotError) as exc:
                echo(f"snap: cannot write {args[0]}: {exc}")
            else:
                echo(f"snapshot at t = {sim.env.now:.6f} s written to {args[0]}")
        elif cmd in ("c", "continue"):
            while sim.step():
                pass
            echo(f"end: t = {sim.env.now:.6f} s, steps done {sim.st.steps_done}")
        else:
            known = ("s", "step", "t", "until", "k", "kind", "i", "instance", "qu", "queues", "b", "buffer",
                     "tr", "trainer", "snap", "c", "continue", "h", "help", "q", "quit", "x", "exit")
            echo(f"unknown command {cmd!r}{did_you_mean(cmd, known)}; help for the commands")
    except (ValueError, IndexError, OverflowError) as exc:
        echo(f"bad arguments for {cmd!r}: {exc}; help for the commands")
    return True


@click.command("step", epilog="\b\n" + HELP)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--do", "script", help='Commands separated by ";", run without prompting.')
@common_options
@click.argument("overrides", nargs=-1)
def step_cmd(config_path, script, overrides):
    """Step through a simulation event by event (SimPy step debugging)."""
    from simrl.engine.sim import build_simulation

    with user_errors():
        cfg = load_config(config_path, overrides)
        sim = build_simulation(cfg)
    sim.start()
    if script is not None:
        for line in script.split(";"):
            if not execute(sim, line.strip(), click.echo):
                break
        return
    click.echo(HELP)
    stdin = click.get_text_stream("stdin")
    while True:
        click.echo(f"[t={sim.env.now:.3f}{'' if sim.env.peek() < math.inf else ' end'}] > ", nl=False)
        line = stdin.readline()
        if not line or not execute(sim, line.strip(), click.echo):
            break
