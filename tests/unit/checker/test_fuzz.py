"""Fuzzing `fencecheck check` with mutated histories: any input ends in exit 0, 1, 2 or 3 with no
traceback, and input that is not JSON lines is exit 3.

Mutants are built with a fixed seed from the shipped histories (tests/data), as JSONL and as
Jepsen EDN: bytes flipped, inserted (invalid UTF-8, NUL, escape sequences, NaN, 1e999, huge
integers, deep nesting), deleted, lines swapped or repeated, files cut short, and fields of a
decoded line replaced by values of the wrong type or range. The run is bounded in time.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fencecheck.cli.app import app
from tests.conftest import REPO

DATA = REPO / "tests" / "data"
SEED = 20261201
BUDGET_S = 40.0  # the mutants stop here, whatever is left
JSONL_MUTANTS = 500
EDN_MUTANTS = 200

JUNK_BYTES = [b"\xff", b"\xc3", b"\x00", b"\x1b[31m", b"[", b"{", b"}", b"]", b'"', b",", b"\n",
              b"NaN", b"-Infinity", b"1e999", b"-1", b"99999999999999999999999999999", b"[/x]",
              b"\\u0000", b"\\ud800", b" ", b":", b"#_", b"#{", b"\\", b"nil"]
JUNK_VALUES: list[Any] = [None, True, -1, -0.5, 1e308, 10**40, -(10**40), "", "x", "[/x]",
                          "\x1b[2J", [], {}, [1, [2]], {"lock": 5}, float("nan"), float("inf"),
                          "nemesis", 0]


def seeds() -> list[bytes]:
    files = sorted((DATA / "histories").glob("*.jsonl")) + sorted(DATA.glob("runs/*/history.jsonl"))
    return [p.read_bytes() for p in files if p.stat().st_size]


def edn(v: Any) -> str:
    if v is None:
        return "nil"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{" + ", ".join(f":{k} {edn(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + " ".join(edn(x) for x in v) + "]"
    return json.dumps(v)


def to_edn(jsonl: bytes) -> bytes:
    out = []
    for line in jsonl.decode().splitlines():
        d = json.loads(line)
        p = ":nemesis" if d["process"] == "nemesis" else str(d["process"])
        out.append(f"{{:index {d['index']}, :time {d['time']}, :process {p}, :type :{d['type']}, "
                   f":f :{d['f']}, :value {edn(d.get('value'))}}}")
    return ("\n".join(out) + "\n").encode()


DEEP = "<nested 5000 deep>"  # replaced in the text: json.dumps itself cannot write it


def mutate(rng: random.Random, data: bytes, structural: bool) -> bytes:
    lines = data.split(b"\n")
    kind = rng.randrange(8 if structural else 6)
    if kind == 0 and data:  # flip a byte
        i = rng.randrange(len(data))
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    if kind == 1:  # insert junk
        i = rng.randrange(len(data) + 1)
        return data[:i] + rng.choice(JUNK_BYTES) + data[i:]
    if kind == 2 and data:  # delete a span
        i = rng.randrange(len(data))
        return data[:i] + data[i + rng.randrange(1, 40):]
    if kind == 3 and len(lines) > 2:  # swap two lines
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    if kind == 4:  # repeat a line
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return b"\n".join(lines)
    if kind == 5:  # cut short
        return data[: rng.randrange(len(data) + 1)]
    # structural: decode one line, put a wrong value in a field or in its value
    i = rng.randrange(len(lines))
    try:
        d = json.loads(lines[i])
    except ValueError:
        return data
    target = d.get("value") if kind == 7 and isinstance(d.get("value"), dict) else d
    keys = [*target, "lock", "lease_ms", "token", "attempt_ns", "key"]
    key = rng.choice(keys)
    if rng.random() < 0.15:
        target.pop(key, None)
    else:
        target[key] = DEEP if rng.random() < 0.05 else rng.choice(JUNK_VALUES)
    text = json.dumps(d).replace(json.dumps(DEEP), "[" * 5000 + "1" + "]" * 5000)
    lines[i] = text.encode()
    return b"\n".join(lines)


def malformed_jsonl(data: bytes) -> bool:
    """Not JSON lines at all: the checker must say exit 3, whatever it thinks of the rest."""
    def refuse(c: str) -> Any:
        raise ValueError(c)

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()  # blank lines at the very end are the end of the history
    for line in lines:
        if not line.strip():
            return True  # a blank line before another event
        try:
            if not isinstance(json.loads(line, parse_constant=refuse,
                                         object_pairs_hook=unique), dict):
                return True
        except (ValueError, RecursionError):
            return True
    return False


def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({k for k, _ in pairs}) != len(pairs):
        raise ValueError("a key twice in one object")
    return dict(pairs)


def test_mutated_histories_exit_0_to_3_without_a_traceback(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    runner = CliRunner()
    base = seeds()
    started = time.monotonic()
    plan = [("jsonl", n) for n in range(JSONL_MUTANTS)] + [("edn", n) for n in range(EDN_MUTANTS)]
    seen: dict[int, int] = {}
    tried = 0
    for fmt, n in plan:
        if time.monotonic() - started > BUDGET_S:
            break
        seed = rng.choice(base)
        if fmt == "edn":
            seed = to_edn(seed)
        data = seed
        for _ in range(rng.randint(1, 3)):
            data = mutate(rng, data, structural=fmt == "jsonl")
        path = tmp_path / f"m{n}.{fmt}"
        path.write_bytes(data)
        res = runner.invoke(app, ["check", "--format", fmt, "--time-limit", "5", str(path)])
        tried += 1
        out = res.output
        assert res.exit_code in (0, 1, 2, 3), (fmt, n, res.exit_code, out, data[:300])
        assert res.exception is None or isinstance(res.exception, SystemExit), \
            (fmt, n, repr(res.exception), data[:300])
        assert "Traceback" not in out, (fmt, n, out)
        if fmt == "jsonl" and malformed_jsonl(data):
            assert res.exit_code == 3, (n, out, data[:300])
        seen[res.exit_code] = seen.get(res.exit_code, 0) + 1
    assert tried >= 100, f"only {tried} mutants in {BUDGET_S} s"
    assert seen.get(3, 0) > 0 and len(seen) >= 3, seen  # the mutants reach several outcomes
