"""Kubernetes qualification: one pod per backend image runs the four workloads serially.

The controller creates the pod (digest-pinned image, four GPUs, the PVC's HF cache as the only
mount), waits until it runs, verifies the pod UID and the actual imageID, and only then releases
the benchmark by touching a file in the pod. After completion it verifies UID and imageID again,
collects artifacts with ``kubectl exec tar`` (no shared filesystem needed), and keeps the pod
record. ``--resume`` re-attaches to the saved pod and never creates another or reruns anything.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import time
from pathlib import Path

import attrs

from harness.errors import BenchError
from harness.fsio import read_json, write_json
from harness.pins import WORKLOADS

DIGEST = re.compile(r"^[^@\s]+@(sha256:[0-9a-f]{64})$")
WORK = "/rl-bench"


@attrs.frozen
class K8sOptions:
    backend: str
    name: str
    image: str
    provenance: dict
    output: str
    context: str | None = None
    pvc: str | None = None
    cache_subpath: str | None = None
    pull_secret: str | None = None
    namespace: str = "default"
    scheduler: str | None = None
    node_selector: tuple[str, ...] = ()
    runtime_class: str | None = None
    skyrl_cuda_compat: bool = False

    @property
    def digest(self) -> str:
        m = DIGEST.match(self.image)
        if not m:
            raise BenchError(f"--image {self.image!r} must be REGISTRY/IMAGE@sha256:<64 hex> (an immutable digest)")
        return m.group(1)


def pod_script(o: K8sOptions) -> str:
    """The pod's shell program: wait for release, check identity and CUDA, run the workloads, wait to be collected."""
    env_root = "/opt/rl-bench"
    extra = f" --skyrl-source {env_root}/skyrl" if o.backend == "skyrl" else ""
    extra += " --skyrl-cuda-compat" if o.skyrl_cuda_compat else ""
    runs = " ".join(WORKLOADS)
    return "\n".join([
        # Any failed check stops the pod at once (set -e), recording its exit code for the collector.
        "set -euo pipefail", f"mkdir -p {WORK}/out",
        f"trap 'rc=$?; echo \"$rc\" > {WORK}/done; echo \"pod check failed: exit $rc at line $LINENO\" >&2' ERR",
        f"until [ -f {WORK}/release ]; do sleep 2; done",
        '[ "$BENCH_PYTHON_SHA256" = "$EXPECTED_SOURCE_SHA256" ] || { echo "baked Python hash differs" >&2; exit 3; }',
        '[ "$BENCH_RECIPE_SHA256" = "$EXPECTED_RECIPE_SHA256" ] || { echo "baked recipe hash differs" >&2; exit 3; }',
        f"nvidia-smi -L > {WORK}/out/nvidia-smi-L.txt", "ls /dev/nvidia-uvm >/dev/null",
        "python -c 'import torch; x = torch.ones(1024, device=\"cuda\"); assert float(x.sum()) == 1024.0' "
        f"> {WORK}/out/cuda_smoke.txt 2>&1",
        "rc=0",
        f"for w in {runs}; do",
        f"  python -m harness.cli run --runtime native --backend {o.backend} --workload \"$w\" "
        f"--python \"$(command -v python)\"{extra} --gpus 0,1,2,3 --hf-cache /hf_home "
        f"--results-dir {WORK}/out/results --state-dir {WORK}/state || {{ rc=$?; break; }}",
        "done",
        f"echo $rc > {WORK}/done",
        f"t=0; until [ -f {WORK}/collected ] || [ $t -ge 86400 ]; do sleep 5; t=$((t+5)); done",
        "exit $rc",
    ])


