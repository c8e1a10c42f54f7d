"""The stdio client protocol: the documented example clients (Python and Node, extracted from
docs/client-protocol.md and run exactly as written) speak the shipped JSON Schemas against a real
redis-server; `StdioClient` turns a program that writes garbage, hangs or exits into an `info`
for that op and a fresh program; and through `fencecheck run` each such program still gives a
checkable history and a clean teardown."""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from fencecheck.workloads.base import DefiniteFailure, Indeterminate
from fencecheck.workloads.clients.build import NotBuilt, command
from fencecheck.workloads.clients.stdio import StdioClient
from tests.conftest import REPO, at_once, fc_namespaces, processes_matching, run_fencecheck
from tests.workloads.conftest import Server

SCHEMAS = REPO / "workloads" / "clients" / "schema"
DOC = REPO / "docs" / "client-protocol.md"


def doc_block(lang: str, doc: Path = DOC) -> str:
    """The one ```lang block of a doc (the test fails if there is not exactly one)."""
    blocks = re.findall(rf"^```{lang}\n(.*?)^```$", doc.read_text(), re.S | re.M)
    assert len(blocks) == 1, f"{doc}: {len(blocks)} {lang} blocks"
    return str(blocks[0])


def schema(name: str) -> jsonschema.Draft202012Validator:
    data = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(data)
    return jsonschema.Draft202012Validator(data)


def node_path() -> str:
    """Where Node finds ioredis: the node-redlock build's node_modules."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (scripts/build-clients.sh installs it)")
    try:
        script = Path(command("node-redlock")[1])
    except NotBuilt as e:
        pytest.skip(str(e))
    return str(script.parent / "node_modules")


def example_argv(lang: str, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    if lang == "python":
        path = tmp_path / "my_lock.py"
        path.write_text(doc_block("python"))
        return [sys.executable, str(path)], {}
    path = tmp_path / "my-lock.js"
    path.write_text(doc_block("js"))
    return ["node", str(path)], {"NODE_PATH": node_path()}


class Talk:
    """A raw conversation with a client program, checking each line against the schemas."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={**os.environ, **env})
        self.sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.request, self.reply = schema("request"), schema("reply")
        self.next_id = 1

    def __call__(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {"id": self.next_id, **request}
        self.next_id += 1
        self.request.validate(request)
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        assert self.sel.select(20), f"no reply to {request}"
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        self.reply.validate(reply)
        assert reply["id"] == request["id"]
        return reply

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b'{"id": 0, "op": "close"}\n')
        self.proc.stdin.close()
        return self.proc.wait(timeout=10)


@pytest.mark.parametrize("lang", ["python", "js"])
def test_the_documented_examples_speak_the_protocol(lang: str, tmp_path: Path,
                                                    redis_server: Server) -> None:
    argv, env = example_argv(lang, tmp_path)
    env["FENCECHECK_ENDPOINTS"] = redis_server.address
    a, b = Talk(argv, env), Talk(argv, env)
    try:
        first = a(op="acquire", lock="l", lease_ms=5000, timeout_ms=1000)
        assert first["status"] == "ok" and isinstance(first["token"], int)
        assert b(op="acquire", lock="l", lease_ms=5000, timeout_ms=200)["status"] == "fail"
        assert a(op="renew", lock="l", token=first["token"], lease_ms=5000)["status"] == "ok"
        assert b(op="release", lock="l", token=None)["status"] == "fail"  # not b's to release
        assert a(op="release", lock="l", token=first["token"])["status"] == "ok"
        second = b(op="acquire", lock="l", lease_ms=5000, timeout_ms=1000)
        assert second["status"] == "ok" and second["token"] > first["token"]
        assert a(op="renew", lock="l", token=first["token"], lease_ms=5000)["status"] == "fail"
    finally:
        assert a.close() == 0 and b.close() == 0


MISBEHAVING = '''
"""A stdio client that answers every request ok (token = its own count of requests), except the one
numbered sys.argv[2], where it does sys.argv[1]: garbage, hang or exit."""
import json, os, sys, time
mode, at = sys.argv[1], int(sys.argv[2])
for n, line in enumerate(sys.stdin, 1):
    req = json.loads(line)
    if n == at and mode == "garbage":
        print("this is not JSON", flush=True)
    elif n == at and mode == "hang":
        time.sleep(3600)
    elif n == at and mode == "exit":
        os._exit(7)
    print(json.dumps({"id": req["id"], "status": "ok", "token": n}), flush=True)
'''

ERRORS = {"garbage": "client-protocol", "hang": "client-timeout", "exit": "client-exited"}


