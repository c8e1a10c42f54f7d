"""The comparison matrix: many runs side by side, as HTML and CSV.

`summarize(run_dir)` reduces one run to a row (configuration, verdict, violation counts by kind,
availability, latency, time to first violation); `matrix(rows)` groups rows by backend × client ×
resource × nemesis × fencing with pandas; `compare(paths, out_dir)` writes both files, each cell
linking to its runs' reports (written first where missing).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import pandas as pd
from markupsafe import Markup

from fencecheck.checker.base import NEMESIS
from fencecheck.reports.html import env, static_text, write_atomic, write_report
from fencecheck.reports.rundata import ReportError, RunData, find_runs, load_run, violation_counts
from fencecheck.reports.timeline import NS, percentile

log = logging.getLogger(__name__)

KINDS = (
    "double-grant",
    "token-regression",
    "stale-write-accepted",
    "interleaved-writes",
    "lost-update",
    "not-linearizable",
)
CONFIG_KEYS = ("backend", "client", "resource", "nemesis", "fencing")
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
    nemesis: str
    fencing: str
    verdict: str
    violations: dict[str, int]  # by kind, all counted (checks cap what they list)
    ok_frac: float | None  # client ops that completed ok
    p50_ms: float | None
    p99_ms: float | None
    first_violation_s: float | None
    report: Path | None


def _text(value: Any) -> str:
    if value is None:
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
    for check in ((run.results or {}).get("checks") or {}).values():
        if not isinstance(check, dict):
            continue
        first = check.get("first_violation_ns")
        if isinstance(first, int | float):
            times.append(first)
            continue
        for v in check.get("violations") or []:
            op_times = [o["time_ns"] for o in v.get("ops") or []
                        if isinstance(o.get("time_ns"), int)]
            if op_times:
                times.append(max(op_times))
    return min(times) / NS if times else None


def summarize(run_dir: Path, *, write_missing_report: bool = True) -> RunSummary:
    run = load_run(run_dir)
    cfg = run.config
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
        started=str(run.test.get("started", run.run_dir.name)),
        backend=_text(cfg.get("backend")),
        client=_text(cfg.get("client")),
        resource=_text(cfg.get("resource")),
        nemesis=_text(cfg.get("nemesis")),
        fencing=_text(cfg.get("fencing")),
        verdict=run.verdict,
        violations={**dict.fromkeys(KINDS, 0), **violation_counts(run.results)},
        ok_frac=sum(op.ok for op in client_ops) / len(client_ops) if client_ops else None,
        p50_ms=percentile(lat, 0.5),
        p99_ms=percentile(lat, 0.99),
        first_violation_s=_first_violation_s(run),
        report=report,
    )


def _worst(verdicts: pd.Series) -> str:
    present = set(verdicts)
    return next(v for v in VERDICT_ORDER if v in present)


def runs_frame(rows: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per run, violation kinds as columns."""
    records = []
    for r in rows:
        d = asdict(r)
        counts = d.pop("violations")
        d.update({k: counts.get(k, 0) for k in (*KINDS, *sorted(set(counts) - set(KINDS)))})
        records.append(d)
    return pd.DataFrame.from_records(records)


def matrix(rows: Sequence[RunSummary]) -> pd.DataFrame:
    """backend × client × resource × nemesis × fencing → verdict, counts, availability, latency."""
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
    }
    grouped: pd.DataFrame = df.groupby(list(CONFIG_KEYS), sort=True, dropna=False).agg(**agg)
    return grouped


def _rel(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target, start)).as_posix()


def _href(target: Path, start: Path) -> str:
    """A relative link, percent-encoded: a test named "javascript:x" stays a path."""
    return quote(_rel(target, start), safe="/")


def compare(
    paths: Sequence[Path], out_dir: Path, *, preamble_html: str = ""
) -> tuple[Path, Path]:
    """Write out_dir/compare.html and out_dir/compare.csv for every run found in paths.

    preamble_html, trusted markup the caller has escaped (e.g. a matrix's expectations), goes at
    the top of the page."""
    run_dirs = find_runs(paths)
    if not run_dirs:
        where = ", ".join(map(str, paths))
        raise ReportError(f"no run directories (with test.json) found in {where}")
    rows = [summarize(d) for d in run_dirs]
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir = out_dir.resolve()
    m = matrix(rows)
    csv_path = out_dir / "compare.csv"
    table = m.reset_index()
    table["reports"] = [
        ";".join(
            _rel(r.report or r.run_dir, out_dir)
            for r in rows
            if tuple(getattr(r, k) for k in CONFIG_KEYS) == tuple(key)
        )
        for key in m.index
    ]
    write_atomic(csv_path, table.to_csv(index=False, float_format="%.6g"))
    html_path = out_dir / "compare.html"
    write_atomic(html_path, _render(rows, m, out_dir, preamble_html))
    log.info("wrote %s and %s", html_path, csv_path)
    return html_path, csv_path


def _fmt_num(x: Any, spec: str) -> str:
    return "–" if x is None or (isinstance(x, float) and x != x) else format(x, spec)


def _render(
    rows: Sequence[RunSummary], m: pd.DataFrame, out_dir: Path, preamble_html: str = ""
) -> str:
    kinds = [c for c in m.columns if c not in (
        "runs", "verdict", "invalid_runs", "ok_frac", "p50_ms", "p99_ms", "first_violation_s"
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
        table.append(
            {
                "config": dict(zip(CONFIG_KEYS, k, strict=True)),
                "runs": int(row["runs"]),
                "verdict": row["verdict"],
                "invalid_runs": int(row["invalid_runs"]),
                "kinds": [int(row[c]) for c in kinds],
                "ok": _fmt_num(None if pd.isna(row["ok_frac"]) else 100 * row["ok_frac"], ".1f"),
                "p50": _fmt_num(row["p50_ms"], ".2f"),
                "p99": _fmt_num(row["p99_ms"], ".2f"),
                "ttfv": _fmt_num(row["first_violation_s"], ".3f"),
                "links": links(k),
            }
        )
    # The grid: one row per backend/client/resource/fencing, one column per nemesis.
    nemeses = sorted({t["config"]["nemesis"] for t in table})
    grid: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
    for t in table:
        c = t["config"]
        grid.setdefault((c["backend"], c["client"], c["resource"], c["fencing"]), {})[
            c["nemesis"]
        ] = t
    return env().get_template("compare.html.j2").render(
        table=table,
        kinds=kinds,
        nemeses=nemeses,
        grid=sorted(grid.items()),
        n_runs=len(rows),
        preamble=Markup(preamble_html),
        css=static_text("report.css"),
    )
