"""The checker's two loops in C (checker/_pairing.c, checker/_rwpass.c) stand in for their
Python references: each is built from these very sources; fastload's pairing loop reads every
input as the Python loop does, mutants included (what a crash or a different op would show
first; test_fastload.py runs its tests with both loops); checker.rwpass' pass gives the same
grant table, or the same exception, on every shipped history, simulated ones with planted
faults, and hand-made ops of any shape."""

from __future__ import annotations

import hashlib
import importlib
import json
import random
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.gen_history import PLANTABLE, SimConfig, plant, simulate
from fencecheck.checker import fastload, native, rwpass
from fencecheck.checker.base import Op
from fencecheck.checker.grants import build_grants
from fencecheck.checker.history import load_ops
from tests.conftest import REPO
from tests.unit.checker.test_fuzz import mutate, seeds

MUTANTS = 1500


@pytest.mark.parametrize("name", ["_pairing", "_rwpass"])
def test_each_loop_is_built_from_the_sources_beside_it(name: str) -> None:
    """scripts/setup.sh builds both (the test command's machine has a C compiler), from the
    very sources of this checkout: their digest, computed here from the bytes, is compiled in."""
    module = importlib.import_module(f"fencecheck.checker.{name}")
    digest = hashlib.sha256((REPO / "checker" / f"{name}.c").read_bytes()
                            + (REPO / "checker" / "_loops.h").read_bytes()).hexdigest()[:16]
    assert digest == module.SOURCE_DIGEST
    assert native.compiled(name) is module
    assert fastload.NATIVE is not None and rwpass.NATIVE is not None


@pytest.mark.parametrize("name", ["_pairing", "_rwpass"])
def test_a_build_of_other_sources_is_not_used(name: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(f"fencecheck.checker.{name}")
    monkeypatch.setattr(module, "SOURCE_DIGEST", "0" * 16)
    assert native.compiled(name) is None
    assert (fastload._native() if name == "_pairing" else rwpass._native()) is None


def test_mutants_read_the_same_with_both_loops(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes flipped, inserted, deleted, lines swapped, repeated, cut, fields of the wrong type
    (test_fuzz's mutants): each loop gives the same ops, or both hand the file to the exact
    reader (None); none raises. Blocks of 100 bytes, so lines cross block boundaries."""
    rng = random.Random(20261204)
    base = seeds()
    monkeypatch.setattr(fastload, "_BLOCK", 100)
    native = fastload.NATIVE
    outcomes = {"ops": 0, "irregular": 0}
    for n in range(MUTANTS):
        data = mutate(rng, rng.choice(base), structural=True)
        path = tmp_path / f"m{n}.jsonl"
        path.write_bytes(data)
        monkeypatch.setattr(fastload, "NATIVE", native)
        compiled = fastload.fast_ops(path)
        monkeypatch.setattr(fastload, "NATIVE", None)
        python = fastload.fast_ops(path)
        assert compiled == python, (n, data[:300])
        outcomes["irregular" if python is None else "ops"] += 1
    assert min(outcomes.values()) > MUTANTS // 10, outcomes  # both ways taken, often


# ---- the grant table's pass: checker.rwpass' C loop against its Python reference ----

HISTORIES = sorted(
    [*(REPO / "examples" / "histories").glob("*.jsonl"),
     *(REPO / "tests" / "data" / "histories").glob("*.jsonl"),
     *(REPO / "tests" / "data" / "runs").glob("*/history.jsonl")])


def _table(ops: list[Op]) -> tuple[Any, ...]:
    """Everything build_grants gives, orders of dicts and lists included."""
    t = build_grants(ops)
    tally = t.tally
    assert tally is not None
    return (t.grants, t.write_grant, list(t.write_grant), t.writes, list(t.writes), t.last_reads,
            list(t.last_reads), t.acquires_without_lock, t.job_writes, t.acquire_ops,
            t.acquires_with_lease, t.steps, t.granted_before_invoke, t.nemesis_ops,
            [(k, c.inv, c.ok, c.tokens, c.gids) for k, c in t.columns.items()],
            tally.per_f, list(tally.per_f), tally.not_ok, list(tally.not_ok), tally.processes,
            tally.unfinished, tally.granted_writes, tally.last_end, tally.rejected_writes,
            tally.granted_times, tally.granted_gids)


def _both(ops: list[Op], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The table (or the exception) with the compiled pass, then with the Python one."""
    native = rwpass.NATIVE
    assert native is not None, "checker/_rwpass.c is not built (setup.py)"
    out = []
    for loop in (native, None):
        monkeypatch.setattr(rwpass, "NATIVE", loop)
        try:
            out.append(_table(ops))
        except Exception as e:  # both passes must fail alike
            out.append(type(e))
    monkeypatch.setattr(rwpass, "NATIVE", native)
    return out[0], out[1]


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_histories_give_the_same_table(path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    compiled, python = _both(load_ops(path), monkeypatch)
    assert compiled == python


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cut=st.booleans(), p_info=st.sampled_from([0.0, 0.1]),
       lease_ms=st.sampled_from([None, 20, 200]), plant_kind=st.sampled_from([None, *PLANTABLE]))
def test_simulated_histories_give_the_same_table(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, seed: int,
                                                 cut: bool, p_info: float, lease_ms: int | None,
                                                 plant_kind: str | None) -> None:
    rng = random.Random(seed)
    cfg = SimConfig(processes=4, locks=2, events=300, cut=cut, p_info=p_info,
                    lease_ms=lease_ms, p_pause=0.1, p_slow=0.2)
    events = simulate(cfg, rng)
    if plant_kind is not None:
        events = plant(events, plant_kind, rng) or events
    path = tmp_path / f"sim-{seed}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    compiled, python = _both(load_ops(path), monkeypatch)
    assert compiled == python


_NAMES = st.sampled_from(["k", "l", "job:7", "job:x", "job:\u00b2", "", "nemesis"])
_ANY = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.just(2**70), _NAMES,
                 st.just(1.5), st.just([1]))
_VALUE = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["key", "lock", "token", "job", "value", "lease_ms",
                                     "deleted_token", "evidence", "attempt_ns"]),
                    _ANY, max_size=6),
    st.builds(lambda d: MappingProxyType(d),  # a Mapping that is not a dict
              st.dictionaries(st.sampled_from(["key", "lock", "token", "job"]), _ANY,
                              max_size=4)))


