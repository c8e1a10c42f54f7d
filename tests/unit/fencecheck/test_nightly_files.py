"""The shipped ways to run the nightly matrix sharded (examples/github-actions-nightly.yml,
examples/k8s/): the files parse, their shard expressions cover 0..N-1 exactly once and agree with
the job's own fan-out, and every fencecheck command in them is one the CLI accepts (parsed by the
CLI's own click parser, without running it)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import typer
import yaml

from fencecheck.cli.app import app
from tests.conftest import REPO

EXAMPLES = REPO / "examples"


def _commands(script: str) -> Iterator[list[str]]:
    """The argument lists after `fencecheck` in a shell script (one command a line)."""
    for line in script.splitlines():
        words = shlex.split(line, comments=True)
        for i, w in enumerate(words):
            if w == "fencecheck" or w.endswith("/fencecheck"):
                args = words[i + 1:]
                cut = next((k for k, a in enumerate(args) if a in ("||", "&&", ";")), len(args))
                yield args[:cut]
                break


def _accepted(args: list[str]) -> click.Context:
    """Parse `fencecheck ARGS` with the CLI's own parser; a bad option raises."""
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    ctx = click.Context(group, info_name="fencecheck")
    cmd = group.get_command(ctx, args[0])  # the group has no options of its own before it
    assert cmd is not None, f"no command {args[0]!r}"
    return cmd.make_context(args[0], list(args[1:]), parent=ctx)


def _shards(commands: list[list[str]]) -> list[str]:
    return [a[a.index("--shard") + 1] for a in commands if "--shard" in a]


def _covers(shards: list[str], count: int) -> None:
    pairs = [tuple(int(x) for x in s.split("/")) for s in shards]
    assert sorted(i for i, _ in pairs) == list(range(count)), shards
    assert {n for _, n in pairs} == {count}, shards


def test_github_actions_shards_cover_the_matrix_and_merge() -> None:
    wf = yaml.safe_load((EXAMPLES / "github-actions-nightly.yml").read_text())
    shard_job, merge_job = wf["jobs"]["shard"], wf["jobs"]["merge"]
    values = shard_job["strategy"]["matrix"]["shard"]
    scripts = [s["run"] for s in shard_job["steps"] if "run" in s]
    commands = []
    for v in values:  # the workflow as each runner sees it
        for script in scripts:
            commands += list(_commands(script.replace("${{ matrix.shard }}", str(v))))
    shards = _shards(commands)
    assert shards and len(shards) == len(values)
    _covers(shards, len(values))
    merge_cmds = [c for s in merge_job["steps"] if "run" in s for c in _commands(s["run"])]
    assert [c[0] for c in merge_cmds] == ["merge"]
    assert merge_job["needs"] == "shard" and merge_job["if"] == "always()"
    uploads = [s for s in shard_job["steps"] if str(s.get("uses", "")).startswith(
        "actions/upload-artifact")]
    download = next(s for s in merge_job["steps"] if str(s.get("uses", "")).startswith(
        "actions/download-artifact"))
    assert uploads and download["with"]["pattern"] == "fencecheck-shard-*"
    assert uploads[0]["with"]["name"].startswith("fencecheck-shard-")
    for c in [*commands, *merge_cmds]:
        _accepted(c)
    # the shards and the merge read the same matrix file
    assert {c[1] for c in commands if c[0] == "matrix"} == {merge_cmds[0][1]}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in container.get("env", [])}


def _expand(text: str, env: dict[str, str]) -> str:
    """$NAME and ${NAME} as the shell expands them, $(NAME) as Kubernetes does in command and
    args; an unknown name is left as it is."""
    return re.sub(r"\$(?:\{(\w+)\}|\((\w+)\)|(\w+))",
                  lambda m: env.get(m.group(1) or m.group(2) or m.group(3), m.group(0)), text)


