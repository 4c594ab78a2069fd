"""One benchmark run, start to finish, and the serial comparison suite.

Order of a run: fresh results dir (printed) -> manifest ``running`` -> runtime preflight (the
container's baked hashes, the model snapshot at the pinned revision linked as ``<run>/model``;
before any lease) -> resolve ``--gpus`` to UUIDs -> lease all four GPUs -> occupancy check ->
workload schedule -> backend (the worker's pid and process group recorded) -> occupancy check ->
lease verified -> evidence hashed -> contract results -> validation -> lease released ->
manifest with status valid / invalid / aborted. Whatever fails, the directory keeps the
manifest and run.log saying why. SIGINT, SIGTERM and SIGHUP abort the run the same way: the
worker's process group is killed, the status is ``aborted`` with the signal as the reason, and
the run's own lease is released.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path

import attrs

from harness import contract, model_snapshot, nvsmi, recipes, report, validate
from harness import manifest as M
from harness import pins as P
from harness.backends.base import RunContext
from harness.errors import BenchError, GpuBusy
from harness.execute import execute
from harness.fsio import read_jsonl, write_atomic, write_json
from harness.lease import LeaseStore
from harness.plan import plan
from harness.runlog import RunLog
from harness.workload_source import describe, generate

EVIDENCE_FILES = ("updates.jsonl", "turns.jsonl")
SEALED_FILES = (*EVIDENCE_FILES, "context.json")  # context.json: the run context the backend was given


class Interrupted(BaseException):
    """A signal asked the controller to stop; like KeyboardInterrupt, no driver code swallows it."""

    def __init__(self, signum: int | str) -> None:
        # Also from its name: an exception re-created from its args (copy, pickle, a traceback
        # renderer) is called with what super().__init__ stored, the signal's name.
        sig = signal.Signals[signum] if isinstance(signum, str) else signal.Signals(signum)
        super().__init__(sig.name)
        self.signum = int(sig)


def evidence_record(run_dir: Path) -> dict:
    """sha256, line and byte counts of each evidence file (None for a file never written)."""
    out = {}
    for name in SEALED_FILES:
        path = Path(run_dir) / name
        if path.exists():
            data = path.read_bytes()
            out[name] = {"sha256": hashlib.sha256(data).hexdigest(), "lines": data.count(b"\n"), "bytes": len(data)}
        else:
            out[name] = None
    return out


@attrs.frozen
class RunRequest:
    backend: str
    workload: str
    gpus: str
    runtime: str = "container"
    python: str | None = None
    skyrl_source: str | None = None
    hf_cache: str | None = None
    rank: int = 8
    skyrl_batch_size: int = 4
    skyrl_cuda_compat: bool = False
    results_dir: str = "results"
    state_dir: str | None = None
    seed: int = P.DEFAULT_SEED
    suite: str | None = None
    image: str | None = None
    argv: tuple[str, ...] = ()


def check_request(req: RunRequest) -> None:
    """User errors in the flags, before anything is created."""
    if req.backend not in P.BACKENDS:
        raise BenchError(f"--backend must be one of {', '.join(P.BACKENDS)}")
    if req.workload not in P.WORKLOADS:
        raise BenchError(f"--workload must be one of {', '.join(P.WORKLOADS)}")
    if req.runtime not in P.RUNTIMES:
        raise BenchError(f"--runtime must be one of {', '.join(P.RUNTIMES)}")
    if req.rank not in P.LORA_RANKS:
        raise BenchError("--rank must be 8 (headline) or 1 (supplemental)")
    if req.skyrl_batch_size not in (4, 1):
        raise BenchError("--skyrl-batch-size must be 4 or 1")
    if req.backend != "skyrl" and (req.skyrl_batch_size != 4 or req.skyrl_source or req.skyrl_cuda_compat):
        raise BenchError("--skyrl-batch-size, --skyrl-source and --skyrl-cuda-compat apply to --backend skyrl only")
    if req.backend == "art" and req.runtime != "sim" and req.rank != 1:
        raise BenchError(f"ART {P.UPSTREAM['art']['version']}'s Megatron backend trains LoRA rank 1 only "
                         "(art/megatron/lora.py LORA_RANK): run real ART with --rank 1 (the sim models either rank)")
    if req.runtime == "native":
        if not req.python:
            raise BenchError("--runtime native needs --python (the backend environment's interpreter)")
        if not Path(req.python).exists():
            raise BenchError(f"--python {req.python}: no such file")
        if req.backend == "skyrl" and not req.skyrl_source:
            raise BenchError("--runtime native --backend skyrl needs --skyrl-source (the SkyRL checkout)")
    if req.hf_cache and not (Path(req.hf_cache) / "hub").is_dir():
        raise BenchError(f"--hf-cache {req.hf_cache}: expected an HF_HOME directory containing hub/")


def new_run_id(req: RunRequest) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{stamp}-{req.backend}-{req.workload}-r{req.rank}-{uuid.uuid4().hex[:6]}"


def _native_provenance(run_dir: Path, log) -> dict:
    """Copy the env prefix's setup_manifests/ next to the evidence; never infer setup from live source."""
    import os

    root = os.environ.get("RL_BENCH_ENV_ROOT")
    if not root or not (Path(root) / "setup_manifests").is_dir():
        log.info("native: no $RL_BENCH_ENV_ROOT/setup_manifests/ to retain (run through containers/*_env.sh)")
        return {"env_root": root, "setup_manifests": None}
    dest = run_dir / "setup_manifests"
    shutil.copytree(Path(root) / "setup_manifests", dest)
    files = {str(p.relative_to(dest)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(dest.rglob("*")) if p.is_file()}
    return {"env_root": root, "setup_manifests": files}


class _Run:
    """The state of one run while it executes; `execute` returns the final manifest."""

    def __init__(self, req: RunRequest, echo) -> None:
        self.req, self.echo = req, echo
        self.settings = P.pipeline_settings(req.backend, req.skyrl_batch_size)
        self.run_id = new_run_id(req)
        self.dir = Path(req.results_dir).resolve() / self.run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        echo(f"results: {self.dir}")
        self.log = RunLog(self.dir / "run.log")
        self.store = LeaseStore(Path(req.state_dir) if req.state_dir else None)
        self.lease: dict | None = None
        self.workload = None
        self.man = M.skeleton(run_id=self.run_id, suite=req.suite, backend=req.backend, workload=req.workload,
                              runtime=req.runtime, rank=req.rank, argv=list(req.argv or sys.argv),
                              settings=self.settings,
                              requested_recipe_sha256=recipes.recipe_sha256(req.backend),
                              python_sha256=recipes.python_sha256())
        self.man["identity"]["skyrl_batch_size"] = req.skyrl_batch_size if req.backend == "skyrl" else None
        self.save()

    def save(self) -> None:
        write_json(self.dir / "manifest.json", self.man)

    def preflight(self) -> None:
        req, ident = self.req, self.man["identity"]
        if req.runtime == "container":
            pre = recipes.preflight_container(req.backend, req.image)
            ident.update(recipe_sha256_baked=pre["baked"]["recipe"], container_image_digest=pre["image_id"],
                         container_image=pre["image"])
            self.man["provenance"]["container_preflight"] = pre
        elif req.runtime == "native":
            self.man["provenance"]["native"] = _native_provenance(self.dir, self.log)
            self.man["provenance"]["python"] = req.python
            self.man["provenance"]["skyrl_source"] = req.skyrl_source
        else:
            from harness import backends

            backends.load(req.backend, "sim")
        if req.runtime != "sim":  # the simulator loads no weights
            self.man["model"]["snapshot"] = model_snapshot.link(self.dir, req.hf_cache)
            self.log.info(f"model {self.man['model']['snapshot']['link']} -> {self.man['model']['snapshot']['target']}")
        self.save()
        self.log.info(f"preflight ok ({req.runtime})")

    def reserve(self) -> list[str]:
        gpus = nvsmi.list_gpus()
        picked = nvsmi.resolve(self.req.gpus, gpus)
        uuids = [g.uuid for g in picked]
        self.man["hardware"] = {
            "requested": self.req.gpus, "gpus": [g.to_dict() for g in picked],
            "trainer_uuids": uuids[: P.TRAINER_GPUS], "inference_uuids": uuids[P.TRAINER_GPUS:],
        }
        self.lease = self.store.acquire([{"uuid": g.uuid, "index": g.index} for g in picked], self.run_id,
                                        str(self.dir), list(self.req.argv or sys.argv))
        self.man["identity"]["lease_id"] = self.lease["lease_id"]
        self.man["lease"] = {"lease_id": self.lease["lease_id"], "run_id": self.run_id,
                             "state_dir": str(self.store.state_dir), "gpu_uuids": self.lease["gpu_uuids"]}
        self.log.info(f"lease {self.lease['lease_id']} on {', '.join(uuids)}")
        snap = nvsmi.occupancy(uuids)
        self.man["hardware"]["occupancy_before"] = snap
        self.save()
        if not snap["clean"]:
            raise GpuBusy("GPUs busy before launch: " + "; ".join(snap["problems"]))
        return uuids

    def run_backend(self, uuids: list[str]) -> None:
        req = self.req
        groups = P.groups_needed(self.settings)
        self.workload = generate(req.workload, groups, req.seed)
        self.man["workload"] = describe(self.workload, groups, None, {})
        self.save()
        ctx = RunContext(run_id=self.run_id, run_dir=str(self.dir), backend=req.backend, workload=req.workload,
                         runtime=req.runtime, rank=req.rank, seed=req.seed, settings=self.settings,
                         workload_params={"groups": groups, "group_size": None, "knobs": {}},
                         trainer_uuids=uuids[: P.TRAINER_GPUS], inference_uuids=uuids[P.TRAINER_GPUS:],
                         skyrl_batch_size=req.skyrl_batch_size, skyrl_cuda_compat=req.skyrl_cuda_compat,
                         python=req.python, skyrl_source=req.skyrl_source, hf_cache=req.hf_cache,
                         lease_id=self.lease["lease_id"],
                         model_path=str(self.dir / model_snapshot.LINK_NAME) if req.runtime != "sim" else None)
        self.log.info(f"backend {req.backend} ({req.runtime}) on workload {req.workload}, {groups} groups, "
                      f"schedule {self.man['workload']['schedule_sha256'][:12]}")
        self.man["identity"]["backend_started_unix"] = time.time()
        self.save()
        try:
            outcome = execute(ctx, self.log, image=self.man["identity"].get("container_image"),
                              on_start=self.worker_started)
        finally:
            self.man["identity"]["backend_finished_unix"] = time.time()
        self.log.info(f"backend exited {outcome.exit_code}, version {outcome.backend_version}")
        self.man["clock"] = outcome.clock
        self.man["backend_outcome"] = outcome.to_dict()
        self.man["pipeline"]["native_config"] = outcome.native_config
        self.man["identity"]["backend_version"] = outcome.backend_version
        self.man["results"]["autotuner"] = outcome.autotuner
        self.man["hardware"]["occupancy_after"] = nvsmi.occupancy(uuids)
        problems = self.store.held_by(self.lease["lease_id"], uuids)
        self.man["lease"]["verified_at_end"] = {"held": not problems, "problems": problems}
        if outcome.exit_code != 0:
            raise BenchError(f"backend exited with code {outcome.exit_code}")

    def worker_started(self, info: dict) -> None:
        self.man["worker"] = {k: info[k] for k in ("pid", "pgid", "started_unix", "container")}
        self.save()
        self.log.info(f"worker pid {info['pid']} in its own process group {info['pgid']}")

    def results(self) -> None:
        ev = self.dir / "updates.jsonl"
        updates = list(read_jsonl(ev)) if ev.exists() else []
        turns = list(read_jsonl(self.dir / "turns.jsonl")) if (self.dir / "turns.jsonl").exists() else []
        autotuner = self.man["results"].get("autotuner")
        self.man["results"] = contract.results(updates, turns, int(self.settings["staleness_bound"]))
        self.man["results"]["autotuner"] = autotuner

    def finish(self, aborted: list[str]) -> dict:
        self.man["evidence"] = evidence_record(self.dir)
        sealed = M.sealed_sha256(self.man)  # nothing but results, verdict and status changes after this
        self.log.info(f"manifest sealed: sha256={sealed} "
                      + " ".join(f"{k}={v}" for k, v in M.sealed_section_digests(self.man).items()))
        if self.lease is not None:  # a witness outside the results dir (validate.check_lease_history)
            self.store.note(self.lease["lease_id"], "evidence", run_id=self.run_id, evidence=self.man["evidence"],
                            manifest_sha256=sealed)
        try:
            self.results()
        except (OSError, ValueError, KeyError) as exc:
            aborted.append(f"results: {exc}")
        self.man["status"] = "aborted" if aborted else "running"
        self.man["reasons"] = list(aborted)
        self.save()
        wl = self.workload
        verdict = validate.validate(self.dir, workload_loader=(lambda _s: wl) if wl is not None else None,
                                    final=False)
        self.man["validation"] = {k: v for k, v in verdict.items() if k != "recomputed"}
        if not aborted:
            self.man["status"] = "valid" if verdict["verdict"] == "VALID" else "invalid"
            self.man["reasons"] = verdict["reasons"]
        if self.lease is not None:
            try:
                self.store.release(self.lease["lease_id"], reason=f"run {self.run_id} finished")
                self.man["lease"]["released"] = True
            except BenchError as exc:
                self.man["lease"]["released"] = False
                self.log.error(f"lease release failed: {exc}")
        self.save()
        s = report.summary(self.man)
        write_json(self.dir / "summary.json", s)
        write_atomic(self.dir / "summary.md", report.summary_markdown(s))
        self.log.info(f"status {self.man['status']}; verdict {verdict['verdict']}")
        self.log.close()
        return self.man


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupted(signum, _frame):
    raise Interrupted(signum)


def _install(handler) -> dict:
    """Set ``handler`` for the stop signals (main thread only); returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def run_one(req: RunRequest, echo=print) -> tuple[Path, dict]:
    check_request(req)
    previous = _install(_raise_interrupted)
    try:
        try:
            run = _Run(req, echo)
        except Interrupted as exc:
            raise BenchError(f"interrupted by {exc} before the run started (no lease was taken)") from None
        aborted: list[str] = []
        try:
            run.preflight()
            uuids = run.reserve()
            run.run_backend(uuids)
        except Interrupted as exc:
            _install(signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
            aborted.append(f"interrupted by {exc}: the worker's process group was stopped and the lease released")
            run.log.error(f"interrupted by {exc}")
        except BenchError as exc:
            aborted.append(str(exc))
            run.log.error(str(exc))
        except Exception as exc:  # noqa: BLE001 - recorded as an aborted run, with the traceback in run.log
            aborted.append(f"{type(exc).__name__}: {exc}")
            run.log.error(traceback.format_exc())
        _install(signal.SIG_IGN)
        man = run.finish(aborted)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    echo(f"{man['status'].upper()}: {run.dir}" + ("" if man["status"] == "valid" else
                                                 " -- " + "; ".join(man["reasons"][:3])))
    return run.dir, man


def run_suite(req: RunRequest, echo=print) -> list[tuple[Path, dict]]:
    """The comparison suite: each (backend, workload) serially; stops at the first run not valid."""
    if req.runtime == "native":
        raise BenchError("--suite with --runtime native would use one interpreter for both backends; "
                         "run separate native commands per backend")
    done = []
    for backend, workload in plan(req.suite or "comparison"):
        sub = attrs.evolve(req, backend=backend, workload=workload,
                           skyrl_batch_size=req.skyrl_batch_size if backend == "skyrl" else 4,
                           skyrl_cuda_compat=req.skyrl_cuda_compat and backend == "skyrl",
                           skyrl_source=req.skyrl_source if backend == "skyrl" else None)
        run_dir, man = run_one(sub, echo)
        done.append((run_dir, man))
        if man["status"] != "valid":
            echo(f"suite stopped: {backend}/{workload} is {man['status']}")
            break
    return done
