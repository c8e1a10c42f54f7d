"""Options that belong to what they configure (fencecheck/run/options.py): each owner's options
checked against its descriptor's model and kept whole by owner, the flat options of earlier
releases read as aliases (old command lines, matrix rows and test.json files), a bad option one
line naming the flag and the field, and `--help` and `fencecheck schema config` derived from
the models."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from fencecheck.cli.app import app
from fencecheck.nemesis.faults.base import lease_hold_s
from fencecheck.nemesis.faults.partition import PartitionSettings
from fencecheck.nemesis.faults.pause import PauseSettings
from fencecheck.nemesis.replay import replay_config
from fencecheck.run.config import (
    ConfigError,
    OptionError,
    RunConfig,
    config_schema,
    fault_settings,
    make_config,
)
from fencecheck.run.workers import WorkerProcess, worker_config
from tests.conftest import REPO

EARLIER = REPO / "tests" / "data" / "earlier"

runner = CliRunner()


def test_each_owner_keeps_its_options_whole() -> None:
    cfg = make_config(backend="redlock", backend_options={"persistence": "everysec"},
                      workload_options={"think_ms": 5}, nemesis=("pause", "kill"),
                      fault_options={"pause": {"hold_s": "3,4"}})
    assert cfg.backend_options == {"persistence": "everysec"}
    assert cfg.workload_options == {"think_ms": 5.0, "idle_ms": 10.0, "acquire_timeout_s": 5.0,
                                    "writes_per_section": 3, "renew": False}
    assert cfg.runtime_options == {"subnet": None}
    assert cfg.fault_options == {
        "pause": {"target": "holder", "delay_s": None, "hold_s": [3.0, 4.0]},
        "kill": {"target": "holder", "delay_s": None}}
    assert cfg.settings("backend") == {"persistence": "everysec"}
    assert cfg.pause_duration_s == (3.0, 4.0)
    # what test.json records is what a replay reads back
    again = RunConfig.model_validate(cfg.model_dump(mode="json"))
    assert again == cfg


@pytest.mark.parametrize(("legacy", "owner", "expected"), [
    ({"persistence": "always"}, "backend_options", {"persistence": "always"}),
    ({"think_ms": 7, "writes_per_section": 2, "renew": True}, "workload_options",
     {"think_ms": 7.0, "writes_per_section": 2, "renew": True, "idle_ms": 10.0,
      "acquire_timeout_s": 5.0}),
    ({"subnet": "10.9.0.0/24"}, "runtime_options", {"subnet": "10.9.0.0/24"}),
])
def test_the_flat_options_of_earlier_releases_move_to_their_owner(
        legacy: dict[str, object], owner: str, expected: dict[str, object]) -> None:
    assert getattr(make_config(**legacy), owner) == expected


def test_the_ssh_options_go_to_the_runtime() -> None:
    cfg = make_config(runtime="ssh", hosts=("a", "b"), ssh_user="me", ssh_port=2222,
                      ssh_key=Path("/k"), sudo=True, ssh_accept_unknown=True)
    assert cfg.runtime_options == {"hosts": ["a", "b"], "user": "me", "key": "/k", "port": 2222,
                                   "sudo": True, "accept_unknown": True, "known_hosts": None}
    assert cfg.settings("runtime")["key"] == Path("/k")
    with pytest.raises(ConfigError, match=r"runtime_options.hosts: .*--runtime ssh needs hosts"):
        make_config(runtime="ssh")


@pytest.mark.parametrize(("target", "pause", "kill", "waits"), [
    ("holder", "holder", "holder", True),
    ("random", "random", "random", False),
    ("server", "server", "random", False),  # only the pause fault can aim at a server
])
def test_pause_target_sets_every_faults_target(target: str, pause: str, kill: str,
                                               waits: bool) -> None:
    cfg = make_config(nemesis=("pause", "kill"), pause_target=target)
    assert cfg.fault_target("pause") == pause and cfg.fault_target("kill") == kill
    assert cfg.pause_target == pause
    assert (cfg.fault_target("kill") == "holder") is waits


def test_a_faults_own_target_and_hold() -> None:
    cfg = make_config(nemesis=("pause", "partition"),
                      fault_options={"partition": {"target": "random"}}, fault_duration_s=(1, 2))
    assert cfg.fault_target("pause") == "holder" and cfg.fault_target("partition") == "random"
    settings = fault_settings(cfg, "pause")
    assert isinstance(settings, PauseSettings) and settings.hold_s == (1.0, 2.0)
    shaped = fault_settings(make_config(nemesis=("partition",), fault_options={
        "partition": {"shapes": "one-node, halves"}}), "partition")
    assert isinstance(shaped, PartitionSettings) and shaped.shapes == ("one-node", "halves")
    default = fault_settings(make_config(nemesis=("partition",)), "partition")
    assert isinstance(default, PartitionSettings) and "client-isolate" in default.shapes
    plain = make_config(nemesis=("pause",), lease_ms=1000)
    assert plain.pause_duration_s == lease_hold_s(1000) == (2.0, 3.5)


@pytest.mark.parametrize(("given", "named"), [
    ({"backend_options": {"persistence": "sometimes"}}, "backend_options.persistence: Input"),
    ({"backend_options": {"nope": 1}}, "backend_options.nope: backend redis has no such option"),
    ({"backend": "etcd", "persistence": "always"},
     "backend_options.persistence: backend etcd has no such option (given as persistence)"),
    ({"fault_options": {"partition": {"target": "random"}}},
     "fault_options.partition: partition is not a fault of this run (--nemesis pause)"),
    ({"fault_options": {"pause": {"target": "nobody"}}}, "fault_options.pause.target: Input"),
    ({"runtime_options": {"port": 22}}, "runtime_options.port: runtime netns has no such"),
    ({"workload": "cron", "writes_per_section": 5},
     "workload_options.writes_per_section: workload cron has no such option"),
    ({"think_ms": 5, "workload_options": {"think_ms": 6}},
     "workload_options.think_ms: given twice"),
])
def test_a_bad_option_names_its_owner_and_field(given: dict[str, object], named: str) -> None:
    with pytest.raises(OptionError) as e:
        make_config(**given)
    assert str(e.value).startswith(f"bad configuration: {named}"), str(e.value)


def test_an_old_default_its_owner_lacks_is_dropped() -> None:
    """Every earlier test.json recorded every flat option, `persistence: off` for etcd too."""
    cfg = make_config(backend="etcd", persistence="off", workload="leader", renew=False,
                      writes_per_section=3, idempotent=False)
    assert cfg.backend_options == {} and "renew" not in cfg.workload_options


def _earlier(name: str, tmp_path: Path) -> RunConfig:
    """The configuration in a test.json the previous release wrote (tests/data/earlier: made by
    main at d50a1e5, every option flat), replayed as `--replay` reads it."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    shutil.copy(EARLIER / f"{name}.json", run_dir / "test.json")
    (run_dir / "schedule.json").write_text('{"format": 1, "steps": []}')
    return replay_config(run_dir, tmp_path / "store")


