"""The kernel database: an operator's time from its shape, measured or predicted from physics.

Two layers, both fitted from ``operator`` observations:

- **Tables** hold the measured times of each (operator, layer shape, TP) by num_tokens
  (duplicates merged by their median). Between measured points the time is interpolated
  linearly in log(time) over log(num_tokens): exact at the measured points and monotone
  between neighbours.
- **Physics** predicts any shape from its FLOPs and bytes (`op_work`): per operator,
  ``time = launch_s + (t_flops**p + t_bytes**p) ** (1/p)`` with ``t_flops = flops /
  flops_per_s`` and ``t_bytes = bytes / bytes_per_s`` (a soft maximum of the two roofline
  limits), fitted on log-error by Levenberg-Marquardt. This is what predicts a model that was
  never profiled.

`KernelDB.predict` uses the table when the shape was measured and num_tokens lies inside its
range, and the physics otherwise (scaled to meet the nearest table end when the shape is known,
so extrapolation is continuous). `KernelDB.predict_physics` never looks at tables; held-out
evaluation of unseen models uses it. Units: seconds, FLOPs, bytes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import attrs
import numpy as np

from simrl.cost.fitting import levenberg_marquardt, nonneg_lstsq
from simrl.cost.observations import Observation

DTYPE_BYTES = 2  # fp16 / bf16 activations and weights

GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
MEMORY_OPS = ("emb", "input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
KNOWN_OPS = GEMM_OPS + MEMORY_OPS


@attrs.frozen
class LayerShape:
    """The shape of one transformer layer, as the Vidur shape columns give it."""

    n_embd: int
    n_head: int
    n_kv_head: int
    n_expanded_embd: int
    vocab_size: int
    use_gated_mlp: bool = True
    head_dim: int | None = None  # None: n_embd / n_head

    @property
    def hd(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    def key(self) -> str:
        return (f"E{self.n_embd}-H{self.n_head}-KV{self.n_kv_head}-D{self.hd}-F{self.n_expanded_embd}"
                f"-V{self.vocab_size}-{'gated' if self.use_gated_mlp else 'plain'}")

    @classmethod
    def from_inputs(cls, inputs: dict) -> LayerShape:
        return cls(
            n_embd=int(inputs["n_embd"]), n_head=int(inputs["n_head"]), n_kv_head=int(inputs["n_kv_head"]),
            n_expanded_embd=int(inputs["n_expanded_embd"]), vocab_size=int(inputs["vocab_size"]),
            use_gated_mlp=bool(inputs["use_gated_mlp"]),
            head_dim=int(inputs["head_dim"]) if inputs.get("head_dim") else None,
        )


def gemm_work(m: float, k: float, n: float) -> tuple[float, float]:
    """(FLOPs, bytes) of an (m x k) @ (k x n) half-precision GEMM."""
    return 2.0 * m * k * n, DTYPE_BYTES * (m * k + k * n + m * n)


def op_work(op: str, shape: LayerShape, num_tokens: float, tp: int) -> tuple[float, float]:
    """(FLOPs, bytes moved) of one operator of one layer on one TP rank."""
    t, e, hd = float(num_tokens), shape.n_embd, shape.hd
    q, kv, f = shape.n_head * hd / tp, shape.n_kv_head * hd / tp, shape.n_expanded_embd / tp
    up = 2 * f if shape.use_gated_mlp else f
    if op == "attn_pre_proj":
        return gemm_work(t, e, q + 2 * kv)
    if op == "attn_post_proj":
        return gemm_work(t, q, e)
    if op == "mlp_up_proj":
        return gemm_work(t, e, up)
    if op == "mlp_down_proj":
        return gemm_work(t, f, e)
    if op == "emb":  # vocab-parallel lookup: every rank writes all rows
        return 0.0, DTYPE_BYTES * 2 * t * e
    if op in ("input_layernorm", "post_attention_layernorm"):
        return 0.0, DTYPE_BYTES * (2 * t * e + e)
    if op == "attn_rope":
        return 0.0, DTYPE_BYTES * 2 * t * (q + kv)
    if op == "mlp_act":
        return 0.0, DTYPE_BYTES * t * (up + f)
    if op == "add":
        return 0.0, DTYPE_BYTES * 3 * t * e
    raise KeyError(f"unknown operator {op!r}; known: {', '.join(KNOWN_OPS)}")


@attrs.frozen
class OpCoefficients:
    """Fitted physics of one operator: launch overhead, effective FLOP/s and bytes/s, sharpness."""

    launch_s: float
    flops_per_s: float
    bytes_per_s: float
    sharpness: float = 1.0  # p of the soft maximum; large p = hard roofline

    def time_s(self, flops, bytes_):
        tf = np.asarray(flops, dtype=float) / self.flops_per_s
        tb = np.asarray(bytes_, dtype=float) / self.bytes_per_s
        p = self.sharpness
        hi = np.maximum(tf, tb)
        safe = np.where(hi > 0, hi, 1.0)
        soft = np.where(hi > 0, safe * ((tf / safe) ** p + (tb / safe) ** p) ** (1.0 / p), 0.0)
        return self.launch_s + soft

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def _pack(c: OpCoefficients, gemm: bool) -> np.ndarray:
    base = [math.log(c.launch_s), math.log(c.bytes_per_s)]
    return np.array(base + [math.log(c.flops_per_s), math.log(c.sharpness - 1 + 1e-3)] if gemm else base)


def _unpack(x: np.ndarray, gemm: bool) -> OpCoefficients:
    x = np.clip(x, -60.0, 60.0)
    if gemm:
        return OpCoefficients(float(np.exp(x[0])), float(np.exp(x[2])), float(np.exp(x[1])),
                              float(1 + np.exp(x[3])))
    return OpCoefficients(float(np.exp(x[0])), 1e30, float(np.exp(x[1])), 1.0)


def fit_op_coefficients(op: str, flops: np.ndarray, bytes_: np.ndarray, time_s: np.ndarray) -> OpCoefficients:
    """Fit one operator's physics on log-error from arrays of FLOPs, bytes and measured seconds."""
    gemm = bool(np.any(flops > 0))
    y = np.log(time_s)

    def resid(x):
        return np.log(_unpack(x, gemm).time_s(flops, bytes_)) - y

    small = time_s <= np.quantile(time_s, 0.05)
    launch0 = max(float(np.median(time_s[small])) * 0.5, 1e-7)
    big = time_s >= np.quantile(time_s, 0.75)
    bw0 = float(np.median(bytes_[big] / time_s[big]))
    starts = []
    if gemm:
        fl0 = float(np.median(flops[big] / time_s[big]))
        for p in (1.5, 3.0, 8.0):
            starts.append(_pack(OpCoefficients(launch0, fl0, bw0 * 2, p), True))
    else:
        starts.append(_pack(OpCoefficients(launch0, 1e30, bw0, 1.0), False))
    best = min((levenberg_marquardt(resid, s) for s in starts), key=lambda r: r[1])
    return _unpack(best[0], gemm)


