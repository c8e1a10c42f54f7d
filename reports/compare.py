"""The comparison matrix: many runs side by side, as HTML and CSV.

`summarize(run_dir)` reduces one run to a row (configuration, verdict, violation counts by kind,
availability, latency, time to first violation, the lock library's lost-lock notices: none, or their
median lead or lag against the grants' surely-held ends); `matrix(rows)` groups rows by backend ×
client × resource × workload × nemesis × fencing with pandas; `compare(paths, out_dir)` writes both
files, each cell linking to its runs' reports (written first where missing). Given expectations (a
test name's "must-find" or "must-pass", or a matrix's rows), a configuration shows whether it met
them: violations found where they must be are green, "found as expected". CSV cells a spreadsheet
would read as a formula are escaped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import pandas as pd
from msgspec import UNSET

from fencecheck.checker.base import NEMESIS
from fencecheck.checker.notices import NAME as NOTICES
from fencecheck.checker.registry import kind_names
from fencecheck.records.base import write_atomic
from fencecheck.reports.html import env, static_text, write_report
from fencecheck.reports.rundata import ReportError, RunData, find_runs, load_run, violation_counts
from fencecheck.reports.timeline import NS, percentile

log = logging.getLogger(__name__)

# The violation kinds as columns, in the checks' order: read from the check registry, so a new
# check's kinds are columns too (and `duplicate-effect`, which a fixed list here had left out).
KINDS = kind_names()
CONFIG_KEYS = ("backend", "client", "resource", "workload", "nemesis", "fencing")
EXPECTED_VERDICT = {"must-find": "invalid", "must-pass": "valid"}
# A cell beginning with one of these is a formula to a spreadsheet (OWASP's CSV injection list).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Worst first: a configuration's verdict is the worst of its runs'.
VERDICT_ORDER = ("invalid", "unknown", "no results", "valid")


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_dir: Path
    name: str
    started: str
    backend: str
    client: str
    resource: str
    workload: str
    nemesis: str
    fencing: str
    verdict: str
    violations: dict[str, int]  # by kind, all counted (checks cap what they list)
    ok_frac: float | None  # client ops that completed ok
    p50_ms: float | None
    p99_ms: float | None
    first_violation_s: float | None
    report: Path | None
    expect: str | None = None  # "must-find" or "must-pass", where the caller said
    # lost-lock notices (checker.notices): how many, and the run's median lead (ms; < 0 a lag)
    notices: int = 0
    notice_lead_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ExpectedRow:
    """A matrix row and how its runs went, for the expectations section of the page."""

    label: str
    expect: str
    met: bool
    verdicts: str
    links: tuple[tuple[str, Path], ...]  # (label, report or run folder)


def outcome(expect: str | None, verdicts: Sequence[str]) -> tuple[str, str]:
    """(css class, text) of runs judged against an expectation: "found as expected" (green)
    when violations were to be found and were, "MISSED: …" (red) when not met."""
    if not expect or expect not in EXPECTED_VERDICT:
        worst = next((v for v in VERDICT_ORDER if v in set(verdicts)), "no results")
        return f"cell-{worst.replace(' ', '-')}", worst
    want = EXPECTED_VERDICT[expect]
    if verdicts and all(v == want for v in verdicts):
        return "cell-met", "found as expected" if want == "invalid" else "passed as expected"
    return "cell-missed", ("MISSED: no violations found" if want == "invalid"
                           else "MISSED: violations found" if "invalid" in verdicts
                           else "MISSED: not judged")


def csv_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, prefixed with ' so that it is text."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def _text(value: Any) -> str:
    if value is None or value is UNSET:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return "+".join(str(v) for v in value) or "none"
    return str(value)


def _first_violation_s(run: RunData) -> float | None:
    """The earliest time a violation was evident: the first-violation times the checks report,
    else the latest op of each violation."""
    times: list[float] = []
    for check in (run.results.checks if run.results is not None else {}).values():
        if check.first_violation_ns is not UNSET:
            times.append(check.first_violation_ns)
            continue
        for v in check.violations:
            if v.ops:
                times.append(max(o.time_ns for o in v.ops))
    return min(times) / NS if times else None


def summarize(run_dir: Path, *, write_missing_report: bool = True,
              expect: str | None = None) -> RunSummary:
    run = load_run(run_dir)
    cfg = run.settings
    client_ops = [op for op in run.ops if op.process != NEMESIS]
    lat = sorted(
        (op.end_time - op.time) / 1e6 for op in client_ops if op.end_time is not None
    )
    report: Path | None = run.run_dir / "report.html"
    if not (run.run_dir / "report.html").is_file():
        report = write_report(run.run_dir) if write_missing_report and run.ops else None
    return RunSummary(
        run_dir=run.run_dir,
        name=run.name,
        started=run.run_dir.name if run.test.started is UNSET else run.test.started,
        backend=_text(cfg.backend),
        client=_text(cfg.client),
        resource=_text(cfg.resource),
        workload=_text("lock" if cfg.workload is UNSET else cfg.workload),
        nemesis=_text(cfg.nemesis),
        fencing=_text(cfg.fencing),
        verdict=run.verdict,
        violations={**dict.fromkeys(KINDS, 0), **violation_counts(run.results)},
        ok_frac=sum(op.ok for op in client_ops) / len(client_ops) if client_ops else None,
        p50_ms=percentile(lat, 0.5),
        p99_ms=percentile(lat, 0.99),
        first_violation_s=_first_violation_s(run),
        report=report,
        expect=expect,
        **_notices(run),
    )


def _notices(run: RunData) -> dict[str, Any]:
    """The notices check's count and median lead (results.json), for the "notice" column."""
    check = run.results.checks.get(NOTICES) if run.results is not None else None
    if check is None:
        return {}
    lead = check.extra.get("median_lead_ns")
    return {"notices": int(check.extra.get("notices", 0)),
            "notice_lead_ms": lead / 1e6 if isinstance(lead, int) else None}