def test_an_earlier_test_json_replays_with_its_options_by_owner(tmp_path: Path) -> None:
    cfg = _earlier("redis-everysec-random", tmp_path)
    assert cfg.backend_options == {"persistence": "everysec"}
    assert cfg.runtime_options == {"subnet": "10.9.0.0/24"}
    assert cfg.workload_options["think_ms"] == 7 and cfg.workload_options["writes_per_section"] == 2
    assert cfg.fault_target("pause") == cfg.fault_target("kill") == "random"
    assert cfg.fault_duration_s == (0.3, 1.0) and cfg.store == tmp_path / "store"
    ssh = _earlier("etcd-ssh", tmp_path)
    assert ssh.runtime_options == {"hosts": ["h1", "h2", "h3", "h4"], "user": "fc",
                                   "key": "/keys/id", "port": 2222, "sudo": True,
                                   "accept_unknown": False, "known_hosts": "/keys/known"}
    assert ssh.backend_options == {} and ssh.workload_options["renew"] is True
    cron = _earlier("cron-server", tmp_path)
    assert cron.workload_options == {"think_ms": 100.0, "idle_ms": 10.0,
                                     "acquire_timeout_s": 5.0, "idempotent": True}
    assert cron.fault_target("pause") == "server" and cron.client == "shedlock"