@pytest.mark.parametrize("mode", sorted(ERRORS))
def test_a_misbehaving_program_is_an_info_and_is_restarted(mode: str, tmp_path: Path) -> None:
    prog = tmp_path / "bad.py"
    prog.write_text(MISBEHAVING)
    client = StdioClient({"cmd": [sys.executable, str(prog), mode, "2"],
                          "endpoints": ["127.0.0.1:1"], "op_timeout_s": 0.5, "grace_s": 0.2})
    first = client.program
    assert first is not None
    try:
        grant = client.acquire("l", 1000, 0.5)
        t = time.monotonic()
        with pytest.raises(Indeterminate) as e:
            client.renew(grant, 1000)
        assert e.value.error == ERRORS[mode]
        assert time.monotonic() - t < 3  # a hang costs the op's timeout, not more
        assert first.proc.poll() is not None, "the misbehaving program was not stopped"
        assert client.acquire("l", 1000, 0.5).token == 1  # a fresh program, counting anew
        assert client.restarts == 1
    finally:
        client.close()
    assert processes_matching(str(prog)) == []


def test_fail_is_definite_and_unknown_commands_are_refused(tmp_path: Path) -> None:
    prog = tmp_path / "no.py"
    prog.write_text('import json, sys\nfor line in sys.stdin:\n    r = json.loads(line)\n'
                    '    print(json.dumps({"id": r["id"], "status": "fail", "error": "busy"}),'
                    ' flush=True)\n')
    client = StdioClient({"cmd": f"{sys.executable} {prog}", "endpoints": ["127.0.0.1:1"]})
    try:
        with pytest.raises(DefiniteFailure) as e:
            client.acquire("l", 1000, 0.1)
        assert e.value.error == "busy" and client.restarts == 0
    finally:
        client.close()
    code = run_fencecheck("run", "--client-cmd", "no-such-lock-program x", "--store",
                          str(tmp_path / "store"), timeout=60)
    assert code.returncode == 3 and "no-such-lock-program" in code.stderr
    assert "Traceback" not in code.stderr


EVIDENT = '''
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    ev = {"identity": "me", "steps": [{"op": "write", "at_ns": -5000000}]}
    status = "ok" if r["op"] == "acquire" else "fail"
    print(json.dumps({"id": r["id"], "status": status, "token": 7, "error": "not-held",
                      "evidence": ev}), flush=True)
'''


def test_a_programs_evidence_reaches_the_history_on_the_historys_clock(tmp_path: Path) -> None:
    # The reply's evidence (docs/client-protocol.md) goes into the op's value under "evidence",
    # on ok and on fail alike; an entry's at_ns (before the request was read, here) becomes
    # `time`, ns since the run's t0, as the event log writes it.
    from fencecheck.workloads.eventlog import EventLog, read_log
    from fencecheck.workloads.evidence import with_evidence

    prog = tmp_path / "evident.py"
    prog.write_text(EVIDENT)
    client = StdioClient({"cmd": f"{sys.executable} {prog}", "endpoints": ["127.0.0.1:1"]})
    t0 = time.monotonic_ns() - 10**9  # the run began a second ago
    try:
        sent = time.monotonic_ns()
        grant = client.acquire("l", 1000, 1.0)
        with pytest.raises(DefiniteFailure) as e:
            client.release(grant)
    finally:
        client.close()
    assert grant.evidence is not None
    (entry,) = grant.evidence["evidence"]["steps"]
    assert sent - 5_000_000 <= entry["mono_ns"] <= time.monotonic_ns() and "at_ns" not in entry
    assert e.value.evidence is not None and e.value.evidence["identity"] == "me"
    schema("reply").validate({"id": 1, "status": "fail", "evidence": {"steps": []}})
    with EventLog(tmp_path / "log.jsonl", t0) as log:
        log.write(0, "ok", "acquire", {"lock": "l", "token": 7, **grant.evidence})
        log.write(0, "fail", "release", with_evidence({"lock": "l"}, e.value.evidence))
    got = [ev["value"] for ev in read_log(tmp_path / "log.jsonl")]
    assert got[0] is not None and got[1] is not None
    assert got[0]["evidence"]["steps"][0]["time"] == entry["mono_ns"] - t0
    assert got[1]["evidence"]["identity"] == "me" and "time" in got[1]["evidence"]["steps"][0]


WRAPPER = '''
"""The documented Python example, misbehaving (sys.argv[1]) on every 6th request it reads."""
import os, runpy, sys, time
mode, example = sys.argv[1], sys.argv[2]
stdin = sys.stdin
def requests():
    for n, line in enumerate(stdin, 1):
        if n % 6 == 0 and mode == "garbage":
            print("garbage", flush=True)
        elif n % 6 == 0 and mode == "hang":
            time.sleep(3600)
        elif n % 6 == 0 and mode == "exit":
            os._exit(1)
        yield line
sys.stdin = requests()
runpy.run_path(example, run_name="__main__")
'''