def pod_spec(o: K8sOptions) -> dict:
    digest = o.digest
    rec = o.provenance.get("recipe_sha256", {})
    env = [{"name": "EXPECTED_SOURCE_SHA256", "value": o.provenance.get("source_sha256", "")},
           {"name": "EXPECTED_RECIPE_SHA256", "value": rec.get(o.backend, "") if isinstance(rec, dict) else rec},
           {"name": "HF_HOME", "value": "/hf_home"}, {"name": "RL_BENCH_EXPECTED_DIGEST", "value": digest}]
    if o.skyrl_cuda_compat:
        env.append({"name": "SKYRL_USE_CUDA_COMPAT", "value": "1"})
    container = {
        "name": "bench", "image": o.image, "imagePullPolicy": "IfNotPresent",
        "command": ["bash", f"/opt/rl-bench-src/containers/{o.backend}_env.sh", "bash", "-c", pod_script(o)],
        "env": env, "resources": {"limits": {"nvidia.com/gpu": 4}, "requests": {"nvidia.com/gpu": 4}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if o.pvc:
        container["volumeMounts"].append({"name": "cache", "mountPath": "/hf_home", "subPath": o.cache_subpath or ""})
        volumes.append({"name": "cache", "persistentVolumeClaim": {"claimName": o.pvc}})
    spec: dict = {"restartPolicy": "Never", "containers": [container], "volumes": volumes}
    if o.scheduler:
        spec["schedulerName"] = o.scheduler
    if o.node_selector:
        spec["nodeSelector"] = dict(kv.split("=", 1) for kv in o.node_selector)
    if o.runtime_class:
        spec["runtimeClassName"] = o.runtime_class
    if o.pull_secret:
        spec["imagePullSecrets"] = [{"name": o.pull_secret}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": o.name, "namespace": o.namespace,
                         "labels": {"app": "rl-bench", "rl-bench/backend": o.backend}},
            "spec": spec}


class Kubectl:
    def __init__(self, context: str | None, namespace: str) -> None:
        self.base = ["kubectl", *(["--context", context] if context else []), "--namespace", namespace]

    def __call__(self, *args: str, stdin: bytes | None = None, binary: bool = False):
        proc = subprocess.run([*self.base, *args], input=stdin, capture_output=True, check=False, timeout=600)
        if proc.returncode != 0:
            raise BenchError(f"kubectl {' '.join(args[:2])} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout if binary else proc.stdout.decode()

    def probe(self, *args: str) -> tuple[int, str]:
        """(exit code, stdout) without raising: for polling a file that may not exist yet."""
        proc = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False, timeout=120)
        return proc.returncode, proc.stdout


def observe(kubectl, name: str) -> dict:
    return json.loads(kubectl("get", "pod", name, "-o", "json"))


def verify(pod: dict, uid: str, digest: str, when: str) -> dict:
    """Pod UID and actual imageID must be the recorded ones; returns the observation."""
    if pod["metadata"]["uid"] != uid:
        raise BenchError(f"{when}: pod UID {pod['metadata']['uid']} is not the recorded {uid}; refusing")
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    image_id = statuses[0].get("imageID", "")
    if not image_id.endswith(digest):
        raise BenchError(f"{when}: pod runs imageID {image_id or '(none yet)'}, not {digest}")
    return {"when": when, "uid": uid, "image_id": image_id, "phase": pod["status"].get("phase"),
            "time_unix": time.time()}


def collect(kubectl, name: str, dest: Path) -> list[str]:
    """Copy the pod's output tree with ``exec tar`` (no shared filesystem); refuses unsafe paths."""
    data = kubectl("exec", name, "-c", "bench", "--", "tar", "cf", "-", "-C", f"{WORK}/out", ".", binary=True)
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.name.startswith("/") or ".." in Path(m.name).parts or not (m.isfile() or m.isdir()):
                raise BenchError(f"refusing unsafe artifact path {m.name!r}")
        tar.extractall(dest, filter="data")
        names = [m.name for m in tar.getmembers() if m.isfile()]
    return names


def qualify(o: K8sOptions, kubectl, resume: bool = False, poll_s: float = 10.0, echo=print) -> dict:
    out = Path(o.output)
    record_path = out / "pod.json"
    digest = o.digest
    if resume:
        if not record_path.exists():
            raise BenchError(f"--resume: no saved pod record in {out}")
        record = read_json(record_path)
        echo(f"resuming pod {record['name']} uid {record['uid']} (never recreated, never rerun)")
    else:
        if out.exists() and any(out.iterdir()):
            raise BenchError(f"--output {out} is not empty; use a fresh directory (or --resume)")
        out.mkdir(parents=True, exist_ok=True)
        spec = pod_spec(o)
        write_json(out / "pod_spec.json", spec)
        created = json.loads(kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(spec).encode()))
        record = {"name": o.name, "uid": created["metadata"]["uid"], "image": o.image, "digest": digest,
                  "backend": o.backend, "created_unix": time.time(), "checks": [], "released": False,
                  "collected": False}
        write_json(record_path, record)
        echo(f"created pod {o.name} uid {record['uid']}")
    if not record["released"]:
        pod = observe(kubectl, o.name)
        while pod["status"].get("phase") == "Pending":
            time.sleep(poll_s)
            pod = observe(kubectl, o.name)
        record["checks"].append(verify(pod, record["uid"], digest, "before release"))
        kubectl("exec", o.name, "-c", "bench", "--", "touch", f"{WORK}/release")
        record["released"] = True
        write_json(record_path, record)
        echo("identity verified; benchmark released")
    if not record["collected"]:
        while True:
            pod = observe(kubectl, o.name)
            if pod["status"].get("phase") in ("Succeeded", "Failed"):
                raise BenchError("pod ended before artifacts were collected; its record is kept, nothing is rerun")
            rc, text = kubectl.probe("exec", o.name, "-c", "bench", "--", "cat", f"{WORK}/done")
            if rc == 0:
                record["exit_code"] = int(text.strip() or 1)
                break
            time.sleep(poll_s)
        record["checks"].append(verify(pod, record["uid"], digest, "after completion"))
        record["artifacts"] = collect(kubectl, o.name, out / "artifacts")
        kubectl("exec", o.name, "-c", "bench", "--", "touch", f"{WORK}/collected")
        record["collected"] = True
        write_json(record_path, record)
        echo(f"collected {len(record['artifacts'])} files into {out / 'artifacts'}")
    write_json(out / "pod_final.json", observe(kubectl, o.name))
    return record