@attrs.define
class KernelTable:
    """Measured times of one (operator, shape, TP) by num_tokens, sorted, duplicates merged."""

    num_tokens: np.ndarray
    time_s: np.ndarray

    def interpolate(self, num_tokens: float) -> float:
        x = np.log(self.num_tokens)
        return float(np.exp(np.interp(math.log(num_tokens), x, np.log(self.time_s))))

    def contains(self, num_tokens: float) -> bool:
        return self.num_tokens[0] <= num_tokens <= self.num_tokens[-1]


@attrs.define
class KernelDB:
    """Per-operator physics coefficients plus the measured tables they were fitted on."""

    coefficients: dict[str, OpCoefficients]
    tables: dict[tuple[str, str, int], KernelTable] = attrs.field(factory=dict)

    def predict_physics(self, op: str, shape: LayerShape, num_tokens: float, tp: int) -> float:
        if op not in self.coefficients:
            raise KeyError(f"kernel DB has no coefficients for operator {op!r}")
        flops, bytes_ = op_work(op, shape, num_tokens, tp)
        return float(self.coefficients[op].time_s(flops, bytes_))

    def predict(self, op: str, shape: LayerShape, num_tokens: float, tp: int) -> float:
        """Seconds for one operator: table interpolation when measured, physics otherwise."""
        table = self.tables.get((op, shape.key(), tp))
        if table is None:
            return self.predict_physics(op, shape, num_tokens, tp)
        if table.contains(num_tokens):
            return table.interpolate(num_tokens)
        edge = table.num_tokens[0] if num_tokens < table.num_tokens[0] else table.num_tokens[-1]
        scale = table.interpolate(edge) / self.predict_physics(op, shape, edge, tp)
        return scale * self.predict_physics(op, shape, num_tokens, tp)

    def flops_per_s(self) -> float:
        """A representative fitted GEMM throughput (median over GEMM operators)."""
        vals = [c.flops_per_s for op, c in self.coefficients.items() if op in GEMM_OPS]
        return float(np.median(vals)) if vals else float("nan")

    def bytes_per_s(self) -> float:
        """A representative fitted streaming bandwidth (median over memory-bound operators)."""
        vals = [c.bytes_per_s for op, c in self.coefficients.items() if op in MEMORY_OPS]
        return float(np.median(vals)) if vals else float("nan")

    def to_dict(self, include_tables: bool = True) -> dict:
        out: dict = {"operators": {op: c.to_dict() for op, c in sorted(self.coefficients.items())}}
        if include_tables:
            out["tables"] = [
                {"op": op, "shape": key, "tp": tp, "num_tokens": t.num_tokens.tolist(),
                 "time_s": t.time_s.tolist()}
                for (op, key, tp), t in sorted(self.tables.items())
            ]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> KernelDB:
        coefs = {op: OpCoefficients(**c) for op, c in data["operators"].items()}
        tables = {
            (t["op"], t["shape"], int(t["tp"])): KernelTable(np.asarray(t["num_tokens"], float),
                                                             np.asarray(t["time_s"], float))
            for t in data.get("tables", [])
        }
        return cls(coefs, tables)


