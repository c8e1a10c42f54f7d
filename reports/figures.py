"""Plotly figures of a run report, built as plain dicts (plotly's JSON schema).

Building dicts rather than `plotly.graph_objects` skips per-trace validation, which is what keeps
200,000 ops well under the report's time budget. Three figures share the x axis (seconds) and the
fault shading: the timeline (one lane per process, a nemesis lane on top), latency per f, and
throughput. Past `AGG_OPS` client ops the figures aggregate: accepted reads and writes are counted
in the throughput plot instead of drawn one by one, latency becomes p50/p99 per time bin, and
traces switch to WebGL.

The timeline figure is in reports/timeline_plot.py; this module has the shared helpers (`esc`,
`shapes`, the colours, `bin_width`), the latency and throughput figures and `partition_drawing`.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from fencecheck.checker.base import NEMESIS, Op
from fencecheck.reports.timeline import (
    NS,
    Window,
    latencies_ms,
    percentile,
)

AGG_OPS = 5000
FAULT_COLOURS = ("#d69e2e", "#805ad5", "#dd6b20", "#319795", "#d53f8c", "#718096")
F_COLOURS = {
    "acquire": "#2b6cb0",
    "renew": "#4299e1",
    "release": "#805ad5",
    "read": "#2f855a",
    "write": "#dd6b20",
}
TYPE_COLOURS = {"ok": "#38a169", "fail": "#e53e3e", "info": "#a0aec0"}


def esc(value: Any) -> str:
    """Text for plotly hover labels, which render a subset of HTML: escape everything."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > 200:
        text = text[:200] + "…"
    return html.escape(text, quote=True)


def r6(x: float) -> float:
    return round(x, 6)


def fault_colour(faults: Sequence[str], fault: str) -> str:
    return FAULT_COLOURS[faults.index(fault) % len(FAULT_COLOURS)]


def shapes(windows: Sequence[Window], faults: Sequence[str]) -> list[dict[str, Any]]:
    """Fault windows shaded across the whole height of a plot."""
    return [
        {
            "type": "rect",
            "xref": "x",
            "yref": "paper",
            "x0": r6(w.start_s),
            "x1": r6(w.end_s),
            "y0": 0,
            "y1": 1,
            "fillcolor": fault_colour(faults, w.fault),
            "opacity": 0.15,
            "line": {"width": 0},
            "layer": "below",
        }
        for w in windows
    ]


def bin_width(duration_s: float, target_bins: int = 120) -> float:
    """A round bin width giving about target_bins bins."""
    raw = max(duration_s, 1e-3) / target_bins
    for unit in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60):
        if raw <= unit:
            return unit
    return 60.0 * round(raw / 60.0 + 0.5)


def latency_figure(
    ops: Sequence[Op], windows: Sequence[Window], faults: Sequence[str], duration_s: float
) -> dict[str, Any]:
    lat = latencies_ms(ops)
    big = sum(len(v) for v in lat.values()) > AGG_OPS
    traces: list[dict[str, Any]] = []
    width = bin_width(duration_s)
    for f in sorted(lat, key=lambda f: (f not in F_COLOURS, f)):
        colour = F_COLOURS.get(f, "#4a5568")
        points = lat[f]
        if not big:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": esc(f),
                    "x": [r6(t) for t, _ in points],
                    "y": [r6(ms) for _, ms in points],
                    "marker": {"color": colour, "size": 5, "opacity": 0.7},
                    "hovertemplate": "%{y:.2f} ms at %{x:.3f} s<extra>" + esc(f) + "</extra>",
                }
            )
            continue
        bins: dict[int, list[float]] = defaultdict(list)
        for t, ms in points:
            bins[int(t // width)].append(ms)
        keys = sorted(bins)
        xs = [r6((k + 0.5) * width) for k in keys]
        for q, dash in ((0.5, "solid"), (0.99, "dot")):
            ys = [percentile(sorted(bins[k]), q) for k in keys]
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{esc(f)} p{int(q * 100)}",
                    "x": xs,
                    "y": ys,
                    "line": {"color": colour, "dash": dash},
                }
            )
    return {
        "data": traces,
        "layout": {
            "height": 320,
            "margin": {"l": 60, "r": 20, "t": 30, "b": 40},
            "xaxis": {"title": {"text": "time (s)"}},
            "yaxis": {"title": {"text": "latency (ms)"}, "type": "log"},
            "shapes": shapes(windows, faults),
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        },
    }


def throughput_figure(
    ops: Sequence[Op], windows: Sequence[Window], faults: Sequence[str], duration_s: float
) -> dict[str, Any]:
    """Client op completions per second by completion type, stacked."""
    width = bin_width(duration_s)
    counts: dict[str, dict[int, int]] = {t: defaultdict(int) for t in ("ok", "fail", "info")}
    for op in ops:
        if op.process == NEMESIS:
            continue
        t = op.end_time if op.end_time is not None else op.time
        counts[op.type][int(t / NS // width)] += 1
    n_bins = int(duration_s // width) + 1
    xs = [r6((k + 0.5) * width) for k in range(n_bins)]
    traces = [
        {
            "type": "bar",
            "name": t,
            "x": xs,
            "y": [r6(counts[t].get(k, 0) / width) for k in range(n_bins)],
            "marker": {"color": TYPE_COLOURS[t]},
            "hovertemplate": "%{y:.1f} ops/s<extra>" + t + "</extra>",
        }
        for t in ("ok", "fail", "info")
    ]
    return {
        "data": traces,
        "layout": {
            "height": 280,
            "barmode": "stack",
            "bargap": 0,
            "margin": {"l": 60, "r": 20, "t": 30, "b": 40},
            "xaxis": {"title": {"text": "time (s)"}},
            "yaxis": {"title": {"text": "ops/s"}},
            "shapes": shapes(windows, faults),
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        },
    }


def partition_drawing(detail: dict[str, Any] | None, size: int = 180) -> dict[str, Any] | None:
    """A partition's grudge ({node: [nodes whose traffic it drops]}, as the partition nemesis
    records it) laid out for a small SVG: nodes on a circle, each pair's link as "cut" (dropped
    both ways), "one-way" (dropped one way) or "ok". None when the value holds no grudge."""
    grudge = (detail or {}).get("grudge")
    if not isinstance(grudge, dict) or not grudge:
        return None
    drops = {
        (str(a), str(b))
        for a, sources in grudge.items()
        if isinstance(sources, list)
        for b in sources
    }
    names = sorted({n for pair in drops for n in pair} | {str(a) for a in grudge})
    r = size / 2 - 30
    pos = {
        n: (
            round(size / 2 + r * math.cos(2 * math.pi * i / len(names) - math.pi / 2), 1),
            round(size / 2 + r * math.sin(2 * math.pi * i / len(names) - math.pi / 2), 1),
        )
        for i, n in enumerate(names)
    }
    links = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ab, ba = (a, b) in drops, (b, a) in drops
            kind = "cut" if ab and ba else "one-way" if ab or ba else "ok"
            links.append({"a": pos[a], "b": pos[b], "kind": kind})
    return {
        "size": size,
        "nodes": [{"name": n, "x": pos[n][0], "y": pos[n][1]} for n in names],
        "links": links,
        "shape": str((detail or {}).get("shape", "")),
    }
