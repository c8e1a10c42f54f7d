"""The time axis of an incident diagram: linear, except across a quiet stretch.

An incident's window runs from the stale grant to the damage, and the pause that makes a grant
stale is usually seconds long while the interleaving it causes (the next grant, the successor's
writes, the stale holder's late write) lasts milliseconds. On one linear scale the interleaving,
the thing the diagram exists to show, would be squeezed into a few pixels at the right edge. So a
stretch in which nothing is drawn and that is longer than everything else still drawn to scale
becomes a *break* of `BREAK_PX` pixels, marked on the axis with the time it stands for;
the rest of the width is shared linearly by the other stretches (the window's margins before the
first and after the last thing drawn are a few pixels, not time to scale). Time never runs
backwards: the scale is monotonic everywhere, and the ticks say what time each place is.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

NS = 1e9
BREAK_PX = 44  # the width a quiet stretch is drawn with
EDGE_PX = 16  # the margins before the first thing drawn and after the last
MAX_BREAKS = 2
TICK_PX = 110  # about one tick per this many pixels of a linear piece
TICK_CHAR_PX = 6.0  # about how wide a 10 px tick label's character is


@dataclass(frozen=True, slots=True)
class Break:
    """A quiet stretch drawn shortened: from x0 to x1, standing for `seconds`."""

    x0: float
    x1: float
    seconds: float


class Scale:
    """Time (ns) to x (px) between `left` and `right` for the window [t0, t1], given every time
    something is drawn at (`times`). The stretches before the first and after the last of them
    are margins of EDGE_PX, not time to scale."""

    def __init__(self, t0: int, t1: int, times: Iterable[int], left: float, right: float) -> None:
        self.t0, self.t1 = t0, max(t1, t0 + 1)
        self.left, self.right = left, right
        knots = sorted({t0, self.t1, *(min(max(t, t0), self.t1) for t in times)})
        gaps = [b - a for a, b in itertools.pairwise(knots)]
        edges = {0, len(gaps) - 1} if len(gaps) >= 3 and gaps[0] and gaps[-1] else set()
        inner = [0 if i in edges else g for i, g in enumerate(gaps)]
        quiet = _quiet(inner)
        busy = sum(g for i, g in enumerate(inner) if i not in quiet)
        if busy == 0:  # nothing drawn to scale: a plain linear scale
            edges, quiet, busy = set(), set(), self.t1 - t0
        fixed = BREAK_PX * len(quiet) + EDGE_PX * len(edges)
        px_per_ns = (right - left - fixed) / busy
        xs = [left]
        for i, g in enumerate(gaps):
            xs.append(xs[-1] + (BREAK_PX if i in quiet else EDGE_PX if i in edges
                                else g * px_per_ns))
        self.knots, self.xs = knots, xs
        self.first, self.last = (knots[1], knots[-2]) if edges else (self.t0, self.t1)
        self.breaks = [Break(xs[i], xs[i + 1], gaps[i] / NS) for i in sorted(quiet)]

    def x(self, t: int) -> float:
        t = min(max(t, self.t0), self.t1)
        i = min(bisect.bisect_right(self.knots, t) - 1, len(self.knots) - 2)
        a, b = self.knots[i], self.knots[i + 1]
        frac = (t - a) / (b - a) if b > a else 0.0
        return round(self.xs[i] + frac * (self.xs[i + 1] - self.xs[i]), 1)

    def ticks(self) -> list[tuple[float, str, str]]:
        """(x, label, anchor) of the axis ticks: spread over each linear piece, none inside a
        break, labelled with as many decimals as their spacing needs. The ticks on a break's
        edges say where it starts and ends (anchored away from it, so the two never meet); a
        tick whose label would overlap one kept before it is left out."""
        pieces: list[tuple[int, int]] = []
        start = self.first
        for i in range(len(self.knots) - 1):
            if any(b.x0 == self.xs[i] and b.x1 == self.xs[i + 1] for b in self.breaks):
                pieces.append((start, self.knots[i]))
                start = self.knots[i + 1]
        pieces.append((start, self.last))
        kept: list[tuple[float, str, str]] = []
        for n_piece, (a, b) in enumerate(pieces):
            n = max(1, round((self.x(b) - self.x(a)) / TICK_PX))
            step = (b - a) / n
            decimals = max(2, min(6, math.ceil(-math.log10(step / NS)) + 1)) if step else 3
            for k in range(n + 1):
                t = a + round(step * k)
                edge = ("start" if k == 0 and n_piece > 0 else
                        "end" if k == n and n_piece < len(pieces) - 1 else "middle")
                tick = (self.x(t), f"{t / NS:.{decimals}f} s", edge)
                while kept and _overlap(kept[-1], tick):
                    if edge == "middle" or kept[-1][2] != "middle":
                        break
                    kept.pop()  # a break's edge wins over a tick spread inside a piece
                else:
                    kept.append(tick)
        return kept


def _extent(tick: tuple[float, str, str]) -> tuple[float, float]:
    x, label, anchor = tick
    w = TICK_CHAR_PX * len(label)
    return {"start": (x, x + w), "end": (x - w, x)}.get(anchor, (x - w / 2, x + w / 2))


def _overlap(a: tuple[float, str, str], b: tuple[float, str, str]) -> bool:
    (_, a1), (b0, _) = _extent(a), _extent(b)
    return b0 < a1 + 6


def _quiet(gaps: list[int]) -> set[int]:
    """The stretches to break: largest first, each longer than all the others still drawn to
    scale together, at most MAX_BREAKS."""
    quiet: set[int] = set()
    for i in sorted(range(len(gaps)), key=lambda j: -gaps[j])[:MAX_BREAKS]:
        rest = sum(g for j, g in enumerate(gaps) if j != i and j not in quiet)
        if gaps[i] <= rest:
            break
        quiet.add(i)
    return quiet
