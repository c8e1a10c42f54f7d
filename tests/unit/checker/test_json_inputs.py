"""History inputs people have: the events of history.jsonl as one JSON array or pretty-printed
(`jq .`, `jq -s .`), blank lines at the end, and the other way round a key written twice in one
object, which is bad input (two readers would judge two histories)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencecheck.checker.base import HistoryError
from fencecheck.checker.fastload import fast_ops
from fencecheck.checker.formats import guess_format, load_any, read_events
from fencecheck.checker.history import load_ops
from fencecheck.checker.history import read_events as read_jsonl
from fencecheck.checker.reader import DECODER, keys_unique, repeated_key
from tests.conftest import REPO, run_fencecheck

SHIPPED = REPO / "examples" / "histories" / "redis-unfenced.jsonl"


def events() -> list[dict[str, object]]:
    return [json.loads(line) for line in SHIPPED.read_text().splitlines()]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("shape", ["array", "array-one-line", "jq", "jq-slurp"])
def test_a_json_document_reads_as_the_same_history(tmp_path: Path, shape: str) -> None:
    evs = events()
    text = {
        "array": "[\n" + ",\n".join(json.dumps(e) for e in evs) + "\n]\n",
        "array-one-line": json.dumps(evs),
        "jq": "".join(json.dumps(e, indent=2) + "\n" for e in evs),
        "jq-slurp": json.dumps(evs, indent=2) + "\n",
    }[shape]
    path = _write(tmp_path / "h.json", text)
    assert guess_format(path) == "json"
    assert load_any(path) == load_ops(SHIPPED)
    assert read_events(path) == list(read_jsonl(SHIPPED))


def test_edn_is_still_edn(tmp_path: Path) -> None:
    for text in ("[{:process 0, :type :invoke, :f :read}]", "{:process 0 :type :invoke}\n",
                 "[\n  {:process 0}\n]"):
        assert guess_format(_write(tmp_path / "h.edn", text)) == "edn"


def test_an_error_in_a_json_document_names_the_line_its_event_starts(tmp_path: Path) -> None:
    evs = events()
    evs[2]["process"] = "client-1"
    text = "".join(json.dumps(e, indent=2) + "\n" for e in evs)
    start = 1 + sum(json.dumps(e, indent=2).count("\n") + 1 for e in evs[:2])
    path = _write(tmp_path / "h.json", text)
    with pytest.raises(HistoryError, match=rf"h\.json:{start}: process: must be an integer"):
        load_any(path)
    broken = _write(tmp_path / "b.json", "[\n" + json.dumps(evs[0]) + "\n" + json.dumps(evs[1])
                    + "\n]\n")
    with pytest.raises(HistoryError, match=r"b\.json:3: not valid JSON: expected ',' or ']'"):
        load_any(broken)
    r = run_fencecheck("check", str(path), timeout=60)
    assert r.returncode == 3 and r.stderr.startswith(f"error: {path}:{start}: process:")


@pytest.mark.parametrize("tail", ["\n", "\n\n", "\n  \n\r\n"])
def test_blank_lines_at_the_end_are_the_end(tmp_path: Path, tail: str) -> None:
    path = _write(tmp_path / "h.jsonl", SHIPPED.read_text() + tail)
    fast = fast_ops(path)
    assert fast is not None and fast == load_ops(SHIPPED)  # the fast path too
    assert list(read_jsonl(path)) == list(read_jsonl(SHIPPED))
    assert guess_format(path) == "jsonl"
    r = run_fencecheck("check", str(path), timeout=60)
    assert r.returncode == 1, r.stderr  # the shipped history's verdict, not bad input


def test_a_blank_line_before_another_event_is_bad_input(tmp_path: Path) -> None:
    lines = SHIPPED.read_text().splitlines()
    path = _write(tmp_path / "h.jsonl", "\n".join([*lines[:3], "", *lines[3:]]) + "\n")
    with pytest.raises(HistoryError, match=r"h\.jsonl:4: empty line \(one JSON object per "
                                           r"line; blank lines only at the end\)"):
        load_ops(path)
    with pytest.raises(HistoryError, match=r"h\.jsonl:4: empty line"):
        list(read_jsonl(path))


def _twice(line: str, key: str, first: object) -> str:
    """line with `key` also written before its value (`"token": 5, ..., "token": 3`)."""
    i = line.index(f'"{key}":')
    return f'{line[:i]}"{key}":{json.dumps(first)},{line[i:]}'


@pytest.mark.parametrize(("key", "first", "compact"), [
    ("token", 5, True), ("token", 5, False), ("type", "invoke", True), ("lock", "x", True),
    ("value", None, True), ("error", "x", True),
])
def test_a_key_twice_in_one_object_is_bad_input(tmp_path: Path, key: str, first: object,
                                                 compact: bool) -> None:
    lines = [json.dumps(e, separators=(",", ":") if compact else (", ", ": "))
             for e in events()]
    n = next(i for i, line in enumerate(lines) if f'"{key}":' in line)
    lines[n] = _twice(lines[n], key, first)
    path = _write(tmp_path / "h.jsonl", "\n".join(lines) + "\n")
    assert fast_ops(path) is None  # the fast path hands it to the exact reader
    where = rf"h\.jsonl:{n + 1}: key \"{key}\" appears twice in one object"
    with pytest.raises(HistoryError, match=where):
        load_ops(path)
    with pytest.raises(HistoryError, match=where):
        list(read_jsonl(path))
    r = run_fencecheck("check", str(path), timeout=60)
    assert r.returncode == 3 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"{path}:{n + 1}: " in r.stderr and f'key "{key}"' in r.stderr


def test_a_key_twice_in_a_json_document_is_bad_input(tmp_path: Path) -> None:
    text = "".join(json.dumps(e, indent=2) + "\n" for e in events())
    i = text.index('"token": ')
    line = text.count("\n", 0, text.rfind("\n{", 0, i) + 1) + 1  # where its event starts
    path = _write(tmp_path / "h.json", text[:i] + '"token": 7, ' + text[i:])
    with pytest.raises(HistoryError, match=rf"h\.json:{line}: key \"token\" appears twice"):
        load_any(path)


@pytest.mark.parametrize("raw", [
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"write","value":null}',
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"write"}',
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"write","type":"ok"}',
    b'{"index":0,"time":1,"process":0,"type":"fail","f":"x","value":null,"error":"a:b"}',
    b'{"index":0,"time":1,"process":0,"type":"fail","f":"x","error":"\\"value\\":null"}',
    b'{"index":0,"time":1,"process":0,"type":"fail","f":"x","error":"t:","f":"x"}',
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"r","value":{"v":{"a":1,"a":2}}}',
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"r","value":{"v":{"a":1,"b":2}}}',
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"r","extra":1,"value":{"value":null}}',
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"r","value":{"k":"x:y","k":"z"}}',
    b'{"index" :0,"index" :1,"time":1,"process":0,"type":"ok","f":"r"}',
    b'{"index":0,"time":1,"process":0,"type":"ok","f":"r","value":{"value":null}}',
])
def test_the_cheap_key_test_agrees_with_a_full_parse(raw: bytes) -> None:
    d = DECODER.decode(raw)
    assert keys_unique(raw, d) == (repeated_key(raw) is None)


@pytest.mark.parametrize("other", [
    # a line whose colons are more than its keys (a colon in a string), counted as it is
    '{"index":%d,"time":%d,"process":9,"type":"invoke","f":"note","value":{"text":"a:b:c"}}',
    # a line with a key fewer than "value":null, which must not make room for a repeat
    '{"index":%d,"time":%d,"process":9,"type":"invoke","f":"note"}',
    '{"index":%d,"time":%d,"process":9,"type":"invoke","f":"note","error":"x:y"}',
])
def test_a_repeat_is_found_beside_any_other_line(tmp_path: Path, other: str) -> None:
    lines = [json.dumps(e, separators=(",", ":")) for e in events()]
    last = json.loads(lines[-1])
    lines.append(other % (len(lines), last["time"] + 1))
    clean = _write(tmp_path / "clean.jsonl", "\n".join(lines) + "\n")
    load_ops(clean)  # no repeat: it reads
    n = next(i for i, line in enumerate(lines) if '"token":' in line)
    lines[n] = _twice(lines[n], "token", 5)
    path = _write(tmp_path / "h.jsonl", "\n".join(lines) + "\n")
    assert fast_ops(path) is None
    with pytest.raises(HistoryError, match=rf'h\.jsonl:{n + 1}: key "token" appears twice'):
        load_ops(path)
