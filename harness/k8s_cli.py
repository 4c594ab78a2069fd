"""Command line of the Kubernetes qualifier (`bench k8s` and scripts/qualify_kubernetes.py)."""

from __future__ import annotations

import json
import sys

import click

from harness.errors import BenchError
from harness.fsio import read_json
from harness.k8s import K8sOptions, Kubectl, pod_spec, qualify
from harness.pins import BACKENDS
from simrl.cli.app import EXIT_USAGE, AppCommand, abort, common_options, info


@click.command(cls=AppCommand)
@click.option("--backend", type=click.Choice(BACKENDS), required=True)
@click.option("--name", required=True, help="unique pod name for this invocation")
@click.option("--image", required=True, help="REGISTRY/IMAGE@sha256:MANIFEST_DIGEST")
@click.option("--source-provenance", required=True, type=click.Path(exists=True, dir_okay=False),
              help="JSON {source_sha256, recipe_sha256} generated from the same checkout")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="fresh local output directory")
@click.option("--context", default=None)
@click.option("--pvc", default=None, help="existing writable PVC holding the HF cache")
@click.option("--cache-subpath", default=None, help="HF_HOME directory (with hub/) relative to the PVC")
@click.option("--pull-secret", default=None)
@click.option("--namespace", default="default", show_default=True)
@click.option("--scheduler", default=None)
@click.option("--node-selector", multiple=True, help="KEY=VALUE, repeatable")
@click.option("--runtime-class", default=None)
@click.option("--skyrl-cuda-compat", is_flag=True)
@click.option("--dry-run", is_flag=True, help="print the pod spec JSON; launch nothing")
@click.option("--resume", is_flag=True, help="observe the saved pod; never create or rerun")
@common_options
def main(backend, name, image, source_provenance, output, context, pvc, cache_subpath, pull_secret, namespace,
         scheduler, node_selector, runtime_class, skyrl_cuda_compat, dry_run, resume) -> None:
    """Run all four workloads of one backend image in one Kubernetes pod and collect the evidence.

    Exit codes: 0 qualified, 1 the pod's checks failed, 2 a user error (flag, provenance file).
    """
    try:
        if any("=" not in kv for kv in node_selector):
            raise BenchError("--node-selector takes KEY=VALUE")
        if skyrl_cuda_compat and backend != "skyrl":
            raise BenchError("--skyrl-cuda-compat applies to --backend skyrl only")
        if not dry_run and not (pvc and cache_subpath):
            raise BenchError("--pvc and --cache-subpath are required (the HF cache lives on the PVC)")
        prov = read_json(source_provenance)
        if not isinstance(prov, dict) or "source_sha256" not in prov or "recipe_sha256" not in prov:
            raise BenchError(f"{source_provenance}: expected JSON with source_sha256 and recipe_sha256")
        opts = K8sOptions(backend=backend, name=name, image=image, provenance=prov, output=output, context=context,
                          pvc=pvc, cache_subpath=cache_subpath, pull_secret=pull_secret, namespace=namespace,
                          scheduler=scheduler, node_selector=tuple(node_selector), runtime_class=runtime_class,
                          skyrl_cuda_compat=skyrl_cuda_compat)
        if dry_run:
            click.echo(json.dumps(pod_spec(opts), indent=1, sort_keys=True))
            return
        record = qualify(opts, Kubectl(context, namespace), resume=resume, echo=info)
        sys.exit(0 if record.get("exit_code") == 0 else 1)
    except (BenchError, ValueError) as exc:
        code = getattr(exc, "exit_code", 1)
        abort(str(exc), EXIT_USAGE if code == 1 else code)
