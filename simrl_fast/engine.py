"""Running the fast engine: jit + vmap over configurations, chunked scans, numpy results.

`run(static, params_batch, workload)` runs a stacked batch (leading axis M) and returns a
`FastResults` of numpy arrays. `simulate_batch(configs, workload, costs)` lowers each
configuration (rejecting unsupported ones), groups them into one Static, runs them, and
retries with more group slots if a run dispatched more groups than the Static held -- but
only while the retry makes progress (`FastPathNoProgress` otherwise: a configuration whose
every group is dropped can never finish). `TRACE_COUNT` counts traces for the tests.

The sweep driver (`run_params`): configurations are sorted by expected work (`expected_work`:
the calls a run is expected to dispatch) and cut into ``ceil(M / chunk)`` batches of equal size,
so a batch holds configurations of similar length and stops early (the host stops a batch after
the first scan block of `SCAN_BLOCK` steps in which no configuration is live); results are scattered back into the
original order. Every batch runs with one Static and one batch size (the last batch padded with
copies of a configuration whose rows are dropped): one compile per sweep. A batch is split over
all local devices (`jax.local_devices()`, ``shard_map`` over the configuration axis; one device:
no sharding), so the same code uses every GPU of a host; results do not depend on the split.

A scan chunk runs the batched step (`step.make_batch_step`): the trainer's actions are computed only for
the configurations that take one in that step (``RARE_WIDTH``, ``ROUTE_WIDTH``).

The persistent compilation cache is on by default (`cache_dir()`: ``$SIMRL_FAST_CACHE_DIR``,
else ``$XDG_CACHE_HOME/simrl/jax`` or ``~/.cache/simrl/jax``; ``SIMRL_FAST_CACHE=0`` turns it off).
The compiled chunk and init programs themselves are kept there too (`program_dir()`, `_program`):
a later process loads them without tracing or lowering (docs/fastpath.md, "srl-sweep", session 8).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os

import jax

jax.config.update("jax_enable_x64", True)


def cache_dir() -> str | None:
    """Where jax's persistent compilation cache lives (None: off, ``SIMRL_FAST_CACHE=0``)."""
    if os.environ.get("SIMRL_FAST_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if os.environ.get("SIMRL_FAST_CACHE_DIR"):
        return os.environ["SIMRL_FAST_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "simrl", "jax")


_CACHE = cache_dir()
if _CACHE:
    # A compile costs seconds, a cached one a fraction of that: on by default.
    jax.config.update("jax_compilation_cache_dir", _CACHE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # the small staging programs too

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from simrl_fast import state as _state  # noqa: E402
from simrl_fast import step as _step  # noqa: E402
from simrl_fast.costs import check_static  # noqa: E402
from simrl_fast.lowering import (  # noqa: E402
    FastPathNoProgress,
    FastPathUnsupported,
    Params,
    Static,
    WorkloadArrays,
    lower,
    stack_params,
    static_for,
)
from simrl_fast.results import FastResults  # noqa: E402
from simrl_fast.state import T_DONE, SimState, StepOut, init_state  # noqa: E402
from simrl_fast.step import make_batch_step, make_step  # noqa: E402

TRACE_COUNT = {"run": 0}
#: compiled programs loaded from `program_dir()` in this process, by name ("chunk", "sharded", "init")
LOADED: collections.Counter = collections.Counter()

#: group slots never grow beyond this multiple of the first bound (a backstop under the progress test)
MAX_GROWTH = 64

#: scan steps per host turn: the host stops a batch after the first block in which no configuration is
#: live, so a batch runs at most SCAN_BLOCK - 1 steps past its slowest configuration (on the
#: benchmarks/sweep10k.yaml batches of 917 sorted configurations, blocks of 256 ran 14% more steps than
#: the configurations took, blocks of 32 6%); a host turn costs well under a millisecond.
SCAN_BLOCK = 32


def blocked(static: Static) -> Static:
    """``static`` with scans of at most `SCAN_BLOCK` steps and the same step bound (``chunk * max_chunks``)."""
    if static.chunk <= SCAN_BLOCK:
        return static
    return static._replace(chunk=SCAN_BLOCK, max_chunks=-(-static.chunk * static.max_chunks // SCAN_BLOCK))


def _chunk_one(st: SimState, p: Params, w, static: Static) -> tuple[SimState, StepOut]:
    """``static.chunk`` event-loop steps of one configuration; ys = what each step emitted."""
    step = make_step(static)

    def body(s, _):
        s = step(s, p, w)
        return s, s.out

    return jax.lax.scan(body, st, None, length=static.chunk)


#: the trainer's actions of how many configurations of a batch one scan step computes (`step.make_batch_step`;
#: None: `step.rare_width` of the batch size; 0: every configuration steps alone, the scan vmapped)
RARE_WIDTH: int | None = None
#: the dispatches of how many configurations one turn of the batched step's routing loop computes (None:
#: `step.route_width` of the batch size; 0, the default: computed for the whole batch in every step -- on the
#: 2-core CPU the loop's gathers cost what it saves, and it doubles the compile time; docs/fastpath.md)
ROUTE_WIDTH: int | None = 0


def _chunk(st: SimState, p: Params, w, static: Static, per_config_workload: bool, width: int | None,
           routes: int | None = None):
    """``static.chunk`` event-loop steps of a batch (leading axis M); ys [M, chunk].

    By default one scan over batched steps (`step.make_batch_step`: the trainer's rare actions computed
    for a few configurations per step); ``width=0``: the per-configuration scan, vmapped (every
    configuration pays for every branch in every step). Both give the same states."""
    if width == 0:
        one = functools.partial(_chunk_one, static=static)
        return jax.vmap(one, in_axes=(0, 0, 0 if per_config_workload else None))(st, p, w)
    step = make_batch_step(static, int(st.now.shape[0]), per_config_workload, width, routes)

    def body(s, _):
        s = step(s, p, w)
        return s, s.out

    st, out = jax.lax.scan(body, st, None, length=static.chunk)
    return st, jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), out)


def _traced() -> tuple[int, str]:
    """The module settings a step reads when it is traced (`state.LOCAL_ROUNDS`, `step.ROUND_ROWS`): a
    static argument of every jitted program, so changing them in a process traces again instead of
    reusing a program built with the old ones."""
    return int(_state.LOCAL_ROUNDS), str(_step.ROUND_ROWS)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _init_batch(static: Static, m: int, traced: tuple = ()) -> SimState:
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (m, *x.shape)), init_state(static))


@functools.partial(jax.jit, static_argnums=(0, 4, 5, 6, 7), donate_argnums=(1,))
def _run_chunk(static: Static, st: SimState, params: Params, w, per_config_workload: bool, width: int | None = None,
               routes: int | None = None, traced: tuple = ()):
    """One scan chunk of the whole batch: (state, ys [M, chunk], whether any configuration is live)."""
    TRACE_COUNT["run"] += 1
    st, out = _chunk(st, params, w, static, per_config_workload, width, routes)
    live = jnp.any((st.trainer.phase != T_DONE) & ~st.stuck & ~st.overflow)
    return st, out, live


# -- compiled programs, kept on disk -------------------------------------------------------------------
#
# jax's persistent cache keeps the compiled executable, but it is looked up by the lowered module: every
# process start still traces `_run_chunk` and lowers it to MLIR (on the 2-core machine ~10-20 s for the
# sweep10k program) before the cache is asked. Here the compiled program itself is kept, keyed by what
# decides it (the Static, the argument shapes and dtypes, the widths, the devices, the jax version and
# the source of the packages traced), and loaded without tracing on the next start.

#: programs built in this process: key -> jax.stages.Compiled
_PROGRAMS: dict[tuple, object] = {}


def program_dir() -> str | None:
    """Where compiled chunk programs are kept (``<cache_dir()>/simrl-programs``; None: the cache is off)."""
    return os.path.join(_CACHE, "simrl-programs") if _CACHE else None


@functools.cache
def _fingerprint() -> str:
    """What a compiled program depends on besides its key: jax and jaxlib versions, the backend and its
    devices, XLA flags, the host CPU's features and every source file of simrl_fast and simrl (the
    code traced)."""
    import hashlib
    import platform

    import jaxlib

    h = hashlib.sha256()
    dev = jax.devices()[0]
    h.update(repr((jax.__version__, jaxlib.__version__, dev.platform, dev.client.platform_version,
                   [d.device_kind for d in jax.devices()], os.environ.get("XLA_FLAGS", ""),
                   bool(jax.config.jax_enable_x64), platform.machine())).encode())
    with contextlib.suppress(OSError):  # a program compiled for one CPU's instruction set is not loaded on another
        with open("/proc/cpuinfo") as f:
            h.update(next((ln for ln in f if ln.startswith(("flags", "Features"))), "").encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (here, os.path.join(os.path.dirname(here), "simrl")):
        for dirpath, dirnames, files in os.walk(root):
            dirnames.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    with open(os.path.join(dirpath, name), "rb") as f:
                        h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def _shapes(tree) -> tuple:
    """The tree structure and every leaf's shape and dtype (what a compiled program is specialised to)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return (str(treedef), tuple((tuple(np.shape(x)), str(np.asarray(x).dtype if not hasattr(x, "dtype") else x.dtype),
                                 bool(getattr(x, "weak_type", False))) for x in leaves))


def _program(name: str, key: tuple, build, devices) -> object:
    """The compiled program ``name`` for ``key``: built in this process, else loaded from `program_dir()`,
    else ``build()`` (a `jax.stages.Traced`), lowered, compiled (jax's persistent cache applies) and stored.

    A file that does not load (another jax, a partial write) is removed and the program compiled again.
    Only a program compiled in this process is stored (not one jax loaded from its own cache). Loading a
    program is loading code: the directory is the user's own cache, as jax's compilation cache is."""
    import time

    import jax.monitoring as mon


    # module values read while tracing (tests and benchmarks/fast.py change LOCAL_ROUNDS and then
    # call jax.clear_caches(), which this table does not see): part of the key
    key = (key, _traced(), _step.WALK_BLOCK)
    got = _PROGRAMS.get((name, key))
    if got is not None:
        return got
    folder = program_dir()
    path = None
    if folder:
        import hashlib

        digest = hashlib.sha256(repr((name, key, _fingerprint())).encode()).hexdigest()[:40]
        path = os.path.join(folder, f"{name}-{digest}.bin")
        t0 = time.perf_counter()
        got = _load_program(path, devices)
        if got is not None:
            TRACE_COUNT["run"] += name != "init"  # a chunk program obtained: traced (counted there) or loaded
            LOADED[name] += 1
            mon.record_event_duration_secs("/simrl_fast/program/load", time.perf_counter() - t0)
    if got is None:
        hits: list[str] = []

        def on_event(event: str, **kwargs) -> None:
            if event == "/jax/compilation_cache/cache_hits":
                hits.append(event)

        mon.register_event_listener(on_event)
        try:
            got = build().lower().compile()
        finally:
            mon.unregister_event_listener(on_event)
        # only a program compiled here is stored: an executable jax loaded from its own persistent cache
        # serialises without its kernels on CPU (jax 0.10.2: "NOT_FOUND: Function wrapped_broadcast.N not
        # found" when the stored copy runs), so such a program is compiled by jax again on the next start
        if path and not hits:
            t0 = time.perf_counter()
            _store_program(path, got)
            mon.record_event_duration_secs("/simrl_fast/program/store", time.perf_counter() - t0)
    _PROGRAMS[(name, key)] = got
    return got


def _load_program(path: str, devices):
    import pickle

    from jax.experimental.serialize_executable import deserialize_and_load

    try:
        with open(path, "rb") as f:
            payload, in_tree, out_tree = pickle.load(f)
        return deserialize_and_load(payload, in_tree, out_tree, execution_devices=devices)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001  (another jax's file, a truncated one: removed, compiled again)
        with contextlib.suppress(OSError):
            os.remove(path)
        return None


def _store_program(path: str, compiled) -> None:
    import pickle
    import tempfile

    from jax.experimental.serialize_executable import serialize

    try:
        blob = pickle.dumps(serialize(compiled), protocol=pickle.HIGHEST_PROTOCOL)
    except (ValueError, NotImplementedError, TypeError, pickle.PicklingError):
        return  # a program jax cannot serialise is compiled on every start, as before
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)  # whole or not at all, also with several processes writing the same key
    except OSError:
        return


def _chunk_program(static: Static, st, params, w, per: bool, width, routes):
    """`_run_chunk` for these arguments, compiled (called as ``prog(st, params, w)``)."""
    key = (static, per, width, routes, _shapes((st, params, w)))
    return _program("chunk", key, lambda: _run_chunk.trace(static, st, params, w, per, width, routes, _traced()),
                    jax.devices()[:1])


def _init_program(static: Static, m: int):
    """`_init_batch` (the initial state of m configurations), compiled (called with no arguments)."""
    return _program("init", (static, m), lambda: _init_batch.trace(static, m, _traced()), jax.devices()[:1])


def device_count() -> int:
    """Devices a batch is split over: every local device (``SIMRL_FAST_DEVICES=N`` takes the first N)."""
    n = len(jax.local_devices())
    want = os.environ.get("SIMRL_FAST_DEVICES", "").strip()
    if want:
        if not want.isdigit() or int(want) < 1:
            raise ValueError(f"SIMRL_FAST_DEVICES={want!r}: expected a whole number >= 1")
        n = min(n, int(want))
    return n


@functools.cache
def _sharded(static: Static, per_config_workload: bool, ndev: int, width: int | None = None, routes: int | None = None,
             traced: tuple = ()):
    """(jitted chunk over ``ndev`` devices, sharding of the configuration axis, replicated sharding).

    ``shard_map``: each device runs the vmapped scan chunk on its own configurations (no
    communication; configurations never interact), and reports whether any of them is live."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.asarray(jax.local_devices()[:ndev]), ("configs",))
    spec = P("configs")

    def body(st, params, w):
        TRACE_COUNT["run"] += 1
        st, out = _chunk(st, params, w, static, per_config_workload, width, routes)
        live = jnp.any((st.trainer.phase != T_DONE) & ~st.stuck & ~st.overflow)
        return st, out, live[None]

    w_spec = spec if per_config_workload else P()
    fn = jax.shard_map(body, mesh=mesh, in_specs=(spec, spec, w_spec), out_specs=(spec, spec, spec))
    shard, repl = NamedSharding(mesh, spec), NamedSharding(mesh, P())
    # explicit shardings: the state a chunk returns is passed to the next one as it is (without them the
    # second call saw a different input sharding and compiled the whole program again)
    return (jax.jit(fn, donate_argnums=(0,), in_shardings=(shard, shard, shard if per_config_workload else repl),
                    out_shardings=(shard, shard, shard)), shard, repl)


def _take(tree, idx: np.ndarray):
    """Rows ``idx`` of every array of a NamedTuple of arrays (numpy)."""
    return type(tree)(*(np.asarray(x)[idx] for x in tree))


class InexactArithmeticWarning(UserWarning):
    """XLA fuses multiply-adds here: the fast path's times may differ from SimPy's in the last bits."""


@functools.cache
def check_unfused_arithmetic() -> bool:
    """Whether jitted ``t + k*a`` rounds the product before the add, as Python does (once per process).

    The pair below differs in the last bit between the two roundings and one fused multiply-add
    (6.757941968911822 fused). When it comes out fused (jax's CPU backend was created before
    `simrl_fast` set ``--xla_cpu_max_isa=SSE4_2``, or another backend contracts it), warn: the engines
    compute the same expressions, but no longer the same floats."""
    t, a, k = 0.16527635528529094, 0.006824705604168251, 966.0
    got = float(jax.jit(lambda t, a, k: t + k * a)(jnp.float64(t), jnp.float64(a), jnp.float64(k)))
    if got != t + k * a:
        import warnings

        warnings.warn(
            "simrl_fast: XLA fuses multiply-adds on this backend (a*b + c rounded once), so times may differ "
            "from the SimPy engine's in the last bits; on CPU set XLA_FLAGS=--xla_cpu_max_isa=SSE4_2 before jax "
            "starts (importing simrl_fast first does it)", InexactArithmeticWarning, stacklevel=3)
        return False
    return True


def run(static: Static, params_batch: Params, workload, per_config_workload: bool = False,
        devices: int | None = None) -> FastResults:
    """Run a stacked batch of configurations (leading axis M).

    ``workload`` is one `WorkloadArrays` shared by all, or (``per_config_workload``) stacked
    along the same leading axis, every workload with the same (groups, group size). The host
    runs scan chunks until no configuration is live (done, deadlocked or overflowed) or
    ``static.max_chunks`` have run; the per-call and per-group results are assembled from the
    steps' outputs. ``devices``: how many local devices to split the batch over (default
    `device_count()`); with more than one, M is padded to a multiple of it (the padding rows
    are copies of the first configuration, dropped from the results).
    """
    check_static(static, params_batch)
    check_unfused_arithmetic()
    static = blocked(static)
    m = int(np.asarray(params_batch.steps).shape[0])
    ndev = min(devices or device_count(), m)
    if ndev > 1:
        return _run_sharded(static, params_batch, workload, per_config_workload, m, ndev)
    params = jax.tree_util.tree_map(jnp.asarray, params_batch)
    w = jax.tree_util.tree_map(jnp.asarray, workload)
    st = _init_program(static, m)()
    prog = _chunk_program(static, st, params, w, per_config_workload, RARE_WIDTH, ROUTE_WIDTH)
    outs = []
    for _ in range(static.max_chunks):
        st, out, live = prog(st, params, w)
        outs.append(out)
        if not bool(live):
            break
    return _finish(static, st, outs, params_batch.steps)


def _run_sharded(static: Static, params_batch: Params, workload, per: bool, m: int, ndev: int) -> FastResults:
    fn, shard, repl = _sharded(static, per, ndev, RARE_WIDTH, ROUTE_WIDTH, _traced())
    pad = -m % ndev
    idx = np.concatenate([np.arange(m), np.zeros(pad, np.int64)])
    params = jax.device_put(_take(params_batch, idx) if pad else params_batch, shard)
    w = jax.device_put(_take(workload, idx) if per and pad else workload, shard if per else repl)
    st = jax.device_put(_init_program(static, m + pad)(), shard)
    key = (static, per, ndev, RARE_WIDTH, ROUTE_WIDTH, _shapes((st, params, w)))
    prog = _program("sharded", key, lambda: fn.trace(st, params, w), jax.local_devices()[:ndev])
    outs = []
    for _ in range(static.max_chunks):
        st, out, live = prog(st, params, w)
        outs.append(out)
        if not np.any(np.asarray(live)):
            break
    res = _finish(static, st, outs, np.asarray(params_batch.steps)[idx])
    return FastResults(*(x[:m] for x in res)) if pad else res


def _finish(static: Static, st, outs, steps) -> FastResults:
    st, outs = jax.device_get((st, outs))
    ys = StepOut(*(np.concatenate([getattr(o, f) for o in outs], axis=1) for f in StepOut._fields))
    return FastResults.from_state(st, np.asarray(steps), static, _assemble(ys, static))


def expected_work(params: Params, group_size: int) -> np.ndarray:
    """[M] calls each configuration is expected to dispatch: `lowering.group_bound` x group size.

    The scan steps a configuration takes grow with the calls it handles (on the benchmarks/fast.py
    grid the correlation of this estimate with the steps taken is 0.90); it only decides which
    configurations share a batch, never a result."""
    steps = np.asarray(params.steps, np.float64)
    batch = np.asarray(params.batch, np.float64)
    with np.errstate(invalid="ignore"):
        budget = (np.asarray(params.budget_base, np.float64)
                  + np.asarray(params.budget_per_version, np.float64) * np.maximum(steps - 1, 0))
    unbounded = ~np.isfinite(budget)
    ep = np.asarray(params.ep_cap, np.float64)  # admit_episode_cap bounds the groups running at once too
    running = np.where(ep > 0, np.minimum(np.asarray(params.conc, np.float64), ep), np.asarray(params.conc, np.float64))
    budget = np.where(unbounded, running + 2 * steps * batch, budget)
    return (np.ceil(budget) + batch) * group_size


def work_order(params: Params, group_size: int) -> np.ndarray:
    """Configuration indices by expected work (then instances and slots; ties keep their order)."""
    return np.lexsort((np.asarray(params.max_seqs), np.asarray(params.n_inst), expected_work(params, group_size)))


def _assemble(ys: StepOut, static: Static) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(call finish [M, R], call instance [M, R], group finish [M, Gm]) from the steps' outputs."""
    m = ys.fin_rid.shape[0]
    call_finish = np.full((m, static.max_calls), np.nan)
    call_inst = np.full((m, static.max_calls), -1, np.int32)
    group_finish = np.full((m, static.max_groups), np.nan)
    mi, ti = np.nonzero(ys.fin_rid >= 0)
    call_finish[mi, ys.fin_rid[mi, ti]] = ys.fin_t[mi, ti]
    if ys.par_rid.size:  # the parallel local boundaries' finishes (state.LOCAL_ROUNDS > 0)
        pr, pt = ys.par_rid.reshape(m, -1), ys.par_t.reshape(m, -1)
        mi, ti = np.nonzero(pr >= 0)
        call_finish[mi, pr[mi, ti]] = pt[mi, ti]
    mi, ti = np.nonzero(ys.fin_group)
    group_finish[mi, ys.fin_rid[mi, ti] // static.group_size] = ys.fin_t[mi, ti]
    rr, ri = ys.route_rid.reshape(m, -1), ys.route_inst.reshape(m, -1)  # a step routes up to n calls
    mi, ti = np.nonzero(rr >= 0)
    call_inst[mi, rr[mi, ti]] = ri[mi, ti]
    return call_finish, call_inst, group_finish


def simulate_batch(configs, workload, costs, chunk: int | None = None) -> FastResults:
    """Lower and run configurations sharing one workload; ``costs`` is one object or one per config.

    Raises `FastPathUnsupported` naming the first unsupported feature of any configuration.
    """
    costs_list = costs if isinstance(costs, list | tuple) else [costs] * len(configs)
    lowered = [lower(cfg, workload, c) for cfg, c in zip(configs, costs_list, strict=True)]
    wa = lowered[0][2]
    params = [p for _, p, _ in lowered]
    return run_params(params, wa, chunk=chunk)


def run_params(params: list[Params] | Params, wa, chunk: int | None = None, max_groups: int | None = None,
               static: Static | None = None, on_chunk=None, sort: bool = True,
               devices: int | None = None, stops: bool = True) -> FastResults:
    """Run lowered configurations in batches of at most ``chunk``; grow the group slots on overflow.

    ``params``: a list of per-configuration Params, or Params stacked along a leading axis
    (`simrl_fast.grid.lower_grid`).

    ``wa`` is one `WorkloadArrays` for all, or a list with one per configuration (same shapes).
    ``sort``: run the configurations in order of `expected_work` (results come back in the given
    order either way, identical). The configurations run as ``ceil(M / chunk)`` batches of equal
    size, every batch with one Static and one batch size (the last batch is padded with copies of
    its first configuration, whose rows are dropped), so a sweep compiles once; each batch is split
    over ``devices`` local devices (default: all, `device_count()`). When a run dispatches more
    groups than the Static holds it is re-run with twice the group slots, as long as the
    overflowing configurations made progress (more training steps or trained groups than with half
    the slots); otherwise `FastPathNoProgress` names them and what they did.
    ``static``: the shapes to use (e.g. one Static for every chunk of a sharded sweep; it must hold
    every configuration); ``on_chunk(k)`` is called after each batch with its real size.
    ``stops``: raise `check_zero_stop`'s error where a configuration stopped as SimPy does (else only
    `FastResults.zero_stop` says so).
    """

    per = isinstance(wa, list)
    w0 = wa[0] if per else wa
    total = _count(params)
    order = None
    rows = None  # a list of Params stacked once (the batches are cut from it, not stacked again each)
    if sort and total > 1:
        stacked = params if isinstance(params, Params) else stack_params(params)
        order = work_order(stacked, int(w0.prompt.shape[1]))
        if np.array_equal(order, np.arange(total)):
            order = None
            rows = None if isinstance(params, Params) else stacked
        else:
            if not isinstance(params, Params):
                rows = _take(stacked, order)
            params = _take(stacked, order) if isinstance(params, Params) else [params[i] for i in order]
            wa = [wa[i] for i in order] if per else wa
    res = _run_growing(params, wa, per, w0, chunk, max_groups, static, on_chunk, devices, order, rows)
    _check_collapse(params, wa, res, order)
    if stops:
        check_zero_stop(params, res, order)
    if order is None:
        return res
    inv = np.empty_like(order)
    inv[order] = np.arange(total)
    return _take(res, inv)


def _check_collapse(params, wa, res: FastResults, order) -> None:
    """The record's ``collapse_zero_variance_groups`` failsafe stops SimPy once that many groups since
    the last batch were dropped for zero reward variance; the scan does not stop. A run in which
    fewer zero-variance groups finished in all can never have fired it (its result is exact);
    otherwise the configuration is refused, named, after the fact."""
    collapse = np.asarray(params.collapse if isinstance(params, Params) else [p.collapse for p in params])
    for m in np.nonzero(collapse > 0)[0]:
        w = wa[m] if isinstance(wa, list) else wa
        gf = res.group_finish[m]
        gids = np.nonzero(np.isfinite(gf))[0]
        tol = float(np.asarray(params.zv_tol)[m] if isinstance(params, Params) else params[m].zv_tol)
        n_zero = int(np.sum(w.reward_std[gids % w.reward_std.shape[0]] <= tol))  # the record's zero test
        if n_zero >= collapse[m]:
            raise FastPathUnsupported(
                f"simrl_fast does not support configuration {int(order[m]) if order is not None else int(m)}: the "
                f"collapse failsafe (collapse_zero_variance_groups={int(collapse[m])}) may have fired ({n_zero} "
                "groups with zero reward variance finished in the run); use the SimPy engine")


def check_zero_stop(params, res: FastResults, order=None) -> None:
    """The record's ``zero_variance_stop_groups``: SimPy stops the run with `record.zero_stop_message` (a
    `PolicyError`, raised as a `SimulationError`) at the n-th zero-variance group in a row; the scan stops that
    configuration there (`SimState.zstop`). Raise the same diagnosis, naming the configuration."""
    from simrl.policy.record import zero_stop_message

    stopped = np.nonzero(np.asarray(res.zero_stop))[0]
    if len(stopped):
        m = int(stopped[0])
        row = (lambda f: np.asarray(getattr(params, f))[m]) if isinstance(params, Params) else (
            lambda f: getattr(params[m], f))
        raise FastPathNoProgress(f"configuration {int(order[m]) if order is not None else m} of the batch stopped: "
                                 f"{zero_stop_message(int(row('zv_stop')), float(row('zv_tol')))}")


def _run_growing(params, wa, per: bool, w0, chunk, max_groups, static, on_chunk, devices, order,
                 rows: Params | None = None) -> FastResults:
    from simrl_fast.grid import static_for_stacked

    if isinstance(params, Params):
        static = static or static_for_stacked(params, w0, max_groups)
    else:
        static = static or static_for(params, w0, max_groups)
    first_bound = static.max_groups
    prev = None
    while True:
        res = _run_chunks(params if rows is None else rows, wa, per, static, chunk or _count(params), on_chunk,
                          devices)
        if not res.overflow.any():
            return res
        over = np.nonzero(res.overflow)[0]
        prog = {int(m): _progress(res, m) for m in over}
        # Stalled: twice the slots, at least one more pass over the workload's prompts, and not one
        # more group accepted nor step trained -- every extra group was dropped.
        stalled = [m for m in over if prev is not None and static.max_groups >= 2 * static.groups
                   and prog[int(m)] <= prev.get(int(m), (-1, -1))]
        if stalled or 2 * static.max_groups > MAX_GROWTH * first_bound:
            m = int(stalled[0]) if stalled else int(over[0])
            steps, accepted = prog[m]
            raise FastPathNoProgress(
                f"configuration {int(order[m]) if order is not None else m} of the batch makes no progress: it "
                f"dispatched {int(res.groups_dispatched[m])} "
                f"groups but finished only {steps} of {int(res.steps[m])} training steps (groups accepted: {accepted}); "
                f"doubling the group slots to {static.max_groups} accepted no further group, so every further group "
                "is dropped (zero reward variance with drop_zero_variance=1, or staleness drops) and the run can "
                "never finish")
        prev = prog
        grown = (static_for_stacked(params, w0, 2 * static.max_groups) if isinstance(params, Params)
                 else static_for(params, w0, 2 * static.max_groups))
        static = static._replace(max_groups=grown.max_groups, max_chunks=grown.max_chunks)


def _progress(res: FastResults, m: int) -> tuple[int, int]:
    """(training steps done, groups accepted): both only grow as a run gets further."""
    return int(res.steps_done[m]), int(res.groups_accepted[m])


def _count(params) -> int:
    return len(params.steps) if isinstance(params, Params) else len(params)


def _rows(params, lo: int, hi: int, pad: int) -> Params:
    """Rows lo..hi of ``params`` (a list or stacked), padded with ``pad`` copies of row lo, stacked."""
    if isinstance(params, Params):
        idx = np.concatenate([np.arange(lo, hi), np.full(pad, lo)])
        return Params(*(np.asarray(getattr(params, f))[idx] for f in Params._fields))
    batch = params[lo:hi]
    return stack_params(batch + [batch[0]] * pad)


def batch_size(total: int, chunk: int, ndev: int = 1) -> int:
    """The size of each of the ``ceil(total / chunk)`` equal batches, a multiple of ``ndev``: 1,008
    configurations at ``chunk=1000`` run as 2 x 504, not 1,000 + 8 padded to 1,000."""
    n_batches = -(-total // max(1, min(chunk, total)))
    size = -(-total // n_batches)
    return -(-size // ndev) * ndev


def _run_chunks(params, wa, per: bool, static: Static, chunk: int, on_chunk, devices: int | None = None) -> FastResults:
    total = _count(params)
    ndev = min(devices or device_count(), total)
    chunk = batch_size(total, chunk, ndev)
    parts = []
    for lo in range(0, total, chunk):
        real = min(chunk, total - lo)
        pad = chunk - real
        batch = _rows(params, lo, lo + real, pad)
        if per:
            ws = wa[lo:lo + chunk]
            ws = ws + [ws[0]] * pad
            w = WorkloadArrays(*(np.stack([getattr(x, f) for x in ws]) for f in WorkloadArrays._fields))
        else:
            w = wa
        res = run(static, batch, w, per_config_workload=per, devices=ndev)
        parts.append(FastResults(*(getattr(res, f)[:real] for f in FastResults._fields)) if pad else res)
        if on_chunk:
            on_chunk(real)
        if res.overflow[:real].any():
            return FastResults.concat(parts)  # the caller grows the group slots and runs everything again
    return FastResults.concat(parts)
