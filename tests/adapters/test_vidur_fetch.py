"""`srl-profile fetch vidur` against a local HTTP server serving a tarball built here (no network)."""

import functools
import http.server
import io
import json
import tarfile
import threading

import pytest
from click.testing import CliRunner

from adapters.cli import cli
from adapters.vidur_fetch import FetchError, archive_url, fetch_vidur, map_member
from simrl.cost.observations import read_observations
from simrl.cost.vidur_import import vidur_data_dir

COMMIT = "abc1234"
TOP = f"vidur-{COMMIT}"


def _phi2_head(n_rows: int) -> bytes:
    """The header and first rows of the shipped phi-2 mlp.csv: real Vidur rows."""
    lines = (vidur_data_dir("compute") / "h100/microsoft/phi-2/mlp.csv").read_text().splitlines()
    return ("\n".join(lines[: 1 + n_rows]) + "\n").encode()


def _tarball(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def server(tmp_path):
    """Serve tmp_path/www over http://127.0.0.1:<port>; yields (base_url_of_repo, www)."""
    www = tmp_path / "www"
    (www / "microsoft/vidur/archive").mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/microsoft/vidur", www
    finally:
        httpd.shutdown()
        httpd.server_close()


def _publish(www, members):
    (www / f"microsoft/vidur/archive/{COMMIT}.tar.gz").write_bytes(_tarball(members))


def test_map_member_keeps_the_profiling_layout_only():
    assert map_member(f"{TOP}/data/profiling/compute/a100/Qwen/Qwen-72B/mlp.csv") == "compute/a100/Qwen/Qwen-72B/mlp.csv"
    assert map_member(f"{TOP}/data/profiling/network/a100_dgx/all_reduce.csv") == "network/a100_dgx/all_reduce.csv"
    assert map_member(f"{TOP}/data/processed_traces/splitwise_conv.csv") == "traces/splitwise_conv.csv"
    assert map_member(f"{TOP}/LICENSE") == "LICENSE"
    assert map_member(f"{TOP}/data/profiling/a100/mlp.csv") is None  # the older flat layout
    assert map_member(f"{TOP}/vidur/main.py") is None
    assert map_member(f"{TOP}/data/profiling/compute/../../../etc/passwd") is None
    assert map_member("/abs/data/profiling/compute/x.csv") is None


def test_archive_url_rejects_odd_refs():
    assert archive_url("7d47513") == "https://github.com/microsoft/vidur/archive/7d47513.tar.gz"
    with pytest.raises(ValueError, match="--commit"):
        archive_url("../../x")


def test_fetch_then_import(server, tmp_path):
    base, www = server
    _publish(www, {
        f"{TOP}/LICENSE": b"MIT License\n",
        f"{TOP}/README.md": b"not kept\n",
        f"{TOP}/data/profiling/compute/a100/microsoft/phi-2/mlp.csv": _phi2_head(3),
        f"{TOP}/data/profiling/a100/mlp.csv": _phi2_head(1),  # old layout: left out
        f"{TOP}/data/processed_traces/splitwise_code.csv": b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2\n",
    })
    dest = tmp_path / "vidur-full"
    r = CliRunner().invoke(cli, ["fetch", "vidur", "--commit", COMMIT, "-o", str(dest), "--base-url", base])
    assert r.exit_code == 0, r.output
    assert "wrote 3 files" in r.output
    info = json.loads((dest / "source.json").read_text())
    assert info["commit"] == COMMIT and info["files"] == [
        "LICENSE", "compute/a100/microsoft/phi-2/mlp.csv", "traces/splitwise_code.csv"]
    assert COMMIT in (dest / "NOTICE").read_text()
    assert not (dest / "README.md").exists()
    # The fetched tree imports: 3 rows of phi-2, each with its (non-empty) operator columns.
    obs_file = tmp_path / "o.jsonl"
    r = CliRunner().invoke(cli, ["import", "vidur", str(dest), "-o", str(obs_file)])
    assert r.exit_code == 0, r.output
    obs = read_observations(obs_file)
    assert {o.inputs["model"] for o in obs} == {"microsoft/phi-2"}
    assert {o.provenance["hardware"] for o in obs} == {"NVIDIA A100"}
    assert len({o.inputs["num_tokens"] for o in obs}) <= 3 and len(obs) >= 3
    # Again into the same folder: nothing to do (idempotent), no second download needed.
    (www / f"microsoft/vidur/archive/{COMMIT}.tar.gz").unlink()
    r = CliRunner().invoke(cli, ["fetch", "vidur", "--commit", COMMIT, "-o", str(dest), "--base-url", base])
    assert r.exit_code == 0 and "nothing to do" in r.output


def test_fetch_refuses_clearly(server, tmp_path):
    base, www = server
    with pytest.raises(FetchError, match="HTTP 404"):
        fetch_vidur(tmp_path / "a", COMMIT, base)
    assert not (tmp_path / "a").exists()  # nothing half-written
    _publish(www, {f"{TOP}/LICENSE": b"MIT\n"})
    with pytest.raises(FetchError, match="no data/profiling/compute"):
        fetch_vidur(tmp_path / "a", COMMIT, base)
    assert not (tmp_path / "a").exists()
    (www / f"microsoft/vidur/archive/{COMMIT}.tar.gz").write_bytes(b"not gzip")
    with pytest.raises(FetchError, match="not a readable"):
        fetch_vidur(tmp_path / "a", COMMIT, base)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("mine")
    with pytest.raises(FetchError, match="not empty"):
        fetch_vidur(busy, COMMIT, base)


def test_import_vidur_defaults_to_the_shipped_data(tmp_path):
    out = tmp_path / "v.jsonl"
    r = CliRunner().invoke(cli, ["import", "vidur", "-o", str(out)])
    assert r.exit_code == 0, r.output
    # The shipped set: 23,229 operator and 8,946 collective observations (docs/observations.md).
    obs = read_observations(out)
    assert sum(o.kind == "operator" for o in obs) == 23229
    assert sum(o.kind == "collective" for o in obs) == 8946
    shipped = vidur_data_dir()
    assert (shipped / "LICENSE").is_file() and "7d47513363ec447a741ac5e47241580b47724fbf" in (shipped / "NOTICE").read_text()