def operator_arrays(obs: Sequence[Observation]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Group operator observations by name into (flops, bytes, seconds) arrays."""
    acc: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for o in obs:
        if o.kind != "operator" or o.name not in KNOWN_OPS:
            continue
        shape = LayerShape.from_inputs(o.inputs)
        fl, by = op_work(o.name, shape, o.inputs["num_tokens"], int(o.inputs["tp"]))
        acc[o.name].append((fl, by, o.value))
    return {op: tuple(np.array(col) for col in zip(*rows, strict=True)) for op, rows in acc.items()}


def build_tables(obs: Sequence[Observation]) -> dict[tuple[str, str, int], KernelTable]:
    groups: dict[tuple[str, str, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for o in obs:
        if o.kind != "operator" or o.name not in KNOWN_OPS:
            continue
        key = (o.name, LayerShape.from_inputs(o.inputs).key(), int(o.inputs["tp"]))
        groups[key][int(o.inputs["num_tokens"])].append(o.value)
    tables = {}
    for key, by_tokens in groups.items():
        toks = np.array(sorted(by_tokens), dtype=float)
        times = np.array([float(np.median(by_tokens[int(t)])) for t in toks])
        tables[key] = KernelTable(toks, times)
    return tables


def fit_kernel_db(obs: Sequence[Observation], with_tables: bool = True) -> KernelDB:
    """Fit every operator's physics and (optionally) keep the measured tables."""
    arrays = operator_arrays(obs)
    if not arrays:
        raise ValueError("no operator observations of a known operator to fit a kernel DB on")
    coefs = {op: fit_op_coefficients(op, *arrs) for op, arrs in sorted(arrays.items())}
    return KernelDB(coefs, build_tables(obs) if with_tables else {})


@attrs.define
class CollectiveModel:
    """Measured collective times by message size for one (collective, num_workers).

    Inside the measured size range: log-log interpolation; outside it: the fitted alpha-beta
    line ``latency_s + size_bytes / bytes_per_s``.
    """

    name: str
    num_workers: int
    size_bytes: np.ndarray
    time_s: np.ndarray
    latency_s: float
    bytes_per_s: float
    topology: str = ""

    def matches(self, ob: Observation) -> bool:
        """Whether a collective observation was measured in this table's setting."""
        workers = int(ob.inputs["num_workers"])
        return (ob.name == self.name and workers == self.num_workers
                and str(ob.inputs.get("topology", "")) == self.topology
                and int(ob.inputs.get("devices_per_node", workers)) >= workers)

    def predict(self, size_bytes: float) -> float:
        if size_bytes <= 0:
            return 0.0
        if self.size_bytes[0] <= size_bytes <= self.size_bytes[-1]:
            x = np.log(self.size_bytes)
            return float(np.exp(np.interp(math.log(size_bytes), x, np.log(self.time_s))))
        return self.latency_s + size_bytes / self.bytes_per_s

    def to_dict(self) -> dict:
        return {"name": self.name, "num_workers": self.num_workers, "size_bytes": self.size_bytes.tolist(),
                "time_s": self.time_s.tolist(), "latency_s": self.latency_s, "bytes_per_s": self.bytes_per_s,
                "topology": self.topology}

    @classmethod
    def from_dict(cls, d: dict) -> CollectiveModel:
        return cls(d["name"], int(d["num_workers"]), np.asarray(d["size_bytes"], float),
                   np.asarray(d["time_s"], float), float(d["latency_s"]), float(d["bytes_per_s"]),
                   str(d.get("topology", "")))


def fit_collectives(obs: Sequence[Observation], topology: str | None = None) -> dict[str, CollectiveModel]:
    """One `CollectiveModel` per (collective, num_workers), keyed ``"<name>/<num_workers>"``.

    Only runs with all workers inside one node are kept (TP and intra-node PP groups).
    ``topology`` selects one Vidur topology (e.g. ``h100_dgx``) when several are present; by
    default the one with the most observations is used so tables are never mixed.
    """
    coll = [o for o in obs if o.kind == "collective"]
    topos: dict[str, int] = defaultdict(int)
    for o in coll:
        topos[str(o.inputs.get("topology", ""))] += 1
    if topology is None and topos:
        topology = max(sorted(topos), key=lambda t: topos[t])
    groups: dict[tuple[str, int], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for o in coll:
        workers = int(o.inputs["num_workers"])
        # Keep the runs inside one node (the TP / intra-node PP case) when the topology has both.
        if str(o.inputs.get("topology", "")) != topology or int(o.inputs.get("devices_per_node", workers)) < workers:
            continue
        groups[(o.name, workers)][float(o.inputs["size_bytes"])].append(o.value)
    out = {}
    for (name, workers), by_size in sorted(groups.items()):
        sizes = np.array(sorted(by_size))
        times = np.array([float(np.median(by_size[s])) for s in sizes])
        a = np.stack([np.ones_like(sizes), sizes], axis=1)
        lat, per_byte = nonneg_lstsq(a, times, weights=1.0 / times)
        out[f"{name}/{workers}"] = CollectiveModel(name, workers, sizes, times, float(lat),
                                                   float(1.0 / per_byte) if per_byte > 0 else 1e30, topology or "")
    return out
