"""checker.formats, checker.edn, checker.jepsen: Jepsen EDN and log-line importers, the format
guesser, load_any."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencecheck.checker.base import Event, HistoryError
from fencecheck.checker.edn import Keyword, read_edn
from fencecheck.checker.formats import guess_format, load_any
from fencecheck.checker.history import write_events
from fencecheck.checker.jepsen import read_edn_events, read_jepsen_log_events

EDN_VECTOR = """[{:process 0, :type :invoke, :f :write, :value 3}
 {:process 0, :type :ok, :f :write, :value 3}
 ; a comment, then a cas and a read
 {:process 1, :type :invoke, :f :cas, :value [3 4]}
 {:process :nemesis, :type :info, :f :start, :value nil}
 {:process 1, :type :ok, :f :cas, :value [3 4]}
 {:process :nemesis, :type :info, :f :start, :value "cut [n1] off"}
 {:process 2, :type :invoke, :f :read, :value nil}
 {:process 2, :type :ok, :f :read, :value 4}]
"""

EDN_LINES = """{:type :invoke, :f :acquire, :process 3, :time 100, :index 0}
{:type :invoke, :f :release, :process 1, :time 90, :index 1}
{:type :fail, :f :release, :process 1, :time 120, :error :not-held, :index 2}
{:type :ok, :f :acquire, :process 3, :time 130, :index 3}
"""

LOG = (
    "2017-01-01 INFO some.other.logger - starting\n"
    "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n"
    "INFO  jepsen.util - 1\t:invoke\t:cas\t[1 2]\n"
    "INFO  jepsen.util - 0\t:ok\t:read\t1\n"
    "INFO  jepsen.util - 1\t:info\t:cas\t:timed-out\n"
    "INFO  jepsen.util - 6   :invoke :write  3\n"  # some logs use spaces for tabs
    "INFO  jepsen.util - 6   :fail   :write  :timed-out\n"
    "INFO  jepsen.util - :nemesis\t:info\t:start\tnil\n"
    "INFO  jepsen.util - :nemesis\t:info\t:start\t{\"n1\" #{\"n2\" \"n3\"}}\n"
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_edn_reader_values() -> None:
    text = '[1 -2 3N 1.5 nil true :a/b "x\\"y" sym (1 2) #{1} {:k [1]} #_ 9 #inst "t" ; c\n]'
    forms = list(read_edn(text))
    assert [v for _, v in forms] == [1, -2, 3, 1.5, None, True, Keyword("a/b"), 'x"y', "sym",
                                     [1, 2], frozenset({1}), {Keyword("k"): [1]}, "t"]
    assert {line for line, _ in forms} == {1}


def test_edn_reader_reports_lines_of_each_op() -> None:
    forms = list(read_edn("[{:a 1}\n\n {:a 2}]\n{:a 3}\n"))
    assert [ln for ln, _ in forms] == [1, 3, 4]


def test_edn_vector_history(tmp_path: Path) -> None:
    events = read_edn_events(write(tmp_path, "h.edn", EDN_VECTOR))
    assert [e.type for e in events] == ["invoke", "ok", "invoke", "invoke", "ok", "ok", "invoke",
                                        "ok"]
    assert events[0] == Event(0, 0, 0, "invoke", "write", {"value": 3})
    assert events[2].value == {"from": 3, "to": 4}
    nemesis = [e for e in events if e.process == "nemesis"]
    assert [e.type for e in nemesis] == ["invoke", "ok"]
    assert nemesis[1].value == {"value": "cut [n1] off"}
    assert events[-1].value == {"value": 4}


def test_edn_lock_history_keeps_time_index_and_error(tmp_path: Path) -> None:
    events = read_edn_events(write(tmp_path, "h.edn", EDN_LINES))
    assert events[0] == Event(0, 100, 3, "invoke", "acquire", {"lock": "lock"})
    assert events[2].error == "not-held" and events[2].value is None
    ops = load_any(tmp_path / "h.edn")
    assert [(o.f, o.type, o.index, o.end_index) for o in ops] == [
        ("acquire", "ok", 0, 3), ("release", "fail", 1, 2)]
    assert ops[0].value == {"lock": "lock"}


def test_jepsen_log_lines(tmp_path: Path) -> None:
    events = read_jepsen_log_events(write(tmp_path, "h.log", LOG))
    assert [(e.process, e.type, e.f) for e in events] == [
        (0, "invoke", "read"), (1, "invoke", "cas"), (0, "ok", "read"), (1, "info", "cas"),
        (6, "invoke", "write"), (6, "fail", "write"), ("nemesis", "invoke", "start"),
        ("nemesis", "ok", "start")]
    assert events[1].value == {"from": 1, "to": 2}
    assert events[2].value == {"value": 1}
    assert events[3].error == "timed-out" and events[3].value is None
    assert events[5].error == "timed-out"
    assert [e.index for e in events] == list(range(8))
    assert events[7].value == {"value": {"n1": ["n2", "n3"]}}  # EDN sets have no JSON form
    ops = load_any(tmp_path / "h.log")
    cas = next(o for o in ops if o.f == "cas")
    assert cas.type == "info" and cas.value == {"from": 1, "to": 2} and cas.error == "timed-out"


def test_guess_format(tmp_path: Path) -> None:
    assert guess_format(write(tmp_path, "a", EDN_VECTOR)) == "edn"
    assert guess_format(write(tmp_path, "b", "\n" + EDN_LINES)) == "edn"
    assert guess_format(write(tmp_path, "c", LOG)) == "jepsen-log"
    assert guess_format(write(tmp_path, "d", '{"index": 0}\n')) == "jsonl"
    with pytest.raises(HistoryError, match="cannot tell the format"):
        guess_format(write(tmp_path, "e", "hello\n"))


def test_load_any_reads_our_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    write_events(path, [Event(0, 0, 1, "invoke", "acquire", {"lock": "l", "lease_ms": 100}),
                        Event(1, 5, 1, "ok", "acquire", {"token": 7})])
    (o,) = load_any(path)
    assert (o.f, o.type, o.get("token"), o.get("lock")) == ("acquire", "ok", 7, "l")
    assert load_any(path, "jsonl") == [o]


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("[{:process 0 :type :invoke :f :read}\n {:process 0 :type :ok :f :read\n", 2,
         "not valid EDN"),
        ("{:process 0, :type :invoke, :f :read}\n{:process 0, :type :okay, :f :read}\n", 2,
         ":type must be"),
        ("{:process \"p\", :type :invoke, :f :read}\n", 1, ":process must be"),
        ("{:process :client, :type :invoke, :f :read}\n", 1, ":process must be"),
        ("{:process 0, :type :invoke}\n", 1, "no :f"),
        ("[1 2]\n", 1, "expected an op map"),
        ("{:process 0, :type :invoke, :f :read, :time -1}\n", 1, ":time must be"),
    ],
)
def test_edn_errors_name_file_and_line(tmp_path: Path, text: str, line: int, what: str) -> None:
    path = write(tmp_path, "bad.edn", text)
    with pytest.raises(HistoryError) as err:
        read_edn_events(path)
    assert err.value.path == str(path)
    assert err.value.line == line
    assert what in err.value.what


def test_log_and_pairing_errors(tmp_path: Path) -> None:
    with pytest.raises(HistoryError) as err:
        read_jepsen_log_events(write(tmp_path, "a.log", LOG + "INFO  jepsen.util - garbage\n"))
    assert err.value.line == 10
    with pytest.raises(HistoryError, match="without an invoke"):
        load_any(write(tmp_path, "b.log", "INFO  jepsen.util - 0\t:ok\t:read\t1\n"))
    with pytest.raises(HistoryError, match="no such file"):
        load_any(tmp_path / "missing.edn")
    with pytest.raises(HistoryError, match="unknown format"):
        load_any(write(tmp_path, "c.edn", EDN_LINES), "yaml")
