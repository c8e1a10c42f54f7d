"""The fast path of the history reader (checker/fastload.py) reads exactly what the exact,
line-at-a-time reader reads, and hands anything out of the ordinary to it, so that messages and
verdicts are the exact reader's. Every test here runs twice: with the pairing loop compiled from
checker/_pairing.c and with fastload's Python loop, its reference."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.gen_history import SimConfig, simulate
from fencecheck.checker import fastload
from fencecheck.checker.base import HistoryError, Op
from fencecheck.checker.fastload import fast_ops
from fencecheck.checker.history import load_ops
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "histories"
CORPUS = Path("/work/shared/corpus")
SHIPPED = sorted(DATA.glob("*.jsonl")) + (sorted(CORPUS.rglob("*.jsonl")) if CORPUS.is_dir()
                                          else [])


@pytest.fixture(autouse=True, params=["c", "python"])
def loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which pairing loop fast_ops runs: _pairing's (built by scripts/setup.sh, as on any
    machine with a C compiler), or the Python one it stands in for."""
    if request.param == "python":
        monkeypatch.setattr(fastload, "NATIVE", None)
    else:
        assert fastload.NATIVE is not None, "checker/_pairing.c is not built (setup.py)"
    return str(request.param)


def exact_ops(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Op]:
    with monkeypatch.context() as m:
        m.setattr("fencecheck.checker.history.fast_ops", lambda _: None)
        return load_ops(path)


def _write(path: Path, events: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    return path


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_histories_read_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = fast_ops(path)
    assert fast is not None, "a well-formed shipped history should take the fast path"
    assert fast == exact_ops(path, monkeypatch)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cut=st.booleans(), p_info=st.sampled_from([0.0, 0.1]),
       lease_ms=st.sampled_from([None, 20, 200]))
def test_simulated_histories_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           seed: int, cut: bool, p_info: float,
                                           lease_ms: int | None) -> None:
    cfg = SimConfig(processes=4, locks=2, events=200, cut=cut, p_info=p_info, lease_ms=lease_ms,
                    p_pause=0.1)
    path = _write(tmp_path / f"sim-{seed}.jsonl", simulate(cfg, random.Random(seed)))
    fast = fast_ops(path)
    assert fast is not None
    assert fast == exact_ops(path, monkeypatch)


@pytest.mark.parametrize("block", [7, 100, 4096, 1 << 16])
@pytest.mark.parametrize("ending", ["\n", "", "\n\n \n"])
def test_block_boundaries_do_not_change_what_is_read(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     block: int, ending: str) -> None:
    """The file is read in blocks completed to the end of a line: a block boundary anywhere
    (mid-line, at a line's end, in trailing blank lines) reads as one block would."""
    cfg = SimConfig(processes=4, locks=2, events=300, p_info=0.1, lease_ms=200)
    text = "".join(json.dumps(e, separators=(",", ":")) + "\n"
                   for e in simulate(cfg, random.Random(11)))
    path = tmp_path / "h.jsonl"
    path.write_text(text[:-1] + ending)
    exact = exact_ops(path, monkeypatch)
    monkeypatch.setattr("fencecheck.checker.fastload._BLOCK", block)
    fast = fast_ops(path)
    assert fast is not None and fast == exact


GOOD = [
    '{"index":0,"time":1,"process":0,"type":"invoke","f":"acquire","value":{"lock":"l"}}',
    '{"index":1,"time":2,"process":0,"type":"ok","f":"acquire","value":{"token":1}}',
]
RELEASE = '{"index":2,"time":3,"process":0,"type":"invoke","f":"release","value":{"lock":"l"}}'
WRITE = ('{"index":0,"time":1,"process":0,"type":"invoke","f":"write",'
         '"value":{"key":"k","lock":"l","token":1,"value":1}}\n'
         '{"index":1,"time":2,"process":0,"type":"ok","f":"write","value":null}\n')