@pytest.mark.netns
@pytest.mark.usefixtures("no_leftovers")
def test_a_run_with_a_misbehaving_program_is_checked_and_torn_down(tmp_path: Path) -> None:
    example = tmp_path / "my_lock.py"
    example.write_text(doc_block("python"))
    wrapper = tmp_path / "bad.py"
    wrapper.write_text(WRAPPER)
    store = tmp_path / "store"
    modes = sorted(ERRORS)  # one run per way of misbehaving, side by side

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return run_fencecheck(
            "run", "--backend", "redis", "--nemesis", "none", "--time-limit", "10", "--seed",
            "1", "--store", str(store), "--name", mode, "--concurrency", "3", "--client-cmd",
            f"{sys.executable} {wrapper} {mode} {example}", timeout=180)

    for mode, r in zip(modes, at_once(*(lambda m=m: run(m) for m in modes)), strict=True):
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 0, (mode, r.stdout + r.stderr)  # no faults: the lock is fine
        run_dir = (store / mode / "latest").resolve()
        history = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
        errors = [e.get("error") for e in history if e["type"] == "info"]
        assert ERRORS[mode] in errors, mode
        oks = [e for e in history if e["type"] == "ok" and e["f"] == "acquire"]
        assert len(oks) > len(errors), mode  # restarted programs went on taking the lock
        assert json.loads((run_dir / "results.json").read_text())["valid"] is True
        logs = "".join(p.read_text() for p in run_dir.glob("nodes/c*/worker.log"))
        assert logs.count("starting client program") > 3, mode
        test = json.loads((run_dir / "test.json").read_text())
        assert not fc_namespaces(test["run_id"])
    assert processes_matching(str(wrapper)) == []


def test_client_cmd_is_the_stdio_client_in_runs_and_matrix_rows(tmp_path: Path) -> None:
    from fencecheck.fleet.matrix import load_matrix
    from fencecheck.run.config import ConfigError, make_config

    cfg = make_config(backend="etcd", client_cmd="node my-lock.js", store=tmp_path / "s")
    assert cfg.client_name == "stdio" and cfg.client_options["cmd"] == "node my-lock.js"
    with pytest.raises(ConfigError, match="client_cmd"):
        make_config(client="etcd", client_cmd="node my-lock.js", store=tmp_path / "s")
    matrix = tmp_path / "m.toml"
    matrix.write_text('[[row]]\nname = "mine"\nbackend = "zookeeper"\n'
                      'client_cmd = "java -jar my-lock.jar"\nexpect = "must-pass"\n')
    row = load_matrix(matrix, tmp_path / "store").rows[0]
    assert row.configs[0].client_name == "stdio"
    assert row.configs[0].client_options["cmd"] == "java -jar my-lock.jar"


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _stopped(pid: int, want: bool) -> bool:
    """Whether pid reaches (want) or leaves (not want) the stopped state within 2 s: a signal
    is delivered asynchronously."""
    deadline = time.monotonic() + 2
    while (_state(pid) == "T") != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"
HOLDER = '''
import sys, time
from fencecheck.workloads.clients.stdio import StdioClient
c = StdioClient({"cmd": [sys.executable, sys.argv[1]], "endpoints": ["127.0.0.1:1"]})
assert c.program is not None
print(c.program.proc.pid, flush=True)
time.sleep(3600)
'''


def test_the_program_is_paused_and_killed_with_its_worker(tmp_path: Path) -> None:
    from fencecheck.clusters.faults.nemesis import process_target

    (tmp_path / "sleeper.py").write_text(SLEEPER)
    (tmp_path / "holder.py").write_text(HOLDER)
    worker = subprocess.Popen([sys.executable, str(tmp_path / "holder.py"),
                               str(tmp_path / "sleeper.py")], stdout=subprocess.PIPE, cwd=REPO)
    try:
        assert worker.stdout is not None
        program = int(worker.stdout.readline())
        target = process_target("c1", worker.pid)
        target.pause()
        assert _stopped(worker.pid, True) and _stopped(program, True)  # a GC pause of both
        target.resume()
        assert _stopped(worker.pid, False) and _stopped(program, False)
        worker.kill()  # the worker dies without a word: its program must not outlive it
        worker.wait()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{program}") and _state(program) != "Z":
            assert time.monotonic() < deadline, "the program outlived its SIGKILLed worker"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        worker.wait()