def notice_text(notices: Any, lead_ms: Any) -> str:
    """The "notice" column: none, no lease, or the median lead / lag in ms."""
    if not notices or pd.isna(notices):
        return "none"
    if lead_ms is None or pd.isna(lead_ms):
        return "no lease to compare"
    return f"lead {lead_ms:.0f} ms" if lead_ms >= 0 else f"lag {-lead_ms:.0f} ms"


def _worst(verdicts: pd.Series) -> str:
    present = set(verdicts)
    return next(v for v in VERDICT_ORDER if v in present)


def runs_frame(rows: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per run, violation kinds as columns."""
    records = []
    for r in rows:
        d = asdict(r)
        counts = d.pop("violations")
        d["expect"] = d["expect"] or ""
        d.update({k: counts.get(k, 0) for k in (*KINDS, *sorted(set(counts) - set(KINDS)))})
        records.append(d)
    return pd.DataFrame.from_records(records)


def matrix(rows: Sequence[RunSummary]) -> pd.DataFrame:
    """backend × client × resource × workload × nemesis × fencing → verdict, counts,
    availability, latency, expectation."""
    df = runs_frame(rows)
    kinds = [c for c in df.columns if c in KINDS or c not in asdict(rows[0])]
    agg: dict[str, Any] = {
        "runs": ("verdict", "size"),
        "verdict": ("verdict", _worst),
        "invalid_runs": ("verdict", lambda s: int((s == "invalid").sum())),
        **{k: (k, "sum") for k in kinds},
        "ok_frac": ("ok_frac", "mean"),
        "p50_ms": ("p50_ms", "median"),
        "p99_ms": ("p99_ms", "max"),
        "first_violation_s": ("first_violation_s", "min"),
        "notices": ("notices", "sum"),
        "notice_lead_ms": ("notice_lead_ms", "median"),
        "expect": ("expect", lambda s: "+".join(sorted(set(s) - {""}))),
    }
    grouped: pd.DataFrame = df.groupby(list(CONFIG_KEYS), sort=True, dropna=False).agg(**agg)
    return grouped


def _rel(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target, start)).as_posix()


def _href(target: Path, start: Path) -> str:
    """A relative link, percent-encoded: a test named "javascript:x" stays a path."""
    return quote(_rel(target, start), safe="/")


def compare(
    paths: Sequence[Path], out_dir: Path, *, expectations: Mapping[str, str] | None = None,
    expected_rows: Sequence[ExpectedRow] = (),
) -> tuple[Path, Path]:
    """Write out_dir/compare.html and out_dir/compare.csv for every run found in paths.

    expectations: test name -> "must-find" or "must-pass"; expected_rows: a matrix's rows, shown
    first (what a nightly reader looks for is the missed rows)."""
    run_dirs = find_runs(paths)
    if not run_dirs:
        where = ", ".join(map(str, paths))
        raise ReportError(f"no run directories (with test.json) found in {where}")
    for name, expect in (expectations or {}).items():
        if expect not in EXPECTED_VERDICT:
            raise ReportError(f"expectation of {name!r}: {expect!r} is not must-find or "
                              "must-pass")
    rows = []
    for d in run_dirs:
        r = summarize(d)
        rows.append(replace(r, expect=(expectations or {}).get(r.name)))
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir = out_dir.resolve()
    m = matrix(rows)
    csv_path = out_dir / "compare.csv"
    table = m.reset_index()
    table["outcome"] = [
        outcome(str(row["expect"]) or None, [
            r.verdict for r in rows
            if tuple(getattr(r, k) for k in CONFIG_KEYS) == cast(tuple[Any, ...], key)
        ])[1]
        for key, row in m.iterrows()
    ]
    table["reports"] = [
        ";".join(
            _rel(r.report or r.run_dir, out_dir)
            for r in rows
            if tuple(getattr(r, k) for k in CONFIG_KEYS) == tuple(key)
        )
        for key in m.index
    ]
    table = table.apply(lambda col: col.map(csv_safe))
    table.columns = [csv_safe(c) for c in table.columns]
    write_atomic(csv_path, table.to_csv(index=False, float_format="%.6g"))
    html_path = out_dir / "compare.html"
    write_atomic(html_path, _render(rows, m, out_dir, expected_rows))
    log.info("wrote %s and %s", html_path, csv_path)
    return html_path, csv_path


def _fmt_num(x: Any, spec: str) -> str:
    return "–" if x is None or (isinstance(x, float) and x != x) else format(x, spec)


def _render(
    rows: Sequence[RunSummary], m: pd.DataFrame, out_dir: Path,
    expected_rows: Sequence[ExpectedRow] = (),
) -> str:
    kinds = [c for c in m.columns if c not in (
        "runs", "verdict", "invalid_runs", "ok_frac", "p50_ms", "p99_ms", "first_violation_s",
        "expect", "notices", "notice_lead_ms",
    )]
    by_key: dict[tuple[str, ...], list[RunSummary]] = {}
    for r in sorted(rows, key=lambda r: r.started, reverse=True):
        by_key.setdefault(tuple(getattr(r, k) for k in CONFIG_KEYS), []).append(r)

    def links(key: tuple[str, ...]) -> list[dict[str, str]]:
        return [
            {
                "href": _href(r.report or r.run_dir, out_dir),
                "label": r.run_dir.name,
                "verdict": r.verdict,
            }
            for r in by_key.get(key, [])
        ]

    table = []
    for key, row in m.iterrows():
        k = tuple(str(x) for x in cast(tuple[Any, ...], key))
        expect = str(row["expect"]) or None
        cls, text = outcome(expect, [lk["verdict"] for lk in links(k)])
        table.append(
            {
                "expect": expect or "",
                "cls": cls,
                "outcome": text,
                "config": dict(zip(CONFIG_KEYS, k, strict=True)),
                "runs": int(row["runs"]),
                "verdict": row["verdict"],
                "invalid_runs": int(row["invalid_runs"]),
                "kinds": [int(row[c]) for c in kinds],
                "ok": _fmt_num(None if pd.isna(row["ok_frac"]) else 100 * row["ok_frac"], ".1f"),
                "p50": _fmt_num(row["p50_ms"], ".2f"),
                "p99": _fmt_num(row["p99_ms"], ".2f"),
                "ttfv": _fmt_num(row["first_violation_s"], ".3f"),
                "notice": notice_text(row["notices"], row["notice_lead_ms"]),
                "links": links(k),
            }
        )
    # The grid: one row per backend/client/resource/workload/fencing, one column per nemesis.
    nemeses = sorted({t["config"]["nemesis"] for t in table})
    grid: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
    for t in table:
        c = t["config"]
        grid.setdefault(
            (c["backend"], c["client"], c["resource"], c["workload"], c["fencing"]), {}
        )[c["nemesis"]] = t
    expected = [
        {
            "label": e.label, "expect": e.expect, "met": e.met, "verdicts": e.verdicts,
            "outcome": outcome(e.expect, [EXPECTED_VERDICT.get(e.expect, "?")])[1]
            if e.met else "MISSED",
            "links": [{"label": lb, "href": _href(p, out_dir)} for lb, p in e.links],
        }
        for e in expected_rows
    ]
    return env().get_template("compare.html.j2").render(
        table=table,
        kinds=kinds,
        nemeses=nemeses,
        grid=sorted(grid.items()),
        n_runs=len(rows),
        expected=expected,
        missed=sum(not e.met for e in expected_rows),
        css=static_text("report.css"),
    )