def test_kubernetes_indexed_job_covers_the_matrix_and_merges() -> None:
    docs = _docs(EXAMPLES / "k8s" / "nightly" / "nightly-job.yaml")
    job = next(d for d in docs if d["kind"] == "Job")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    count = spec["completions"]
    assert spec["parallelism"] == count
    container = spec["template"]["spec"]["containers"][0]
    assert container["securityContext"]["privileged"] is True
    env = _env(container)
    assert env["SHARDS"] == str(count)  # the shard count the pods are told is the Job's
    script = "\n".join(container["args"])
    commands = []
    for index in range(count):  # Kubernetes sets JOB_COMPLETION_INDEX to 0..completions-1
        commands += list(_commands(_expand(script, {**env, "JOB_COMPLETION_INDEX": str(index)})))
    shards = _shards(commands)
    _covers(shards, count)
    for c in commands:
        _accepted(c)
    claim = spec["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert any(d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == claim
               for d in docs)

    merge = _docs(EXAMPLES / "k8s" / "merge" / "merge-job.yaml")[0]
    mspec = merge["spec"]["template"]["spec"]
    argv = [_expand(a, _env(mspec["containers"][0])) for a in mspec["containers"][0]["command"]]
    assert argv[:2] == ["fencecheck", "merge"]
    ctx = _accepted(argv[1:])
    assert Path(ctx.params["file"]) == Path(commands[0][1])  # the file the shards ran
    assert mspec["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
    # the merge reads where the shards write
    mount = mspec["containers"][0]["volumeMounts"][0]["mountPath"]
    stores = [c[c.index("--store") + 1] for c in commands if c[0] == "matrix"]
    assert all(s.startswith(mount + "/") for s in stores)
    assert any(Path(p) == Path(mount) for p in ctx.params["paths"])


def test_a_bad_option_is_caught_by_the_parser() -> None:
    with pytest.raises(click.UsageError):
        _accepted(["matrix", "examples/nightly.toml", "--shards", "0/4"])


def test_the_local_overlays_change_only_the_image_and_the_results_volume() -> None:
    """examples/k8s/local/: the same Jobs on fencecheck's one-node cluster (`fencecheck kube
    up`), by kustomize: the image (imported, never pulled) and the results volume differ."""
    k8s = EXAMPLES / "k8s"
    node = yaml.safe_load((k8s / "local" / "node" / "kustomization.yaml").read_text())
    assert node["kind"] == "Component"
    (image,) = node["images"]
    (patch,) = node["patches"]
    assert patch["target"] == {"kind": "Job"}
    ops = {o["path"]: o for o in yaml.safe_load(patch["patch"])}
    assert set(ops) == {"/spec/template/spec/containers/0/imagePullPolicy",
                        "/spec/template/spec/volumes/0"}
    assert ops["/spec/template/spec/containers/0/imagePullPolicy"]["value"] == "Never"
    volume = ops["/spec/template/spec/volumes/0"]["value"]
    assert volume["name"] == "results" and "hostPath" in volume
    for name in ("nightly", "merge"):
        base = yaml.safe_load((k8s / name / "kustomization.yaml").read_text())
        job = next(d for r in base["resources"] for d in _docs(k8s / name / r)
                   if d["kind"] == "Job")
        spec = job["spec"]["template"]["spec"]
        # the patch replaces the results volume, the image transformer the image
        assert spec["volumes"][0]["name"] == "results"
        assert spec["containers"][0]["image"].split(":")[0] == image["name"]
        local = yaml.safe_load((k8s / "local" / name / "kustomization.yaml").read_text())
        assert local["resources"] == [f"../../{name}"] and local["components"] == ["../node"]
    local = yaml.safe_load((k8s / "local" / "nightly" / "kustomization.yaml").read_text())
    (drop,) = local["patches"]
    claim = yaml.safe_load(drop["patch"])
    assert claim["$patch"] == "delete" and claim["kind"] == "PersistentVolumeClaim"


def test_the_merge_job_fails_naming_a_shard_that_wrote_nothing(tmp_path: Path) -> None:
    """The merge Job's own command, on a results volume where shards 0 and 1 of 3 wrote their
    manifests and shard 2 (killed on both attempts) none: exit 3, one line naming shard 2/3."""
    from typer.testing import CliRunner

    from fencecheck.fleet.shard import file_hash
    from fencecheck.records import shard

    matrix = tmp_path / "m.toml"
    matrix.write_text((REPO / "benchmarks" / "k8s_job.toml").read_text())
    results = tmp_path / "results"
    for i in (0, 1):
        out = results / f"shard-{i}" / "_matrix" / "nightly"
        out.mkdir(parents=True)
        shard.write(out / "shard.json", shard.ShardManifest(
            matrix=matrix.name, matrix_sha256=file_hash(matrix),
            shard=i, of=3, assigned=[], runs=[]))
    merge = _docs(EXAMPLES / "k8s" / "merge" / "merge-job.yaml")[0]
    container = merge["spec"]["template"]["spec"]["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    env = {**_env(container), "MATRIX": str(matrix)}
    argv = [_expand(a, env).replace(mount, str(results)) for a in container["command"]]
    r = CliRunner().invoke(app, argv[1:])
    assert r.exit_code == 3, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.strip()]
    assert "shard 2/3 missing" in line and "Traceback" not in r.output
    assert not (results / "merged").exists()
