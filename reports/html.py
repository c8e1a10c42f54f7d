"""The per-run HTML report: `write_report(run_dir)` writes `run_dir/report.html`.

jinja2 (autoescape on) renders `templates/report.html.j2`; plotly draws the figures of
`reports.figures` in the browser; the incident view at the top (`reports.incidents`) is inline SVG
drawn here. The page fetches nothing from the network, and a run folder copied alone (a CI
artifact) still renders: plotly's JS, from the installed plotly package, sits in the run folder
itself (`plotly-<version>.min.js`, 4.8 MB, hard-linked to one copy in `<store>/_static/` so a
store holds it once on disk) and the page names it by a relative path.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import markupsafe
from msgspec import UNSET

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.checker.names import ProcessNames, load_names
from fencecheck.records.base import write_atomic
from fencecheck.records.results import OpRef, Results, Violation, check_details
from fencecheck.records.text import visible
from fencecheck.reports import figures, timeline_plot
from fencecheck.reports.incidents import incident_views
from fencecheck.reports.rundata import RunData, load_run, store_of, violation_counts
from fencecheck.reports.timeline import (
    NS,
    assign_lanes,
    availability,
    fault_windows,
    held_intervals,
    history_end_ns,
)

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def _shown(value: Any) -> Any:
    """Every text the templates print, as the CLI shows it: a control or bidi character in a
    lock name or an error is an escape (records/text.py), never raw in the page. Markup (the
    page's own CSS, JS and JSON, marked safe) is left alone."""
    if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
        return visible(value)
    return value


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """jinja's folder of compiled templates, or none where it cannot make one (it refuses a
    temporary directory it does not own): the templates are then compiled each time."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError) as e:
        log.debug("no cache of compiled templates: %s", e)
        return None


@cache
def env() -> jinja2.Environment:
    e = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
        # Compiling the templates was a tenth of a short run's controller CPU; jinja keeps the
        # compiled code in a private folder of the temporary directory, keyed by each
        # template's source, so an edited template is compiled anew.
        bytecode_cache=_bytecode_cache(),
    )
    # Plain JSON text, escaped like any other text (jinja's own tojson is for <script> only).
    e.filters["json"] = lambda v: json.dumps(v, default=str)
    # A relative link made from a file name: percent-encoded, so that a name such as
    # "javascript:x" or "a#b" stays a path.
    e.filters["urlpath"] = lambda v: quote(str(v), safe="/")
    return e


def script_json(data: Any) -> str:
    """JSON safe inside <script>: no `</script>`, `<!--` or line separators can break out."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def plotly_js(target_dir: Path) -> Path:
    """plotly's minified JS from the installed package, written once into target_dir."""
    import plotly
    from plotly.offline import get_plotlyjs

    path = target_dir / f"plotly-{plotly.__version__}.min.js"
    if not path.is_file():
        target_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(path, get_plotlyjs())
        log.debug("wrote %s", path)
    return path


def carry_plotly_js(run_dir: Path) -> Path:
    """plotly's JS inside run_dir, so the folder renders when copied alone. In a store it is a
    hard link to `<store>/_static/`'s copy (one copy on disk); a copy where links cannot be
    made (another file system)."""
    store = store_of(run_dir)
    if store is None:
        return plotly_js(run_dir)
    shared = plotly_js(store / "_static")
    path = run_dir / shared.name
    if path.is_file():
        return path
    try:
        os.link(shared, path)
    except FileExistsError:
        pass
    except OSError:
        write_atomic(path, shared.read_text(encoding="utf-8"))
    return path


def static_text(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _op_row(op: Op | None, ref: OpRef, names: ProcessNames | None = None
            ) -> dict[str, Any]:
    """A violation's op for the template: what the history says, located on the timeline."""
    return _row(op, ref.index, ref.process, "" if ref.f is UNSET else ref.f, ref.token,
                ref.time_ns, names)


def _extra_row(op: Op | None, index: int, extra: dict[str, Any]) -> dict[str, Any]:
    """An op named in a violation's extra field (open JSON: a counterexample's `op`)."""
    return _row(op, index, extra.get("process"), extra.get("f", ""), extra.get("token"),
                int(extra.get("time_ns", extra.get("time")) or 0))


def _row(op: Op | None, index: int, process: Any, f: Any, token: Any, time_ns: int,
         names: ProcessNames | None = None) -> dict[str, Any]:
    t0 = (op.time if op else time_ns) / NS
    end = op.end_time if op is not None else None
    t1 = end / NS if end is not None else t0
    return {
        "index": index,
        "process": names.label(process) if names else _fmt(process),
        "f": op.f if op else _fmt(f),
        "type": op.type if op else "",
        "token": _fmt(token),
        "value": _fmt(op.value) if op and op.value is not None else "",
        "error": (op.error or "") if op else "",
        "t0": t0,
        "t1": t1,
    }


def _extras(v: Violation, by_index: dict[int, Op]) -> list[dict[str, Any]]:
    """A violation's other fields (e.g. a linearizability counterexample) for display: op indexes
    become timeline links, the rest is shown as JSON text."""
    out: list[dict[str, Any]] = []
    fields = {} if v.time_ns is UNSET else {"time_ns": v.time_ns}
    for k, val in {**fields, **v.extra}.items():
        if k.endswith("_ns") and isinstance(val, int | float):
            out.append({"name": k, "ops": None, "text": f"{val / NS:.4f} s"})
            continue
        refs = _as_refs(val, names_ops=any(w in k for w in ("op", "prefix", "index")))
        if refs is not None:
            ops = [_extra_row(by_index.get(i), i, r) for i, r in refs]
            out.append({"name": k, "ops": ops, "text": None})
        else:
            out.append({"name": k, "ops": None, "text": _fmt(val)})
    return out


def _as_refs(val: Any, names_ops: bool) -> list[tuple[int, dict[str, Any]]] | None:
    """Op references in a value: dicts with an "index", or bare indexes under a key that names
    ops (e.g. a counterexample's "prefix")."""
    items = val if isinstance(val, list) else [val]
    if not items:
        return None
    refs: list[tuple[int, dict[str, Any]]] = []
    for item in items:
        if names_ops and isinstance(item, int) and not isinstance(item, bool):
            refs.append((item, {}))
        elif isinstance(item, dict) and isinstance(item.get("index"), int):
            refs.append((item["index"], item))
        else:
            return None
    return refs


def _cards(violations: Sequence[tuple[str, Violation]], by_index: dict[int, Op],
           names: ProcessNames | None = None) -> list[dict[str, Any]]:
    cards = []
    for n, (check, v) in enumerate(violations):
        rows = [_op_row(by_index.get(r.index), r, names) for r in v.ops]
        extras = _extras(v, by_index)
        spans = rows + [o for e in extras if e["ops"] for o in e["ops"]]
        cards.append(
            {
                "n": n + 1,
                "kind": v.kind,
                "check": check,
                "where": (
                    f"lock {v.lock}" if v.lock is not UNSET
                    else f"key {v.key}" if v.key is not UNSET else ""
                ),
                "explanation": v.explanation,
                "incident": None if v.incident is UNSET else v.incident,
                "ops": rows,
                "extras": extras,
                "t0": min((o["t0"] for o in spans), default=0.0),
                "t1": max((o["t1"] for o in spans), default=0.0),
            }
        )
    return cards


def _checks(results: Results | None) -> list[dict[str, Any]]:
    rows = []
    for name, c in (results.checks if results is not None else {}).items():
        details = {k: _fmt(v) for k, v in check_details(c).items()}
        rows.append(
            {
                "name": name,
                "valid": _fmt(c.valid),
                "violations": len(c.violations),
                "skipped": "" if c.skipped is UNSET else c.skipped,
                "details": details,
            }
        )
    return rows


def _run_files(run: RunData) -> list[str]:
    """The run directory's own files (history, results, the nemesis log, ...), main ones first."""
    main = ("history.jsonl", "results.json", "test.json")
    logs = {p.as_posix() for p in run.logs}
    others = sorted(
        p.name
        for p in run.run_dir.iterdir()
        if p.is_file()
        and p.name not in main
        and p.name not in logs
        and p.name != "report.html"
        and not p.name.startswith((".", "plotly-"))
    )
    return [f for f in main if (run.run_dir / f).is_file()] + others


def _relative(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target, start)).as_posix()


def _subtitle(run: RunData, n_ops: int, seed: str) -> list[str]:
    """The parts of the line under the verdict that the run recorded (a bare history has no
    run id, start, duration or seed: those are left out, not shown empty)."""
    test = run.test
    parts = [run.name]
    if test.run_id is not UNSET and test.run_id:
        parts.append(f"run {test.run_id}")
    if test.started is not UNSET and test.started:
        parts.append(str(test.started))
    if test.duration_s is not UNSET:
        parts.append(f"{test.duration_s:.1f} s")
    parts.append(f"{n_ops} operation{'s' if n_ops != 1 else ''}")
    if seed:
        parts.append(f"seed {seed}")
    return parts


def render_report(run: RunData, plotly_src: str) -> str:
    """The report page of a run, with plotly's JS at the relative URL plotly_src."""
    ops = run.ops
    by_index = {op.index: op for op in ops}
    violations = run.violations
    names = load_names(run.run_dir)
    cards = _cards(violations, by_index, names)
    card_of: dict[tuple[str, int], int] = {}
    for name, check in (run.results.checks if run.results is not None else {}).items():
        for pos in range(len(check.violations)):
            card_of[(name, pos)] = len(card_of) + 1
    incidents = incident_views(run.results, ops, names, card_of)
    highlight = {
        o["index"] for c in cards for o in c["ops"] if isinstance(o["index"], int)
    }
    end_ns = history_end_ns(ops)
    windows = fault_windows(ops, end_ns)
    faults = sorted({w.fault for w in windows})
    duration_s = end_ns / NS
    lanes = assign_lanes(ops, name=names.label)
    surely, possibly = held_intervals(ops, end_ns=end_ns)
    n_client = sum(1 for op in ops if op.process != NEMESIS)
    figs = {
        "timeline": timeline_plot.timeline_figure(
            ops, lanes, surely, possibly, windows, faults, highlight
        ),
        "latency": figures.latency_figure(ops, windows, faults, duration_s),
        "throughput": figures.throughput_figure(ops, windows, faults, duration_s),
    }
    test = run.test
    config = run.config
    versions = {} if test.versions is UNSET else test.versions
    verdict = run.verdict
    kinds = Counter(c["kind"] for c in cards)
    for kind, n in violation_counts(run.results).items():  # checks list at most 100 each
        kinds[kind] = max(kinds[kind], n)
    seed = _fmt("" if (seed := test.run_seed) is UNSET else seed)
    context = {
        "title": run.name,
        "subtitle": _subtitle(run, len(ops), seed),
        "run_id": run.run_dir.name if test.run_id is UNSET else test.run_id,
        "run_dir_name": run.run_dir.name,
        "exit_code": None if test.exit_code is UNSET else test.exit_code,
        "verdict": verdict,
        "kinds": sorted(kinds.items()),
        "n_violations": sum(kinds.values()),
        "cards": cards,
        "incidents": incidents,
        "groups": [
            {"kind": kind, "cards": [c for c in cards if c["kind"] == kind]}
            for kind in dict.fromkeys(c["kind"] for c in cards)
        ],
        "shown_per_kind": 2,
        "n_ops": len(ops),
        "n_client": n_client,
        "aggregated": n_client > figures.AGG_OPS,
        "n_lanes": len(lanes.labels),
        "n_processes": len(lanes.of),
        "history_s": duration_s,
        "windows": windows,
        "grants": len(possibly),
        "availability": availability(ops, windows),
        "checks": _checks(run.results),
        "stats": {k: _fmt(v) for k, v in (run.results.stats if run.results else {}).items()},
        "config": {k: _fmt(v) for k, v in config.items()},
        "seed": seed,
        "versions": {k: _fmt(v) for k, v in versions.items()},
        "logs": [p.as_posix() for p in run.logs],
        "files": _run_files(run),
        "partition_drawing": figures.partition_drawing,
        "plotly_src": plotly_src,
        "css": static_text("report.css"),
        "js": static_text("report.js"),
        "data_json": script_json({"figures": figs}),
    }
    return env().get_template("report.html.j2").render(context)


def write_report(run_dir: Path) -> Path:
    """Render run_dir/report.html from its history and results; returns its path."""
    run = load_run(run_dir)
    js = carry_plotly_js(run.run_dir)
    out = run.run_dir / "report.html"
    write_atomic(out, render_report(run, _relative(js, run.run_dir)))
    log.info("wrote %s", out)
    return out
