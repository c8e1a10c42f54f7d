"""A plugin package from outside the tree (tests/plugin_pkg: a backend, lock clients, a fault and
a check) is pip-installed into the test venv, listed by `fencecheck plugins`, and driven end to
end by `fencecheck run` (the check judges the run, and its kind is a column of the comparison); a
fault a runtime cannot host is refused up front. Its backend, client and fault options show in
`run --help` and `fencecheck schema config` and are checked by their models, and its backend's
comparison row runs from `fencecheck libraries` into the published table. Its shipped Go client
(`demo-go-setnx`: a source folder and one descriptor) is built by `fencecheck build`, listed
wherever the built-in programs are, and its row runs into the published table with the version
its go.mod pins."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import at_once, run_fencecheck

PKG = Path(__file__).resolve().parents[1] / "plugin_pkg"
LIBRARIES = Path(__file__).resolve().parents[2] / "examples" / "libraries.toml"
DIST = "fencecheck-demo-plugin"


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args],
                   check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a `fencecheck` that has the plugin installed. Built from a copy (a
    build leaves build/ and egg-info beside the sources), in isolation (the venv's setuptools may
    predate bdist_wheel), and installed into a folder of its own on PYTHONPATH, not into the
    venv: tests running beside this one (the suite runs in parallel) see only the built-in
    catalog and checks, before, during and after."""
    base = tmp_path_factory.mktemp("plugin")
    src, target = base / "pkg", base / "site"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _pip("install", "--no-deps", "--target", str(target), str(src))
    path = os.pathsep.join(p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)
    yield {**os.environ, "PYTHONPATH": path}


def test_plugins_lists_the_installed_client_and_fault(plugin: dict[str, str]) -> None:
    r = run_fencecheck("plugins", timeout=60, env=plugin)
    assert r.returncode == 0, r.stderr
    assert "fencecheck.clients: demo-setnx" in r.stdout and DIST in r.stdout
    assert "fencecheck.faults: freeze-all" in r.stdout
    assert "fencecheck.checks: demo-acquires" in r.stdout
    assert "  demo-acquires: demo-unseen" in r.stdout  # the check with its kinds
    redis_line = next(x for x in r.stdout.splitlines() if x.strip().startswith("redis:"))
    assert redis_line.strip().endswith("demo-setnx")  # appended: the default stays first


def test_an_unsupported_runtime_is_refused_naming_both(plugin: dict[str, str],
                                                       tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), "--nemesis", "freeze-all", "--runtime",
                       "docker", timeout=60, env=plugin)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "freeze-all" in r.stderr and "docker" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_plugin_client_and_fault_run_end_to_end(plugin: dict[str, str], tmp_path: Path) -> None:
    r = run_fencecheck("run", "--store", str(tmp_path), "--client", "demo-setnx", "--nemesis",
                       "freeze-all", "--time-limit", "6", "--interval", "0.5,1", "--concurrency",
                       "3", "--seed", "3", timeout=180, env=plugin)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    run_dir = next(tmp_path.glob("*/latest")).resolve()
    assert json.loads((run_dir / "nodes" / "c1" / "worker.json").read_text())["client"] == \
        "demo-setnx"
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    grants = [e for e in history if e["f"] == "acquire" and e["type"] == "ok"]
    assert grants and all(e["value"].get("token") is None for e in grants)
    faults = [e for e in history if e["process"] == "nemesis" and e["type"] == "ok"]
    assert any(e["f"] == "start-freeze-all" and e["value"]["frozen"] == ["c1", "c2", "c3"]
               for e in faults), faults
    assert any(e["f"] == "stop-freeze-all" for e in faults)
    demo = json.loads((run_dir / "results.json").read_text())["checks"]["demo-acquires"]
    assert demo["valid"] is True and demo["acquired"] == len(grants)
    r = run_fencecheck("compare", str(tmp_path), "--out", str(tmp_path / "cmp"), timeout=120,
                       env=plugin)
    assert r.returncode == 0, r.stderr
    header = (tmp_path / "cmp" / "compare.csv").read_text().splitlines()[0].split(",")
    assert "demo-unseen" in header and "duplicate-effect" in header