@pytest.mark.parametrize("text, where", [
    (GOOD[0] + "\n\n" + GOOD[1] + "\n", ":2: empty line"),  # a blank line before the end
    (GOOD[0] + " " + GOOD[1] + "\n", ":1: "),  # two objects on one line
    (GOOD[0].replace(',"process"', ',\n"process"') + "\n" + GOOD[1] + "\n", ":1: "),
    ("\n".join(GOOD).replace('"l"', '"\\u00e9\xff"') + "\n", ":1: not UTF-8"),
    ("\n".join(GOOD).replace('"time":2', '"time":0') + "\n", ":2: time: goes backwards"),
    ("\n".join(GOOD).replace('"token":1', '"token":1.5') + "\n", ":1: value.token"),
    # each rule of the pairing loop (both loops hand these to the exact reader)
    (GOOD[0] + "\n" + GOOD[0].replace(":0,", ":1,", 1) + "\n", ":2: process 0 invokes acquire"),
    ("\n".join([*GOOD, RELEASE.replace('"time":3', '"time":1')]) + "\n", ":3: time: goes back"),
    ("\n".join([GOOD[0], GOOD[1].replace('"ok"', '"info"'), RELEASE]) + "\n", ":3: .* retired it"),
    (GOOD[1].replace('"index":1', '"index":0') + "\n", ":1: ok completion of acquire .* without"),
    ("\n".join(GOOD).replace('"ok","f":"acquire"', '"ok","f":"release"') + "\n",
     ':2: ok completion has f "release"'),
    ("\n".join(GOOD).replace('"index":1', '"index":2') + "\n", ":2: index: 2 out of sequence"),
    ("\n".join(GOOD).replace('"token":1', '"token":1,"token":2') + "\n", ':2: key "token" appe'),
    (WRITE.replace('"key":"k"', '"key":5'), ":1: value.key: must be a string"),
    (WRITE.replace('"lock":"l"', '"lock":3'), ":1: value.lock: must be a string or null"),
    (WRITE.replace('"token":1', '"token":"1"'), ":1: value.token: must be an integer or null"),
])
def test_irregular_input_gets_the_exact_readers_message(tmp_path: Path, text: str,
                                                        where: str) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(text.encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff"))
    assert fast_ops(path) is None
    with pytest.raises(HistoryError, match=f"h.jsonl{where}"):
        load_ops(path)


def test_non_ascii_text_takes_the_fast_path(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(GOOD).replace('"l"', '"verrou-\u00e9"') + "\n", encoding="utf-8")
    fast = fast_ops(path)
    assert fast is not None and fast == exact_ops(path, monkeypatch)
    assert fast[0].get("lock") == "verrou-\u00e9"


def test_keys_and_lock_names_are_one_string_each(tmp_path: Path) -> None:
    """What keeps a million-event history in 311 MB, not 355: a name read a hundred thousand
    times is one string, not a hundred thousand (docs/checker-speed.md)."""
    cfg = SimConfig(processes=4, locks=2, events=400, p_info=0.0, lease_ms=200)
    path = _write(tmp_path / "sim.jsonl", simulate(cfg, random.Random(7)))
    ops = fast_ops(path)
    assert ops is not None
    names: dict[str, str] = {}
    shared = 0
    for op in ops:
        if op.f in ("read", "write") and op.value is not None:
            for field in ("key", "lock"):
                name = op.value.get(field)
                if type(name) is str:
                    assert names.setdefault(name, name) is name
                    shared += 1
    assert shared > 100 and len(names) <= 4


_OWN_STRINGS = """
import sys
from fencecheck.checker.fastload import fast_ops
from fencecheck.checker.reader import KEY_NAME, LEASE_MS_NAME, LOCK_NAME, TOKEN_NAME
ops = fast_ops(sys.argv[1])
ours = {k: id(k) for k in (KEY_NAME, LEASE_MS_NAME, LOCK_NAME, TOKEN_NAME)}
keys = [k for op in ops if op.value is not None for k in op.value if k in ours]
assert set(keys) == set(ours), keys
assert all(id(k) == ours[k] for k in keys), "a value key is not the decoder's own string"
"""


def test_value_keys_are_the_decoders_own_strings(tmp_path: Path) -> None:
    """The hot loops look value keys up by msgspec's own string objects (reader.decoded_keys):
    in a checker's process (here a new interpreter, as `fencecheck analyze` is) the keys of a
    decoded value are those very objects, so each lookup ends at the identity test
    (docs/checker-speed.md). Only speed depends on it: a lookup by an equal string finds the
    same entry. Not asserted inside pytest's own process: msgspec's key cache there holds what
    every earlier test decoded, whose keys can take the same slots."""
    cfg = SimConfig(processes=4, locks=2, events=400, p_info=0.0, lease_ms=200)
    path = _write(tmp_path / "sim.jsonl", simulate(cfg, random.Random(7)))
    r = subprocess.run([sys.executable, "-c", _OWN_STRINGS, str(path)], capture_output=True,
                       text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
