"""The live progress line of `fencecheck run` (rich): elapsed/limit, ops/s, ok/fail/info and
the faults active now. Off a terminal it prints one line per phase instead."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text


@dataclass(slots=True)
class Progress:
    """What a run is doing now, as the controller reports it to the CLI."""

    phase: str
    elapsed_s: float = 0.0
    limit_s: float = 0.0
    ops_per_s: float = 0.0
    ok: int = 0
    fail: int = 0
    info: int = 0
    faults: list[str] = field(default_factory=list)


ProgressFn = Callable[[Progress], None]


class ProgressLine:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self.phase = ""

    def __enter__(self) -> ProgressLine:
        if self.console.is_terminal:
            self.live = Live(Text(""), console=self.console, refresh_per_second=8,
                             transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.__exit__(t, e, tb)

    def update(self, p: Progress) -> None:
        if p.phase == "running":
            faults = ", ".join(p.faults) or "none"
            text = (f"running {p.elapsed_s:5.1f}/{p.limit_s:.0f} s  {p.ops_per_s:7.1f} ops/s  "
                    f"ok {p.ok}  fail {p.fail}  info {p.info}  faults: {faults}")
        else:
            text = p.phase + "…"
        if self.live is not None:
            self.live.update(Text(text))
        elif p.phase != self.phase:
            self.console.print(text, highlight=False)
        self.phase = p.phase
