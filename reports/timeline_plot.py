"""The timeline figure of a run report: one lane per process (a nemesis lane on top), the
surely- and possibly-held lock intervals as bars, reads and writes as markers by outcome, the
lock libraries' lost-lock notices as stars, fault windows in the nemesis lane, and the ops of a
violation circled. Built as plain dicts with the shared helpers of reports/figures.py (which has
the latency and throughput figures).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.checker.names import fault_target
from fencecheck.reports.figures import AGG_OPS, esc, fault_colour, r6, shapes
from fencecheck.reports.timeline import NS, Interval, Lanes, Window


def _segments(
    items: Iterable[tuple[float, float, float, str]],
) -> tuple[list[float | None], list[float | None], list[str | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    texts: list[str | None] = []
    for x0, x1, y, text in items:
        xs += [r6(x0), r6(x1), None]
        ys += [y, y, None]
        texts += [text, text, None]
    return xs, ys, texts


def _interval_trace(
    name: str, ivs: Sequence[Interval], lanes: Lanes, colour: str, width: int, gl: bool, kind: str
) -> dict[str, Any]:
    xs, ys, texts = _segments(
        (
            iv.start_s,
            iv.end_s,
            lanes.of.get(iv.process, 0) + 1,
            f"{kind} lock {esc(iv.lock)} by p{esc(iv.process)} token {esc(iv.token)}<br>"
            f"{iv.start_s:.3f}–{iv.end_s:.3f} s (acquire #{iv.index})",
        )
        for iv in ivs
    )
    return {
        "type": "scattergl" if gl else "scatter",
        "mode": "lines",
        "name": name,
        "x": xs,
        "y": ys,
        "text": texts,
        "hoverinfo": "text",
        "line": {"color": colour, "width": width},
        "connectgaps": False,
    }


def _op_label(op: Op) -> str:
    parts = [f"#{op.index} p{esc(op.process)} {esc(op.f)} {op.type}"]
    if op.value:
        parts.append(esc(op.value))
    if op.error:
        parts.append("error: " + esc(op.error))
    end = "?" if op.end_time is None else f"{op.end_time / NS:.4f}"
    parts.append(f"{op.time / NS:.4f}–{end} s")
    return "<br>".join(parts)


def _io_class(op: Op) -> str:
    if op.type == "ok":
        return "accepted" if op.f == "write" else "ok"
    if op.type == "fail":
        return "rejected by fence" if op.error == "stale-token" else "failed"
    return "unknown"


IO_STYLE = {
    ("write", "accepted"): ("#38a169", "diamond"),
    ("write", "rejected by fence"): ("#c53030", "x"),
    ("write", "failed"): ("#dd6b20", "diamond-open"),
    ("write", "unknown"): ("#718096", "diamond-open"),
    ("read", "ok"): ("#63b3ed", "circle"),
    ("read", "rejected by fence"): ("#c53030", "circle-x"),
    ("read", "failed"): ("#dd6b20", "circle-open"),
    ("read", "unknown"): ("#718096", "circle-open"),
    # a lost-lock notice: the lock library told the process its lock is lost or in doubt
    ("notice", "ok"): ("#d69e2e", "star"),
}


def timeline_figure(
    ops: Sequence[Op],
    lanes: Lanes,
    surely: Sequence[Interval],
    possibly: Sequence[Interval],
    windows: Sequence[Window],
    faults: Sequence[str],
    highlight: set[int],
) -> dict[str, Any]:
    """One lane per process (y = lane + 1), the nemesis lane at y = 0."""
    n_client = sum(1 for op in ops if op.process != NEMESIS)
    big = n_client > AGG_OPS
    traces: list[dict[str, Any]] = [
        # An acquire that waits for the lock is "possibly held" while it waits, so these bars
        # cover most of a busy lane: kept faint, with the surely-held bars drawn over them.
        _interval_trace(
            "possibly held", possibly, lanes, "rgba(66,153,225,0.22)", 16, big, "possibly"
        ),
        _interval_trace("surely held", surely, lanes, "#1a365d", 9, big, "surely"),
    ]
    io_traces, marks = _io_traces(ops, lanes, highlight, big)
    traces += io_traces
    traces += _fault_lane(windows, faults)
    if marks:
        traces.append(_markers("in a violation", marks, lanes, "#e53e3e", "circle-open", 18, False))
    return {"data": traces, "layout": _timeline_layout(lanes, windows, faults)}


def _io_traces(
    ops: Sequence[Op], lanes: Lanes, highlight: set[int], big: bool
) -> tuple[list[dict[str, Any]], list[Op]]:
    """Reads and writes as markers, a trace per f and outcome (past AGG_OPS the accepted ones
    are left to the throughput plot), and the client ops of a violation, to be circled."""
    by_class: dict[tuple[str, str], list[Op]] = defaultdict(list)
    marks: list[Op] = []
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.index in highlight:
            marks.append(op)
        if op.f in ("read", "write", "notice"):
            cls = _io_class(op)
            if big and cls in ("ok", "accepted") and op.f != "notice":
                continue  # counted in the throughput plot instead
            by_class[(op.f, cls)].append(op)
    traces: list[dict[str, Any]] = []
    for (f, cls), style in IO_STYLE.items():
        group = by_class.get((f, cls))
        if not group:
            continue
        size = 12 if f == "notice" else 6 if cls in ("ok", "accepted") else 9
        name = "lost-lock notice" if f == "notice" else f"{f} {cls}"
        traces.append(_markers(name, group, lanes, style[0], style[1], size, big))
    return traces, marks


def _fault_lane(windows: Sequence[Window], faults: Sequence[str]) -> list[dict[str, Any]]:
    """Each fault window as a bar in the nemesis lane, one legend entry per fault."""
    traces: list[dict[str, Any]] = []
    for w in windows:
        colour = fault_colour(faults, w.fault)
        xs, ys, texts = _segments(
            [
                (
                    w.start_s,
                    w.end_s,
                    0,
                    f"{esc(w.fault)} {w.start_s:.3f}–{w.end_s:.3f} s"
                    + (f"<br>{esc(w.detail)}" if w.detail else ""),
                )
            ]
        )
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"fault: {esc(w.fault)}",
                "legendgroup": f"fault-{w.fault}",
                "showlegend": w is next(x for x in windows if x.fault == w.fault),
                "x": xs,
                "y": ys,
                "text": texts,
                "hoverinfo": "text",
                "line": {"color": colour, "width": 12},
            }
        )
    return traces


def _timeline_layout(
    lanes: Lanes, windows: Sequence[Window], faults: Sequence[str]
) -> dict[str, Any]:
    n_lanes = len(lanes.labels) + 1
    height = min(1600, max(260, 24 * n_lanes + 140))
    return {
        "height": height,
        "margin": {"l": 70, "r": 20, "t": 30, "b": 40},
        "xaxis": {"title": {"text": "time (s)"}, "zeroline": False},
        "yaxis": {
            "tickvals": list(range(n_lanes)),
            "ticktext": ["nemesis", *(esc(label) for label in lanes.labels)],
            "autorange": "reversed",
            "automargin": True,
            "zeroline": False,
            "fixedrange": True,
        },
        "shapes": shapes(windows, faults),
        "annotations": fault_annotations(windows),
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
    }


def fault_annotations(windows: Sequence[Window], cap: int = 80) -> list[dict[str, Any]]:
    """The nemesis lane names each fault's target at its start (`pause c5`)."""
    out = []
    for w in windows[:cap]:
        target = fault_target(w.detail)
        out.append({
            "x": w.start_s, "y": 0, "xanchor": "left", "yanchor": "bottom", "yshift": 6,
            "text": esc(f"{w.fault} {target}".strip()), "showarrow": False,
            "font": {"size": 10},
        })
    return out


def _markers(
    name: str, ops: Sequence[Op], lanes: Lanes, colour: str, symbol: str, size: int, gl: bool
) -> dict[str, Any]:
    return {
        "type": "scattergl" if gl else "scatter",
        "mode": "markers",
        "name": name,
        "x": [r6((op.end_time if op.end_time is not None else op.time) / NS) for op in ops],
        "y": [lanes.of.get(op.process, 0) + 1 for op in ops],
        "text": [_op_label(op) for op in ops],
        "customdata": [op.index for op in ops],
        "hoverinfo": "text",
        "marker": {
            "color": colour,
            "symbol": symbol,
            "size": size,
            "line": {"color": colour, "width": 2 if size > 6 else 0},
        },
    }
