"""What a report page says, as a reader meets it: the seed once, no empty fields for a bare
history, control characters as escapes (as the CLI shows them), a fault-window table without an
empty column, "1 run" not "1 runs", and an incident diagram whose labels do not cross their own
arrows and whose interleaving is not squeezed against its right edge by a long pause."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fencecheck.checker.names import load_names
from fencecheck.reports.compare import compare
from fencecheck.reports.html import env, static_text, write_report
from fencecheck.reports.incident_scale import Scale
from fencecheck.reports.incidents import incident_views, label_width
from fencecheck.reports.rundata import load_run
from fencecheck.reports.serve import _runs
from tests.reports.conftest import copy_run

MS = 1_000_000


def _history(run: Path, rows: list[tuple[int, Any, str, str, Any]]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "history.jsonl", "w") as fh:
        for i, (t_ms, p, typ, f, v) in enumerate(rows):
            fh.write(json.dumps({"index": i, "time": round(t_ms * MS), "process": p, "type": typ,
                                 "f": f, "value": v}) + "\n")
    return run


def _w(t: float, p: int, key: str, token: int, value: int, dt: float = 2) -> list[Any]:
    return [(t, p, "invoke", "write", {"key": key, "value": value, "token": token, "lock": key}),
            (t + dt, p, "ok", "write", None)]


def paused_holder(lock: str = "L") -> list[Any]:
    """p0 holds `lock` (lease 1 s) and is paused for over a second; p1 is granted at 1.1 s and
    writes; p0 wakes at 1.125 s and its write with the old token is accepted: the interleaving
    lasts 45 ms after a quiet second."""
    acq = {"lock": lock, "lease_ms": 1000}
    return [
        (0, 0, "invoke", "acquire", acq), (5, 0, "ok", "acquire", {"token": 1}),
        *_w(10, 0, lock, 1, 1),
        (20, "nemesis", "invoke", "start-pause", {"targets": ["c1"]}),
        (20.5, "nemesis", "ok", "start-pause", {"targets": ["c1"], "paused": ["c1"]}),
        (1100, 1, "invoke", "acquire", acq), (1103, 1, "ok", "acquire", {"token": 2}),
        *_w(1110, 1, lock, 2, 2),
        (1125, "nemesis", "invoke", "stop-pause", None),
        (1125.5, "nemesis", "ok", "stop-pause", None),
        *_w(1130, 0, lock, 1, 2),
        *_w(1140, 1, lock, 2, 3),
    ]


def _incident(run: Path) -> dict[str, Any]:
    data = load_run(run)
    [view] = incident_views(data.results, data.ops, load_names(run), {})[:1]
    return view


def test_a_long_pause_is_a_break_and_the_interleaving_gets_the_width(tmp_path: Path) -> None:
    view = _incident(_history(tmp_path / "run", paused_holder()))
    assert view["breaks"], "the quiet second is drawn shortened"
    grants = [a for a in view["arrows"] if a["cls"] == "grant"]
    bad = [a for a in view["arrows"] if a["cls"].startswith("bad")]
    assert len(grants) == 2 and bad
    # 29 ms from the next grant to the damaging write: on one linear scale over the 1.3 s
    # window that was about 17 px; now the 45 ms of interleaving share most of the width
    assert bad[0]["x0"] - grants[1]["x0"] >= 40, (grants, bad)
    xs = [a["x0"] for a in view["arrows"] if a["cls"] in ("write", "bad")]
    assert min(b - a for a, b in zip(sorted(xs), sorted(xs)[1:], strict=False)) >= 8
    labels = [t["label"] for t in view["ticks"]]
    assert len(labels) == len(set(labels)), labels  # every tick says a different time


def test_a_grant_label_crosses_neither_of_its_arrows(tmp_path: Path) -> None:
    rows = paused_holder()
    rows[6] = (300, 1, "invoke", "acquire", {"lock": "L", "lease_ms": 1000})  # a long wait
    view = _incident(_history(tmp_path / "run", rows))
    for label in (t for t in view["labels"] if t["cls"] == "grant"):
        w = label_width(label["text"])
        x0, x1 = (label["x"] - w, label["x"]) if label["anchor"] == "end" else \
            (label["x"], label["x"] + w)
        for a in view["arrows"]:
            if a["cls"] in ("req", "grant") and min(a["y0"], a["y1"]) < label["y"] < \
                    max(a["y0"], a["y1"]):
                assert not x0 <= a["x0"] <= x1, (label, a)


def test_the_scale_is_linear_when_nothing_is_quiet() -> None:
    sc = Scale(0, 1000, range(0, 1001, 100), 100.0, 900.0)
    assert not sc.breaks
    assert [sc.x(t) for t in (0, 500, 1000)] == [100.0, 500.0, 900.0]


def test_the_scale_never_runs_backwards() -> None:
    sc = Scale(0, 10_000, [0, 10, 20, 9_000, 9_010, 9_020], 0.0, 800.0)
    xs = [sc.x(t) for t in range(0, 10_001, 7)]
    assert xs == sorted(xs) and sc.breaks


def test_the_seed_is_shown_once(tmp_path: Path) -> None:
    run = copy_run("violations", tmp_path / "run")
    assert "seed" in json.loads((run / "test.json").read_text())["config"]
    page = write_report(run).read_text()
    assert page.count("<td>seed</td>") == 1


def test_a_bare_history_has_no_empty_fields(tmp_path: Path) -> None:
    run = _history(tmp_path / "bare", paused_holder())
    page = write_report(run).read_text()
    sub = re.search(r'<p class="sub">(.*?)</p>', page, re.S)
    assert sub is not None
    parts = [p.strip() for p in sub.group(1).split("·")]
    assert all(parts), parts  # no "· ·"
    assert parts[-1] == "8 operations" and "seed" not in sub.group(1)
    assert "<td>seed</td>" not in page


def test_control_characters_are_escapes_in_the_page(tmp_path: Path) -> None:
    lock = "orders\x1b[31m\u202ered"
    run = _history(tmp_path / "run", paused_holder(lock))
    page = write_report(run).read_text()
    assert "\x1b" not in page and "\u202e" not in page
    assert "orders\\x1b[31m\\u202ered" in page


def test_fault_windows_have_no_empty_column(tmp_path: Path) -> None:
    rows = paused_holder()
    rows = [r for r in rows if r[3] != "stop-pause"]  # never healed
    page = write_report(_history(tmp_path / "run", rows)).read_text()
    table = page.split("<h3>Fault windows</h3>", 1)[1].split("</table>", 1)[0]
    assert "<th></th>" not in table and table.count("<th>") == 4
    assert "no stop recorded" in table


def test_one_run_is_one_run(tmp_path: Path) -> None:
    run = copy_run("violations", tmp_path / "store" / "t" / "20261129T230000")
    html_path, _ = compare([run], tmp_path / "out")
    assert "comparison of 1 run<" in html_path.read_text()
    index = env().get_template("serve_index.html.j2").render(
        runs=_runs(tmp_path / "store"), store="s", css=static_text("report.css"))
    assert "1 run, newest first" in index