def _text(out: str) -> str:
    """rich's help as plain words (its box drawing and line breaks gone)."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())


def test_a_plugin_backend_shows_in_plugins_help_schema_and_the_comparison(
        plugin: dict[str, str]) -> None:
    """The demo plugin's backend (service, descriptor, client: three modules outside the tree),
    its shipped Go client (a source folder and a descriptor) and its fault's and clients'
    options, everywhere the built-in ones are listed."""
    wide = {**plugin, "COLUMNS": "300"}
    listed, helped, config, results, rows = at_once(*(
        functools.partial(run_fencecheck, *args, timeout=90, env=env) for args, env in (
            (("plugins",), plugin), (("run", "--help"), wide), (("schema", "config"), plugin),
            (("schema", "results"), plugin), (("libraries",), plugin))))
    assert listed.returncode == 0 and "fencecheck.backends: demo-redis" in listed.stdout
    assert "  demo-redis: demo-redis-setnx, demo-go-setnx, stdio" in listed.stdout
    assert "runtimes: netns, docker, ssh" in listed.stdout
    assert "workloads: lock, leader, cron" in listed.stdout
    assert helped.returncode == 0, helped.stderr
    text = _text(helped.stdout)
    for shown in ("demo-redis: port=N (default 6390)",
                  "demo-redis-setnx, demo-go-setnx: key_prefix=TEXT (default demo:)",
                  "freeze-all: target=holder|random (default holder), delay_s=LOW,HIGH, "
                      "hold_s=LOW,HIGH"):
        assert shown in text, shown
    defs = json.loads(config.stdout)["$defs"]
    assert defs["backend.demo-redis"]["properties"]["port"]["default"] == 6390
    assert "key_prefix" in defs["client.demo-redis-setnx"]["properties"]
    assert "key_prefix" in defs["client.demo-go-setnx"]["properties"]  # the Go program's
    assert "hold_s" in defs["fault.freeze-all"]["properties"]
    kind = json.loads(results.stdout)["$defs"]["Violation"]["properties"]["kind"]
    assert "demo-unseen" in kind["examples"]
    generated = tomllib.loads(rows.stdout)["row"]
    demo = next(x for x in generated if x["name"] == "none-demo-redis-setnx")
    assert demo["backend"] == "demo-redis" and demo["backend_options"] == {"port": 6391}
    go = next(x for x in generated if x["name"] == "none-demo-go-setnx")
    assert go["client"] == "demo-go-setnx" and go["backend_options"] == {"port": 6392}
    assert len(generated) == len(tomllib.loads(LIBRARIES.read_text())["row"]) + 2


def test_a_plugin_options_are_checked_by_its_models(plugin: dict[str, str],
                                                    tmp_path: Path) -> None:
    cases = ((["--backend", "demo-redis", "--backend-opt", "port=80"],
              "--backend-opt port: Input should be greater than or equal to 1024"),
             (["--backend", "demo-redis", "--client-opt", "prefix=x"],
              "--client-opt prefix: client demo-redis-setnx has no such option"),
             (["--nemesis", "freeze-all", "--fault-opt", "freeze-all.hold_s=x"],
              "--fault-opt freeze-all.hold_s"))
    done = at_once(*(functools.partial(run_fencecheck, "run", "--store", str(tmp_path), *args,
                                       timeout=90, env=plugin) for args, _ in cases))
    for r, (_, named) in zip(done, cases, strict=True):
        assert r.returncode == 3 and named in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


GO_CLIENT = "demo-go-setnx"
# row: (client, port, the table's words for it: the Go one with the version its go.mod pins)
ROWS = {"none-demo-redis-setnx": ("demo-redis-setnx", 6391, "the demo plugin's SET NX PX"),
        "none-demo-go-setnx": (GO_CLIENT, 6392,
                               "the demo plugin's SET NX PX in Go [go-redis v9.7.3]")}


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_a_plugin_backends_rows_and_go_program_run_into_the_published_table(
        plugin: dict[str, str], tmp_path: Path) -> None:
    """`fencecheck libraries` writes the plugin's rows. Its shipped Go client (the plugin's
    go/setnx/ and one ClientDescriptor with its `Program`) is refused until built, naming the
    fix, and listed by `build --dry-run`; `fencecheck build` builds it into the cache with the
    tree's Go stdio library. `fencecheck matrix` runs both rows with their backend's options
    (side by side), and the published table has each in its client's words, the Go one with the
    go-redis version its go.mod pins."""
    env = {**plugin, "FENCECHECK_CLIENT_CACHE": str(tmp_path / "cache")}
    matrix, refused = tmp_path / "libraries.toml", tmp_path / "refused"
    unbuilt, dry, r = at_once(*(
        functools.partial(run_fencecheck, *args, timeout=90, env=env) for args in (
            ("run", "--store", str(refused), "--backend", "demo-redis", "--client", GO_CLIENT),
            ("build", "--dry-run", GO_CLIENT), ("libraries", "--out", str(matrix)))))
    assert unbuilt.returncode == 3 and "Traceback" not in unbuilt.stderr
    assert f"build it with: fencecheck build {GO_CLIENT}" in _text(unbuilt.stderr)
    assert not refused.exists() or list(refused.iterdir()) == []
    source = Path(plugin["PYTHONPATH"].split(os.pathsep)[0]) / "fencecheck_demo_plugin" / "go"
    assert dry.returncode == 0, dry.stderr
    assert f"{GO_CLIENT} (client {GO_CLIENT} on demo-redis): go, from {source / 'setnx'}" \
        in _text(dry.stdout) and ": not built" in dry.stdout, dry.stdout
    assert r.returncode == 0, r.stderr
    built = run_fencecheck("build", GO_CLIENT, timeout=300, env=env)
    assert built.returncode == 0 and f"{GO_CLIENT}: built in" in _text(built.stdout), \
        built.stdout + built.stderr
    folder = next((tmp_path / "cache").glob(f"{GO_CLIENT}-*"))
    assert (folder / GO_CLIENT).is_file() and (folder / "stdio" / "stdio.go").is_file()
    out = tmp_path / "out"
    r = run_fencecheck("matrix", str(matrix), "--only", ",".join(ROWS), "--jobs", "2",
                       "--store", str(tmp_path / "store"), "--out", str(out), timeout=300,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    table = subprocess.run([sys.executable, "-m", "fencecheck.reports.markdown", str(out)],
                           capture_output=True, text=True, timeout=60, env=env)
    assert table.returncode == 0, table.stderr
    for row, (client, port, words) in ROWS.items():
        run_dir = next((tmp_path / "store").glob(f"{row}/*/test.json")).parent
        config = json.loads((run_dir / "test.json").read_text())["config"]
        assert config["backend_options"] == {"port": port}
        worker = json.loads((run_dir / "nodes" / "c1" / "worker.json").read_text())
        assert worker["client"] == client
        assert all(e.endswith(f":{port}") for e in worker["client_options"]["endpoints"])
        history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
        grants = [e for e in history if e["f"] == "acquire" and e["type"] == "ok"]
        assert grants and all(e["value"].get("token") is None for e in grants)
        line = next(x for x in table.stdout.splitlines() if f"(`{client}`)" in x)
        assert line.startswith(f"| {words} (`{client}`) | demo-redis |"), line
        assert line.endswith("| met |"), line