@st.composite
def _ops(draw: st.DrawFn) -> list[Op]:
    ops, t = [], 0
    for i in range(draw(st.integers(0, 30))):
        t += draw(st.integers(0, 5))
        done = draw(st.booleans())
        ops.append(Op(draw(st.sampled_from([0, 1, 2, "nemesis"])),
                      draw(st.sampled_from(["read", "write", "write", "acquire", "release",
                                            "renew", "notice", "start-partition"])),
                      draw(st.sampled_from(["ok", "ok", "fail", "info"])), i, t,
                      i if done else None, t + draw(st.integers(0, 5)) if done else None,
                      draw(_VALUE), draw(st.sampled_from([None, "stale-token", "x"]))))
    return ops


@settings(max_examples=400, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(ops=_ops())
def test_hand_made_ops_of_any_shape_give_the_same_table(ops: list[Op],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ops as a caller of build_grants may make them: values of the wrong type, a Mapping that is
    not a dict, job keys, refused writes, the nemesis, ops never completed. The same table, or
    the same exception, from both passes."""
    compiled, python = _both(ops, monkeypatch)
    assert compiled == python


def test_ops_of_another_type_take_the_python_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    class MyOp(Op):
        pass

    ops = [MyOp(0, "read", "ok", 0, 1, 1, 2, {"key": "k"})]
    calls: list[int] = []
    real = rwpass._rw_pass
    monkeypatch.setattr(rwpass, "_rw_pass", lambda *a: calls.append(1) or real(*a))
    table = build_grants(ops)
    assert calls == [1] and table.last_reads == {"k": ops[0]}


def test_an_error_in_a_lock_operation_ends_both_passes_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """lock_op raises from inside the compiled pass (a lease that is not a number): the error
    comes out of build_grants as it does from the Python pass."""
    ops = [Op(0, "read", "ok", 0, 1, 1, 2, {"key": "k"}),
           Op(1, "acquire", "ok", 2, 3, 3, 4, {"lock": "l", "lease_ms": "soon"}),
           Op(0, "write", "ok", 4, 5, 5, 6, {"key": "k", "lock": "l", "value": 1})]
    compiled, python = _both(ops, monkeypatch)
    assert compiled is python is ValueError