def test_the_worker_gets_its_workloads_options(tmp_path: Path) -> None:
    cfg = make_config(workload="cron", idempotent=True, think_ms=100, store=tmp_path)
    w = WorkerProcess("c1", None, tmp_path / "w.json", tmp_path / "e.jsonl")  # type: ignore[arg-type]
    wc = worker_config(cfg, 0, w, {}, {}, 0)
    assert wc.idempotent and wc.think_ms == 100.0 and wc.workload == "cron"
    assert wc.options == cfg.workload_options


def _one_line(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 3, r.output
    text = r.output.strip()
    assert "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize(("args", "named"), [
    (["--fault-opt", "pause.target=bogus"], "--fault-opt pause.target: Input should be"),
    (["--backend-opt", "nope=1"], "--backend-opt nope: backend redis has no such option"),
    (["--persistence", "bogus"], "--backend-opt persistence: Input should be"),
    (["--runtime", "ssh", "--runtime-opt", "hosts=a", "--runtime-opt", "port=x"],
     "--runtime-opt port: Input should be a valid integer"),
    (["--nemesis", "partition", "--fault-opt", "partition.shapes=halves,moon"],
     "--fault-opt partition.shapes: unknown shape(s) ['moon']; known: one-node"),
    (["--fault-opt", "pause"], "--fault-opt: expected KEY=VALUE"),
    (["--fault-opt", "target=holder"], "--fault-opt: expected FAULT.KEY=VALUE"),
    (["--workload-opt", "think_ms=-1"], "--workload-opt think_ms: Input should be greater"),
])
def test_a_bad_option_on_the_command_line_names_the_flag(args: list[str], named: str,
                                                         tmp_path: Path) -> None:
    text = _one_line(["run", "--store", str(tmp_path), *args])
    assert named in text, text
    assert list(tmp_path.iterdir()) == []


def test_help_lists_each_owners_options_from_its_model() -> None:
    r = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.output).split())
    for shown in ("redis, redlock, redis-sentinel: persistence=off|everysec|always (default off)",
                  "ssh: hosts=A,B,...", "port=N (default 22)",
                  "pause: target=holder|random|server (default holder), delay_s=LOW,HIGH, "
                  "hold_s=LOW,HIGH",
                  "lock: think_ms=N (default 20.0)", "cron: think_ms=N",
                  "idempotent=true|false (default false)", "--pause-target", "--think-ms"):
        assert shown in text, shown


def test_the_config_schema_has_every_owners_model_and_validates_a_config(
        tmp_path: Path) -> None:
    schema = config_schema()
    for key in ("backend.redis", "runtime.ssh", "workload.cron", "fault.pause", "fault.kill"):
        assert key in schema["$defs"], key
    assert schema["$defs"]["backend.redis"]["properties"]["persistence"]["enum"] == [
        "off", "everysec", "always"]
    good = make_config(nemesis=("pause", "kill"), persistence="always", store=tmp_path)
    jsonschema.validate(good.model_dump(mode="json"), schema)
    bad = {**good.model_dump(mode="json"), "backend_options": {"persistence": "sometimes"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    r = runner.invoke(app, ["schema", "config"])
    assert r.exit_code == 0 and json.loads(r.output) == json.loads(json.dumps(schema))
