"""The package as a user installs it: the sdist and the wheel built from this checkout (the wheel
from the sdist, as a package index's builders do), the wheel installed into a new virtual
environment outside the checkout, and from there what a core install (`pip install
fencecheck`, no extras) must do: list its files, every client program's sources and build
manifests among them; `check` a history shipped in the package; print a schema; name every
build recipe (`fencecheck build --dry-run`); run a user's tests with the pytest plugin; and
refuse `run` and `compare`, which need the `run` and `compare` extras, with one line naming
each.

One venv for the module (an xdist group of its own). Its packages come from this test
environment's site-packages, linked, not downloaded: exactly the core's dependencies and theirs
(read from the installed metadata), plus pytest for the plugin, and nothing of any extra, so a
module the core imports by mistake fails here. Downloading them (what a user's `pip install`
does, measured in docs/measurements.md) would need the network and a minute.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from fencecheck.cli.build import recipes
from fencecheck.clusters.kube import node_build
from fencecheck.clusters.services import kube_build
from fencecheck.descriptors import catalog
from fencecheck.workloads.clients import build
from tests.api.test_plugin import check_user_run
from tests.conftest import REPO

PKG = Path(build.__file__).resolve().parents[2]  # the folder fencecheck/ links into
# What the sdist is built from: the project metadata and the packages (fencecheck/ links to the
# top-level folders; copied as links into a clean folder, so no build/ of the checkout leaks in).
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "fencecheck",
           *sorted(p.name for p in (REPO / "fencecheck").iterdir() if p.is_symlink()))
# The file each recipe kind cannot build without, beside its sources.
MANIFESTS = {"go build": ["go.mod", "go.sum"], "mvn": ["pom.xml"], "npm": ["package.json"]}
# Linked into the venv beside the core: the plugin's test needs pytest itself.
FOR_THE_TEST = ("pytest",)


@dataclass(frozen=True)
class Install:
    sdist: Path
    wheel: Path
    python: str
    bin: Path
    home: Path  # a folder outside the checkout to run from

    def run(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in (env or os.environ).items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "FORCE_COLOR")}
        return subprocess.run(args, cwd=self.home, env=env, capture_output=True, text=True,
                              timeout=timeout)

    def fencecheck(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "fencecheck"), *args)


def _build(tmp: Path) -> tuple[Path, Path]:
    src, dist = tmp / "src", tmp / "dist"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir() and not path.is_symlink():
            shutil.copytree(path, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so"))
        else:
            shutil.copy(path, src / name, follow_symlinks=False)
    # sdist first, then the wheel from the unpacked sdist (`build`'s default): a file missing
    # from the sdist is missing from the wheel too.
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist),
                    str(src)], check=True, capture_output=True, timeout=600)
    [sdist] = dist.glob("fencecheck-*.tar.gz")
    [wheel] = dist.glob("fencecheck-*.whl")
    return sdist, wheel


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions `names` need, recursively, without their extras."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = req.name.lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = metadata.distribution(req.name)
        todo.extend(seen[key].requires or [])
    return list(seen.values())


def _link_core_packages(tmp: Path) -> Path:
    """A folder of links to the files of the core's dependencies (and pytest's), nothing else."""
    site = Path(sysconfig.get_paths()["purelib"])
    core = [r for r in metadata.requires("fencecheck") or [] if "extra ==" not in r]
    deps = tmp / "deps"
    deps.mkdir()
    for dist in _closure((*core, *FOR_THE_TEST)):
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if (site / top).exists() and not (deps / top).exists():
                (deps / top).symlink_to(site / top)
    return deps


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    tmp = tmp_path_factory.mktemp("install")
    sdist, wheel = _build(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True,
                   timeout=300)
    purelib = subprocess.run([python, "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "core-deps.pth").write_text(f"{_link_core_packages(tmp)}\n")
    home = tmp / "home"
    home.mkdir()
    yield Install(sdist, wheel, python, venv / "bin", home)


def _wheel_path(path: Path) -> str:
    """Where a file of the checkout is in the package (fencecheck/workloads/... for
    workloads/...)."""
    return "fencecheck/" + path.resolve().relative_to(PKG).as_posix()


def _hashed_files(b: build.ClientBuild) -> list[Path]:
    """The files `source_hash` reads for a client: its sources, not other clients' nested ones."""
    src = build.HERE / b.source
    skip = {"node_modules", "classes", *build._nested(b)}
    return sorted(p for p in src.rglob("*")
                  if p.is_file() and p.relative_to(src).parts[0] not in skip
                  and "__pycache__" not in p.parts)


