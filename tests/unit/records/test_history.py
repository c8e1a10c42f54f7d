"""The history event through its record (fencecheck.records.history): every line a run writes
and every shipped history (as earlier releases wrote them, spaces after separators included)
decodes, encodes and decodes back equal; the writers' lines are the record's encoding, byte for
byte; a wrong line names file, line and field; the final read's base is defined once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec
import pytest

from fencecheck.checker import names
from fencecheck.checker.base import Event as CheckerEvent
from fencecheck.checker.reader import line_schema
from fencecheck.nemesis.schedule import NemesisLog
from fencecheck.records import history
from fencecheck.records.base import RecordError
from fencecheck.records.history import FINAL_READ_PROCESS_BASE, Event, Line, LineError
from fencecheck.workloads import eventlog
from tests.conftest import REPO

DATA = REPO / "tests" / "data"
CORPUS = Path("/work/shared/corpus")
SHIPPED = (sorted((DATA / "histories").glob("*.jsonl"))
           + sorted((DATA / "runs").glob("*/history.jsonl"))
           + (sorted(CORPUS.rglob("*.jsonl")) if CORPUS.is_dir() else []))


def _lines(path: Path) -> list[bytes]:
    return [raw for raw in path.read_bytes().splitlines() if raw.strip()]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_history_line_round_trips(path: Path) -> None:
    for n, raw in enumerate(_lines(path), 1):
        line = history.decode_line(raw, str(path), n)
        again = history.decode_line(history.encode_line(line), str(path), n)
        assert again == line
        assert json.loads(history.encode_line(line)) == {**json.loads(raw), "value": line.value}


def test_the_lines_of_a_run_are_the_records_encoding(written_run: Path) -> None:
    raws = _lines(written_run / "history.jsonl")
    assert any(b'"nemesis"' in r for r in raws) and any(b'"error"' not in r for r in raws)
    for n, raw in enumerate(raws, 1):
        line = history.decode_line(raw, "history.jsonl", n)
        assert history.encode_line(line) == raw + b"\n"


def test_a_line_written_by_an_earlier_release_loads() -> None:
    # json.dumps with its default separators, no value, an explicit null error
    old = b'{"index": 3, "time": 7, "process": "nemesis", "type": "info", "f": "start-kill", ' \
          b'"error": null}'
    line = history.decode_line(old)
    assert line == Line(3, 7, "nemesis", "info", "start-kill", None, None)
    assert history.encode_line(line) == (b'{"index":3,"time":7,"process":"nemesis","type":"info"'
                                         b',"f":"start-kill","value":null}\n')


@pytest.mark.parametrize("ev", [
    Event(5, 3, "ok", "acquire", {"lock": "l", "token": 2**80}),
    Event(6, 3, "fail", "write", {"key": "k", "note": "\u00e9"}, "stale-token"),
    Event(7, "nemesis", "invoke", "stop-pause", None),
    Event(8, "nemesis", "ok", "start-partition", {"grudge": {"n1": ["n2"]}}),
])
def test_every_event_round_trips(ev: Event) -> None:
    raw = history.encode_event(ev)
    assert raw.endswith(b"}\n") and raw.count(b"\n") == 1
    assert history.decode_event(raw) == ev
    assert (b'"error"' in raw) is (ev.error is not None)  # absent, never null
    line = Line(9, ev.time, ev.process, ev.type, ev.f, ev.value, ev.error)  # type: ignore[arg-type]
    assert history.decode_line(history.encode_line(line)) == line


def test_what_msgspec_would_change_is_written_as_json_writes_it() -> None:
    nan = history.encode_event(Event(1, 1, "ok", "read", {"x": float("nan")}))
    assert b"NaN" in nan and math.isnan(json.loads(nan)["value"]["x"])
    keys = history.encode_event(Event(1, 1, "ok", "read", {1: "int key"}))
    assert json.loads(keys)["value"] == {"1": "int key"}
    with pytest.raises(TypeError):
        history.encode_event(Event(1, 1, "ok", "read", {"at": object()}))
    odd = history.encode_event(Event(1, "nemesis", "ok", "start-x", {"p": Path("/x")}),
                               default=str)
    assert json.loads(odd)["value"] == {"p": "/x"}


def test_the_event_logs_write_through_the_record(tmp_path: Path) -> None:
    with eventlog.EventLog(tmp_path / "w.jsonl", 0) as wlog:
        t = wlog.write(3, "fail", "acquire", {"lock": "l", "lease_ms": 100}, "timeout")
    nlog = NemesisLog(tmp_path / "n.jsonl", 0)
    nlog.write("ok", "start-pause", {"targets": ["c1"], "at": Path("/p")})
    nlog.close()
    (worker,) = _lines(tmp_path / "w.jsonl")
    assert worker + b"\n" == history.encode_event(
        Event(t, 3, "fail", "acquire", {"lock": "l", "lease_ms": 100}, "timeout"))
    (nemesis,) = _lines(tmp_path / "n.jsonl")
    ev = history.decode_event(nemesis)
    assert (ev.process, ev.type, ev.value) == ("nemesis", "ok", {"targets": ["c1"], "at": "/p"})


@pytest.mark.parametrize(("raw", "what"), [
    (b'{"index":0,"time":"1","process":0,"type":"invoke","f":"read"}',
     "h.jsonl:4: time: expected int, got str"),
    (b'{"index":0,"time":-1,"process":0,"type":"invoke","f":"read"}',
     "h.jsonl:4: time: expected int >= 0"),
    (b'{"index":0,"time":1,"process":"n1","type":"invoke","f":"read"}',
     "h.jsonl:4: process: must be an integer or \"nemesis\", not 'n1'"),
    (b'{"index":0,"time":1,"process":0,"type":"done","f":"read"}',
     "h.jsonl:4: type: 'done' is not one of invoke, ok, fail, info"),
    (b'{"index":0,"time":1,"process":0,"type":"ok"}', "h.jsonl:4: f: missing"),
    (b'[1]', "h.jsonl:4: not a JSON object but array"),
    (b'{"index":0', "h.jsonl:4: not valid JSON (it ends too early)"),
    (b'  ', "h.jsonl:4: empty line"),
    (b'{"index":0,"time":1,"process":0,"type":"ok","f":"\xff"}', "h.jsonl:4: not UTF-8"),
])
def test_a_wrong_line_names_file_line_and_field(raw: bytes, what: str) -> None:
    with pytest.raises(LineError) as e:
        history.decode_line(raw, "h.jsonl", 4)
    assert str(e.value).startswith(what), str(e.value)
    assert isinstance(e.value, RecordError) and e.value.line == 4


def test_a_log_event_without_value_is_refused_by_the_strict_decoder_not_by_from_json() -> None:
    with pytest.raises(LineError, match="value: missing"):
        history.decode_event(b'{"time":1,"process":1,"type":"ok","f":"x"}')
    ev = eventlog.Event.from_json({"time": 1, "process": 1, "type": "ok", "f": "x"})
    assert ev.value is None and isinstance(ev, Event)


def test_one_event_type_and_one_final_read_base() -> None:
    assert CheckerEvent is Line
    assert issubclass(eventlog.Event, Event)
    assert names.FINAL_READ_BASE == FINAL_READ_PROCESS_BASE == 1_000_000
    from fencecheck.run import workers
    assert workers.FINAL_READ_PROCESS_BASE is FINAL_READ_PROCESS_BASE


def test_the_schema_is_generated_from_the_line() -> None:
    s = history.schema()
    props = s["$defs"]["Line"]["properties"]
    assert set(props) == set(Line.__struct_fields__)
    assert s["$defs"]["Line"]["required"] == ["index", "time", "process", "type", "f"]
    assert props["time"] == {"type": "integer", "minimum": 0}
    # `fencecheck schema history` is this one plus the checker's table of values
    full = line_schema()
    assert "allOf" in full["$defs"]["Line"]
    del full["$defs"]["Line"]["allOf"]
    assert full == s
    assert msgspec.json.schema(Line)["$defs"]["Line"]["properties"] == props
