"""Kubernetes qualifier: the --dry-run pod spec, and the verify/release/collect flow on a fake kubectl."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from click.testing import CliRunner

from harness.errors import BenchError
from harness.k8s import K8sOptions, qualify
from harness.k8s_cli import main

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"registry.example/rl-bench-skyrl@{DIGEST}"


@pytest.fixture
def prov(tmp_path):
    p = tmp_path / "source.json"
    p.write_text(json.dumps({"source_sha256": "s" * 64, "recipe_sha256": {"art": "a" * 64, "skyrl": "k" * 64}}))
    return p


def test_dry_run_pod_spec(prov, tmp_path):
    r = CliRunner().invoke(main, ["--backend", "skyrl", "--name", "rl-bench-skyrl-test", "--image", IMAGE,
                                  "--source-provenance", str(prov), "--output", str(tmp_path / "out"),
                                  "--pvc", "bench-pvc", "--cache-subpath", "caches/huggingface",
                                  "--pull-secret", "regcred", "--namespace", "ml", "--scheduler", "volcano",
                                  "--node-selector", "gpu=h200", "--runtime-class", "nvidia",
                                  "--skyrl-cuda-compat", "--dry-run"])
    assert r.exit_code == 0, r.output
    pod = json.loads(r.output)
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"] == {"name": "rl-bench-skyrl-test", "namespace": "ml",
                               "labels": {"app": "rl-bench", "rl-bench/backend": "skyrl"}}
    assert spec["restartPolicy"] == "Never" and spec["schedulerName"] == "volcano"
    assert spec["nodeSelector"] == {"gpu": "h200"} and spec["runtimeClassName"] == "nvidia"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert c["image"] == IMAGE and c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert {"name": "cache", "mountPath": "/hf_home", "subPath": "caches/huggingface"} in c["volumeMounts"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["EXPECTED_RECIPE_SHA256"] == "k" * 64 and env["SKYRL_USE_CUDA_COMPAT"] == "1"
    script = c["command"][-1]
    assert "until [ -f /rl-bench/release ]" in script and "--skyrl-cuda-compat" in script
    assert script.count("--workload") == 1 and "multi_turn_salted" in script
    assert not (tmp_path / "out").exists()  # dry run creates nothing


def test_rejects_tag_image(prov, tmp_path):
    r = CliRunner().invoke(main, ["--backend", "art", "--name", "x", "--image", "registry/img:latest",
                                  "--source-provenance", str(prov), "--output", str(tmp_path / "o"), "--dry-run"])
    assert r.exit_code == 2 and "immutable digest" in r.output  # a user error (docs/cli.md)


class FakeKubectl:
    """Plays a pod: Pending, then Running with the right imageID; done after release."""

    def __init__(self, image_id=f"registry.example/rl-bench-skyrl@{DIGEST}"):
        self.calls, self.phase, self.files, self.image_id, self.creates = [], "Pending", set(), image_id, 0

    def __call__(self, *args, stdin=None, binary=False):
        self.calls.append(args)
        if args[0] == "create":
            self.creates += 1
            return json.dumps({"metadata": {"uid": "uid-1"}})
        if args[:2] == ("get", "pod"):
            pod = {"metadata": {"uid": "uid-1"}, "status": {"phase": self.phase,
                                                            "containerStatuses": [{"imageID": self.image_id}]}}
            self.phase = "Running"
            return json.dumps(pod)
        if "touch" in args:
            self.files.add(args[-1].rsplit("/", 1)[-1])
            return ""
        if "tar" in args:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                data = b'{"status": "valid"}'
                info = tarfile.TarInfo("./results/run-1/manifest.json")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            return buf.getvalue()
        raise AssertionError(args)

    def probe(self, *args):
        return (0, "0\n") if "release" in self.files else (1, "")


def test_qualify_verifies_releases_collects_and_resume_never_recreates(prov, tmp_path):
    o = K8sOptions(backend="skyrl", name="p", image=IMAGE, provenance=json.loads(prov.read_text()),
                   output=str(tmp_path / "out"), pvc="pvc", cache_subpath="hf")
    k = FakeKubectl()
    rec = qualify(o, k, poll_s=0, echo=lambda m: None)
    assert rec["exit_code"] == 0 and rec["collected"] and [c["when"] for c in rec["checks"]] == [
        "before release", "after completion"]
    assert (tmp_path / "out/artifacts/results/run-1/manifest.json").exists()
    assert k.files == {"release", "collected"}
    rec2 = qualify(o, k, resume=True, poll_s=0, echo=lambda m: None)
    assert k.creates == 1 and rec2["uid"] == "uid-1"
    with pytest.raises(BenchError, match="not empty"):
        qualify(o, k, poll_s=0, echo=lambda m: None)


def test_wrong_image_id_refuses_release(prov, tmp_path):
    o = K8sOptions(backend="skyrl", name="p", image=IMAGE, provenance=json.loads(prov.read_text()),
                   output=str(tmp_path / "out"), pvc="pvc", cache_subpath="hf")
    k = FakeKubectl(image_id="registry.example/other@sha256:" + "cd" * 32)
    with pytest.raises(BenchError, match="not sha256:abab"):
        qualify(o, k, poll_s=0, echo=lambda m: None)
    assert "release" not in k.files