def _needed_files() -> list[str]:
    """Every file a build reads from the package: each shipped client's sources and the
    manifest of its recipe, and the go.mod and go.sum of kube-apiserver and kube-node."""
    shipped = {c.name for c in catalog.clients().values() if c.program is not None}
    assert shipped and shipped == set(build.BUILDS), "a shipped client has no build recipe"
    need: list[str] = []
    for b in build.BUILDS.values():
        sources = _hashed_files(b)
        assert sources, f"{b.name}: no source files in {b.source}"
        need += [_wheel_path(p) for p in sources]
        for kind, manifests in MANIFESTS.items():
            if b.recipe.startswith(kind):
                need += [_wheel_path(build.HERE / b.source / m) for m in manifests]
    need += [_wheel_path(mod / m) for mod in (kube_build.MODULE, node_build.MODULE)
             for m in ("go.mod", "go.sum")]
    return list(dict.fromkeys(need))


def test_the_installed_package_lists_every_client_source_and_manifest(install: Install) -> None:
    r = install.run(install.python, "-c", "import importlib.metadata as m; "
                    "print('\\n'.join(str(f) for f in m.files('fencecheck')))")
    assert r.returncode == 0, r.stderr
    files = set(r.stdout.splitlines())
    missing = [f for f in _needed_files() if f not in files]
    assert not missing, "not in the installed package:\n" + "\n".join(missing)
    assert "fencecheck/examples/histories/redis-unfenced.jsonl" in files
    with zipfile.ZipFile(install.wheel) as whl:
        assert not [f for f in _needed_files() if f not in set(whl.namelist())]


def test_the_sdist_carries_the_package_and_its_metadata(install: Install) -> None:
    with tarfile.open(install.sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for f in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "PKG-INFO",
              "checker/_pairing.c", "checker/_rwpass.c", "checker/_loops.h",
              "fencecheck/examples/histories/etcd-fenced.jsonl", *_needed_files()):
        assert f in names, f


def test_the_install_reads_histories_with_the_compiled_loops(install: Install) -> None:
    """setup.py's optional extensions, the checker's two loops in C, are built from the sdist (as
    a package index's builders do, where a C compiler is at hand) and used: their digest matches
    the sources the wheel carries beside them (checker/native.py)."""
    with zipfile.ZipFile(install.wheel) as whl:
        names = set(whl.namelist())
    for name in ("_pairing", "_rwpass"):
        assert any(n.startswith(f"fencecheck/checker/{name}.") and n.endswith(".so")
                   for n in names), name
        assert f"fencecheck/checker/{name}.c" in names
    r = install.run(install.python, "-c", "from fencecheck.checker import fastload, native, "
                    "rwpass; print(all(native.compiled(m) for m in ('_pairing', '_rwpass')), "
                    "fastload.NATIVE is not None, rwpass.NATIVE is not None)")
    assert r.stdout.split() == ["True", "True", "True"], r.stdout + r.stderr


def test_the_metadata_says_license_urls_classifiers_and_extras(install: Install) -> None:
    with zipfile.ZipFile(install.wheel) as whl:
        [meta_name] = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        meta = whl.read(meta_name).decode()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in whl.namelist())
    headers = [line.partition(": ") for line in meta.split("\n\n", 1)[0].splitlines()]
    got: dict[str, list[str]] = {}
    for key, _, value in headers:
        got.setdefault(key, []).append(value)
    assert got["License-Expression"] == ["Apache-2.0"]
    assert "License" not in got  # the deprecated free-text field
    assert any(c.startswith("Topic :: Software Development :: Testing")
               for c in got["Classifier"])
    assert {u.split(",")[0] for u in got["Project-URL"]} >= {"Homepage", "Source"}
    assert set(got["Provides-Extra"]) >= {"compare", "run", "kubernetes", "docker", "ssh", "all"}
    core = {Requirement(r).name for r in got["Requires-Dist"] if "extra ==" not in r}
    # what a core install must not pull in (issue 31): clusters, runtimes, lock libraries
    assert not core & {"kubernetes", "docker", "paramiko", "psycopg", "kazoo", "redis",
                       "pydantic", "pyfuse3", "pottery", "nats-py", "PyMySQL", "pandas"}, core


