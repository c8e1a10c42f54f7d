"""The wheel is complete: every source file of every shipped client program and of the
kube-apiserver build (what workloads/clients/build.py and clusters/services/kube_build.py read from
the installed package) is in a wheel built from this checkout, so a pip install can build them and
hashes them as the checkout does."""

from __future__ import annotations

import zipfile
from pathlib import Path

from fencecheck.clusters.services import kube_build
from fencecheck.descriptors import catalog
from fencecheck.workloads.clients import build
from tests.api.test_clean_venv import _build_wheel

PKG = Path(build.__file__).resolve().parents[2]  # the folder fencecheck/ links into
# The file each recipe kind cannot build without, beside its sources.
MANIFESTS = {"go build": ["go.mod", "go.sum"], "mvn": ["pom.xml"], "npm": ["package.json"]}


def _wheel_path(path: Path) -> str:
    """Where a file of the checkout is in the wheel (fencecheck/workloads/... for workloads/...)."""
    return "fencecheck/" + path.resolve().relative_to(PKG).as_posix()


def _hashed_files(b: build.ClientBuild) -> list[Path]:
    """The files `source_hash` reads for a client: its sources, not other clients' nested ones."""
    src = build.HERE / b.source
    skip = {"node_modules", "classes", *build._nested(b)}
    return sorted(p for p in src.rglob("*")
                  if p.is_file() and p.relative_to(src).parts[0] not in skip
                  and "__pycache__" not in p.parts)


def test_the_wheel_has_every_client_source_and_build_manifest(tmp_path: Path) -> None:
    shipped = {c.name for c in catalog.clients().values()
               if c.spec.endswith(":ShippedClient")}
    assert shipped and shipped == set(build.BUILDS), "a shipped client has no build recipe"
    with zipfile.ZipFile(_build_wheel(tmp_path)) as whl:
        files = set(whl.namelist())
    missing: list[str] = []
    for name, b in build.BUILDS.items():
        sources = _hashed_files(b)
        assert sources, f"{name}: no source files in {b.source}"
        need = [_wheel_path(p) for p in sources]
        for kind, manifests in MANIFESTS.items():
            if b.recipe.startswith(kind):
                need += [_wheel_path(build.HERE / b.source / m) for m in manifests]
        missing += [f"{name}: {f}" for f in dict.fromkeys(need) if f not in files]
    missing += [f"kube-apiserver: {f}" for f in
                (_wheel_path(kube_build.MODULE / m) for m in ("go.mod", "go.sum"))
                if f not in files]
    assert not missing, "not in the wheel:\n" + "\n".join(missing)
