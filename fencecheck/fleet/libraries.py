"""The published comparison's matrix, generated from the descriptors: every client's
`comparison` scenarios (descriptors/base.py: Scenario), on the backends it drives, as
`[[row]]` tables of a matrix file (fencecheck/fleet/matrix.py), grouped by chapter (a fault,
or the chapter a scenario names) and within one by backend and client in catalog order.

`fencecheck libraries` prints it; `examples/libraries.toml` is its output for the built-in
descriptors (a test keeps it up to date), and with plugins installed the output has their rows
too. Two scenarios that come out with one row name are a CatalogError naming both clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tomlkit

from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import CatalogError, ClientDescriptor, Scenario

HEADER = """\
# The published comparison: every lock client and backend against each fault, fenced and
# unfenced, each row with the outcome it must have.
#
# GENERATED from the clients' descriptors (their `comparison` scenarios; docs/extending.md) by
#
#   fencecheck libraries --out examples/libraries.toml
#
# Do not edit it: change a client's `comparison` and run that again (a test says when this file
# is stale). With plugins installed, the same command writes their rows too.
# docs/comparison.md is generated from a run:
#
#   sudo .venv/bin/fencecheck matrix examples/libraries.toml --store store \\
#       --out store/_matrix/libraries
#   .venv/bin/python -m fencecheck.reports.markdown store/_matrix/libraries > docs/comparison.md
#
# Two seeds per row, short runs (12-20 s), so that the whole matrix fits in about half an hour on
# a 2-core machine. Rows are grouped by fault; within a fault, by backend and library.
# Not here, and why: etcd and postgres-advisory under `clock` (etcd is a Go binary that reads the
# clock through the vDSO, which the shim cannot move; PostgreSQL is not started under the shim);
# `kill` of postgres-advisory (its service has no kill/restart).
"""

DEFAULTS: dict[str, Any] = {"lease_ms": 1000, "concurrency": 4, "time_limit_s": 12,
                            "seeds": [1, 2]}

# Chapters in this order, each with its heading; a chapter not here (a plugin's fault) follows
# them, headed by its name.
SECTIONS: dict[str, str] = {
    "none": "no faults: critical sections far shorter than the lease find nothing, on every "
            "client",
    "pause": "pause: the holder stops (a GC pause) for longer than its lease",
    "partition": "partition: half the time the holder is cut off from the lock service but "
                 "still reaches the resource; its critical section (4 writes 700 ms apart) "
                 "outlasts the lease",
    "clock": "clock: a server's wall clock jumps past the lease (Redis expires keys by wall "
             "clock)",
    "kill": "kill: a server is killed and restarted, without persistence, inside the lease",
    "careless": "careless clients against their strict twins, same seeds and settings "
                "(renewing clients, so that a failed renewal is something to ignore). Fenced, "
                "a careless client still hands the lock out twice (double-grant: the lock is "
                "broken), but the resource rejects every stale write: such rows must find, and "
                "find only double-grant",
    "delay": "delay: the holder's traffic to the resource is held past its lease, then "
             "delivered",
    "client-clock": "client-clock: the clients' clocks jump (the kubernetes servers are Go "
                    "binaries, whose clocks the shim cannot move)",
}


@dataclass(frozen=True, slots=True)
class LibraryRow:
    """One generated row: its scenario, and the backend and client it runs."""

    scenario: Scenario
    backend: str
    client: ClientDescriptor

    @property
    def name(self) -> str:
        return self.scenario.row_name(self.client.name)

    def table(self) -> dict[str, Any]:
        """The row as a matrix file's `[[row]]` table."""
        s = self.scenario
        out: dict[str, Any] = {"name": self.name, "backend": self.backend,
                               "client": self.client.name, "nemesis": s.nemesis}
        if s.fencing is not None:
            out["fencing"] = "on" if s.fencing else "off"
        out.update(s.options)
        out["expect"] = s.expect
        return out


def rows() -> list[LibraryRow]:
    """Every scenario of every installed client, in the file's order."""
    found: list[LibraryRow] = []
    for b in catalog.backends().values():
        for c in b.clients:
            found += [LibraryRow(s, b.name, c) for s in c.comparison
                      if s.backend in (None, b.name)]
    seen: dict[str, LibraryRow] = {}
    for r in found:
        if r.name in seen:
            raise CatalogError(f"comparison row {r.name!r}: declared by {seen[r.name].client.name}"
                               f" and by {r.client.name} (give one a `name` or `suffix`)")
        seen[r.name] = r
    order = {chapter: i for i, chapter in enumerate(SECTIONS)}
    chapters = sorted({r.scenario.chapter for r in found},
                      key=lambda ch: (order.get(ch, len(order)), ch))
    return [r for ch in chapters for r in found if r.scenario.chapter == ch]


def _comment(text: str, width: int = 98) -> list[str]:
    """text as `# ` lines of at most width characters."""
    lines: list[str] = []
    line = "#"
    for word in text.split():
        if len(line) + 1 + len(word) > width and line != "#":
            lines.append(line)
            line = "#"
        line += " " + word
    return [*lines, line]


def _value(v: Any) -> str:
    """A TOML value as the file has it: tables inline (`{ think_ms = 700 }`), arrays on one
    line."""
    if isinstance(v, dict):
        table = tomlkit.inline_table()
        table.update(v)
        return str(table.as_string())
    return str(tomlkit.item(v).as_string())


def _table(header: str, values: dict[str, Any]) -> list[str]:
    return [header, *(f"{tomlkit.key(k).as_string()} = {_value(v)}" for k, v in values.items())]


def render() -> str:
    """The matrix file: the header, [defaults], then each chapter's rows under its heading."""
    out = [HEADER, *_table("[defaults]", DEFAULTS)]
    chapter = None
    for r in rows():
        if r.scenario.chapter != chapter:
            chapter = r.scenario.chapter
            heading = SECTIONS.get(chapter, chapter)
            out += ["", *_comment(f"---- {heading} ----")]
        out.append("")
        if r.scenario.note:
            out += _comment(r.scenario.note)
        out += _table("[[row]]", r.table())
    return "\n".join(out) + "\n"