def test_check_and_schema_run_from_the_core_install(install: Install) -> None:
    where = install.run(install.python, "-c", "import fencecheck, sys; "
                        "print(fencecheck.__file__); print(sys.path)")
    module_file, path = where.stdout.splitlines()
    assert Path(module_file).is_relative_to(Path(install.python).parent.parent)
    assert str(REPO) not in path, "the checkout is on the path"
    history = Path(module_file).parent / "examples" / "histories" / "redis-unfenced.jsonl"
    r = install.fencecheck("check", str(history))
    assert r.returncode == 1, r.stdout + r.stderr  # violations found
    assert "stale-write-accepted" in r.stdout and not r.stderr
    r = install.fencecheck("schema", "results")
    assert r.returncode == 0 and json.loads(r.stdout)["title"] == "fencecheck results.json"
    version, flag = install.fencecheck("version"), install.fencecheck("--version")
    assert version.stdout == flag.stdout == f"fencecheck {metadata.version('fencecheck')}\n"


def test_build_dry_run_names_every_recipe_from_the_install(install: Install) -> None:
    r = install.fencecheck("build", "--dry-run")
    assert r.returncode == 0, r.stderr
    named = {line.split(" ", 1)[0] for line in r.stdout.splitlines()
             if line and not line.startswith(" ")}
    servers = {b.server_build for b in catalog.backends().values() if b.server_build}
    server_names = {importlib.import_module(s).NAME for s in servers}
    assert {"kube-apiserver", "nats-server", "hazelcast", "consul"} <= server_names
    # kube-node (fencecheck kube's one-node cluster) is no backend's: built only when named
    assert named == set(recipes()) == set(build.BUILDS) | server_names | {"kube-node"}
    # the sources it builds from are the installed package's, not the checkout's
    assert str(REPO) not in r.stdout
    assert "site-packages/fencecheck/workloads/clients/go/client-go" in r.stdout
    # and they hash as the checkout's do: a build cached from a checkout serves a pip install
    folders = {line.split()[1].rstrip(":") for line in r.stdout.splitlines()
               if line.startswith("  into ")}
    assert folders == {str(rec.folder()) for rec in recipes().values()}


def test_build_makes_a_client_from_the_install(install: Install, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "FENCECHECK_CLIENT_CACHE": str(cache)}
    r = install.run(str(install.bin / "fencecheck"), "build", "node-redlock", env=env,
                    timeout=300)
    assert r.returncode == 0, r.stderr
    [line] = r.stdout.splitlines()
    assert line.startswith("fencecheck build: node-redlock: built in ")
    folder = Path(line.rsplit(": ", 1)[1])
    assert folder.parent == cache and (folder / ".built").is_file()
    assert (folder / "node_modules" / "redlock").is_dir()


def test_a_command_of_an_extra_names_the_extra_to_install(install: Install) -> None:
    r = install.fencecheck("run", "--time-limit", "1")
    assert r.returncode == 3 and not r.stdout
    assert r.stderr.startswith("error: fencecheck run needs the Python package "), r.stderr
    assert "pip install 'fencecheck[run]'" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.splitlines()) == 1
    listing = install.fencecheck("--help")
    assert listing.returncode == 0, listing.stderr
    assert "check" in listing.stdout and "run" in listing.stdout
    r = install.fencecheck("compare", str(install.home))
    assert r.returncode == 3 and r.stderr == (
        "error: fencecheck compare needs the Python package pandas, which this install lacks: "
        "pip install 'fencecheck[compare]'\n")


def test_doctor_and_plugins_tell_a_core_install_what_it_lacks(install: Install) -> None:
    r = install.fencecheck("doctor")
    assert "Traceback" not in r.stderr and r.returncode in (0, 1), r.stderr
    assert "Python package pydantic: not installed: disables fencecheck run, matrix and " \
        "shrink" in r.stdout
    assert "fix: pip install 'fencecheck[run]'" in r.stdout
    assert "fix: pip install 'fencecheck[zookeeper]'" in r.stdout
    r = install.fencecheck("plugins")
    assert r.returncode == 0, r.stderr
    assert "faults: none on this install (they need pydantic: pip install 'fencecheck[run]')" \
        in r.stdout
    assert "  redis: " in r.stdout and "stale-write-accepted" in r.stdout


def test_the_pytest_plugin_runs_from_the_core_install(install: Install, tmp_path: Path) -> None:
    check_user_run(install.python, tmp_path)
