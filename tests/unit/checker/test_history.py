"""Reading, validating and pairing history.jsonl (checker.history)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fencecheck.checker.base import Event, HistoryError, Op
from fencecheck.checker.history import load_ops, pair, read_events, write_events

Loader = Callable[[Path], Any]
LOADERS: list[Loader] = [load_ops, lambda p: list(read_events(p))]


def _line(index: int, time: int, process: Any, type_: str, f: str,
          value: Any = None, **extra: Any) -> str:
    return json.dumps({"index": index, "time": time, "process": process, "type": type_, "f": f,
                       "value": value, **extra})


GOOD = [
    _line(0, 10, 0, "invoke", "acquire", {"lock": "l", "lease_ms": 100}),
    _line(1, 20, 0, "ok", "acquire", {"token": 1}),
]

# (name, third line and after, line of the error, what the message says)
BAD: list[tuple[str, list[str], int, str]] = [
    ("not-json", ['{"index": 2, "time": 30,'], 3, "not valid JSON"),
    ("not-object", ["[2, 30]"], 3, "not a JSON object but array"),
    ("empty-line", ["", _line(2, 30, 0, "invoke", "release")], 3, "empty line"),
    ("blank-line", ["   ", _line(2, 30, 0, "invoke", "release")], 3, "empty line"),
    ("trailing-data", [_line(2, 30, 0, "invoke", "release") + " x"], 3, "not valid JSON"),
    ("two-objects", [_line(2, 30, 0, "invoke", "release") + _line(3, 40, 0, "ok", "release")],
     3, "not valid JSON (trailing characters"),
    ("invalid-utf8", ['{"index": 2, "time": 30, "process": 0, "type": "invoke", "f": "\udcff"}'],
     3, "not UTF-8 text"),
    ("nested-too-deep", [_line(2, 30, 0, "invoke", "write", {"v": "["}).replace(
        '"["', "[" * 100_000 + "]" * 100_000)], 3, "nested too deeply"),
    ("missing-field", [json.dumps({"index": 2, "process": 0, "type": "invoke", "f": "x"})], 3,
     "time: missing"),
    ("time-not-int", [_line(2, "30", 0, "invoke", "release")], 3,  # type: ignore[arg-type]
     "time: expected int, got str"),
    ("index-bool", [_line(True, 30, 0, "invoke", "release")], 3,
     "index: expected int, got bool"),
    ("negative-time", [_line(0, -5, 0, "invoke", "release")], 1,
     "time: expected int >= 0"),
    ("bad-process", [_line(2, 30, "client-1", "invoke", "release")], 3,
     "process: must be an integer or \"nemesis\", not 'client-1'"),
    ("value-not-object", [_line(2, 30, 0, "invoke", "release", 5)], 3,
     "value: expected object | null, got int"),
    ("error-not-string", [_line(2, 30, 0, "invoke", "release", {"lock": "l"}),
                          _line(3, 40, 0, "fail", "release", None, error=7)], 4,
     "error: expected str | null, got int"),
    ("unknown-type", [_line(2, 30, 0, "okay", "release")], 3,
     "type: 'okay' is not one of invoke, ok, fail, info"),
    ("f-not-string", [_line(2, 30, 0, "invoke", 3)], 3,  # type: ignore[arg-type]
     "f: expected str, got int"),
    ("completion-without-invoke", [_line(2, 30, 1, "ok", "acquire")], 3,
     "ok completion of acquire by process 1 without an invoke"),
    ("completion-other-f", [_line(2, 30, 0, "invoke", "release", {"lock": "l"}),
                            _line(3, 40, 0, "ok", "renew")], 4,
     'ok completion has f "renew" but process 0 invoked "release" on line 3'),
    ("busy-process", [_line(2, 30, 0, "invoke", "write"), _line(3, 40, 0, "invoke", "read")], 4,
     "process 0 invokes read while its write invoked on line 3 has not completed"),
    ("retired-process", [_line(2, 30, 0, "invoke", "write"), _line(3, 40, 0, "info", "write"),
                         _line(4, 50, 0, "invoke", "release", {"lock": "l"})], 5,
     "process 0 invokes release after an info completion retired it"),
    ("time-backwards", [_line(2, 19, 0, "invoke", "release")], 3,
     "time: goes backwards for process 0 (19 ns after 20 ns on line 2)"),
    ("index-gap", [_line(3, 30, 0, "invoke", "release")], 3,
     "index: 3 out of sequence (expected 2"),
]

# values the checks need and cannot use: (name, lines after GOOD, line of the invoke, what)
BAD_VALUES: list[tuple[str, list[str], int, str]] = [
    ("acquire-without-lock", [_line(2, 30, 1, "invoke", "acquire", {"lease_ms": 100}),
                              _line(3, 40, 1, "ok", "acquire", {"token": 2})], 3,
     "value.lock: missing (a acquire needs it)"),
    ("lock-not-string", [_line(2, 30, 1, "invoke", "acquire", {"lock": ["l"], "lease_ms": 1}),
                         _line(3, 40, 1, "ok", "acquire", {"token": 2})], 3,
     "value.lock: must be a string"),
    ("negative-lease", [_line(2, 30, 1, "invoke", "acquire", {"lock": "l", "lease_ms": -1}),
                        _line(3, 40, 1, "ok", "acquire", {"token": 2})], 3,
     "value.lease_ms: must be a finite non-negative number or null, not -1"),
    ("huge-lease", [_line(2, 30, 1, "invoke", "acquire", {"lock": "l", "lease_ms": 1}).replace(
        '"lease_ms": 1', '"lease_ms": 1e999'), _line(3, 40, 1, "ok", "acquire", {"token": 2})],
     3, "value: number out of range"),
    ("token-string", [_line(2, 30, 1, "invoke", "acquire", {"lock": "l", "lease_ms": 1}),
                      _line(3, 40, 1, "ok", "acquire", {"token": "7"})], 3,
     'value.token: must be an integer or null, not "7"'),
    ("token-float", [_line(2, 30, 1, "invoke", "release", {"lock": "l", "token": 7.0}),
                     _line(3, 40, 1, "ok", "release")], 3,
     "value.token: must be an integer or null, not 7.0"),
    ("renew-without-lease", [_line(2, 30, 0, "invoke", "renew", {"lock": "l", "token": 1}),
                             _line(3, 40, 0, "ok", "renew")], 3,
     "value.lease_ms: missing (a renew needs it)"),
    ("attempt-after-ok", [_line(2, 30, 1, "invoke", "acquire", {"lock": "l", "lease_ms": 1}),
                          _line(3, 40, 1, "ok", "acquire", {"token": 2, "attempt_ns": 41})], 3,
     "value.attempt_ns: 41 is after the acquire completed (40 ns)"),
]
BAD_VALUES_ONLY_PAIRED = {b[0] for b in BAD_VALUES}


@pytest.mark.parametrize(("name", "tail", "line", "what"), BAD_VALUES,
                         ids=[b[0] for b in BAD_VALUES])
def test_a_value_the_checks_cannot_use_is_bad_input(tmp_path: Path, name: str,
                                                    tail: list[str], line: int,
                                                    what: str) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join([*GOOD, *tail]) + "\n")
    with pytest.raises(HistoryError) as err:
        load_ops(path)
    assert (err.value.line, err.value.what) == (line, what) or what in err.value.what, \
        err.value
    assert err.value.line == line


def test_times_may_interleave_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join([*GOOD, _line(2, 5, 1, "invoke", "acquire",
                                            {"lock": "l", "lease_ms": 100}),
                                _line(3, 6, 1, "fail", "acquire")]) + "\n")
    assert [o.type for o in load_ops(path)] == ["ok", "fail"]


@pytest.mark.parametrize("load", LOADERS, ids=["load_ops", "read_events"])
@pytest.mark.parametrize(("name", "tail", "line", "what"), BAD, ids=[b[0] for b in BAD])
def test_malformed_history_names_the_line(tmp_path: Path, load: Loader, name: str,
                                          tail: list[str], line: int, what: str) -> None:
    lines = tail if name == "negative-time" else [*GOOD, *tail]
    path = tmp_path / "history.jsonl"
    # surrogateescape: "\udcff" stands for the byte 0xff, which is not UTF-8
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    with pytest.raises(HistoryError) as err:
        load(path)
    assert err.value.line == line
    assert what in err.value.what
    assert str(err.value).startswith(f"{path}:{line}: ")


def test_message_reads_like_a_compiler_error(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join([*GOOD, _line(2, 30, 0, "okay", "release")]) + "\n")
    with pytest.raises(HistoryError, match=r"history.jsonl:3: type: 'okay' is not one of "
                                           r"invoke, ok, fail, info$"):
        load_ops(path)


def test_nemesis_may_go_on_after_info(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join([
        _line(0, 1, "nemesis", "invoke", "start-partition", {"shape": "halves"}),
        _line(1, 2, "nemesis", "info", "start-partition", None, error="timeout"),
        _line(2, 3, "nemesis", "invoke", "stop-partition"),
        _line(3, 4, "nemesis", "ok", "stop-partition"),
    ]) + "\n")
    ops = load_ops(path)
    assert [(o.f, o.type) for o in ops] == [("start-partition", "info"), ("stop-partition", "ok")]
    assert ops[0].error == "timeout"


def test_pairs_by_process_in_invoke_order_and_merges_values(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join([
        _line(0, 1, 0, "invoke", "acquire", {"lock": "l", "lease_ms": 100}),
        _line(1, 2, 1, "invoke", "read", {"key": "k", "token": None, "lock": "l"}),
        _line(2, 3, 1, "ok", "read", {"value": 7}),
        _line(3, 4, 0, "ok", "acquire", {"token": 3}),
        _line(4, 5, 0, "invoke", "write", {"key": "k", "value": 8, "token": 3, "lock": "l"}),
        _line(5, 6, 2, "invoke", "acquire", {"lock": "l", "lease_ms": 100}),
    ]) + "\n")
    ops = load_ops(path)
    assert ops == [
        Op(0, "acquire", "ok", 0, 1, 3, 4, {"lock": "l", "lease_ms": 100, "token": 3}),
        Op(1, "read", "ok", 1, 2, 2, 3, {"key": "k", "token": None, "lock": "l", "value": 7}),
        Op(0, "write", "info", 4, 5, None, None, {"key": "k", "value": 8, "token": 3,
                                                   "lock": "l"}),
        Op(2, "acquire", "info", 5, 6, None, None, {"lock": "l", "lease_ms": 100}),
    ]
    # the streaming reader, the pairer and the writer agree with the fast path
    events = list(read_events(path))
    assert pair(events, str(path)) == ops
    copy = tmp_path / "copy.jsonl"
    assert write_events(copy, events) == 6
    assert load_ops(copy) == ops


def test_pair_raises_with_position(tmp_path: Path) -> None:
    events = [Event(0, 0, 0, "invoke", "acquire", None), Event(1, 1, 0, "ok", "release", None)]
    with pytest.raises(HistoryError, match=r"^imported:2: ok completion has f"):
        pair(events, "imported")
    odd = [Event(0, 0, 0, "invoke", "read", None), Event(1, 1, 0, "done", "read", None)]  # type: ignore[arg-type]
    with pytest.raises(HistoryError, match=r'^imported:2: type "done" is not one of'):
        pair(odd, "imported")


def test_whitespace_around_a_line_and_crlf_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(("  " + GOOD[0] + " \r\n" + GOOD[1] + "\t").encode())
    assert [o.type for o in load_ops(path)] == ["ok"]
    assert len(list(read_events(path))) == 2


def test_empty_file_is_an_empty_history(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("")
    assert load_ops(path) == []
