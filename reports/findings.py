"""The findings pages (docs/findings/<name>.md, docs/findings/index.md), generated from runs as
docs/comparison.md is (reports/markdown.py): one page per shipped finding under
examples/findings/<name>/, each from

- its words, `finding.toml` (title, the matrix row it is measured by, its violation kind, what
  happens in plain words, the mechanism as read from the library's source, upstream links);
- the finding's matrix row in a `fencecheck matrix` output: the library and versions tested,
  the rate over the row's seeds, and the first run that found the kind, whose violation,
  library step (its recorded evidence, checker/steps/) and incident diagram the page shows;
- the shipped replay, `schedule.json` and `test.json` (shrunk by `fencecheck shrink`; its
  `shrink.json`), and how often it replays to the same kind (`benchmarks/bench_replay.py
  --findings`, its JSON output).

    python -m fencecheck.reports.findings --matrix store/_matrix/findings \\
        --matrix store/_matrix/client-go-release --replays benchmarks/replay-findings.json

A finding whose row is in none of the `--matrix` outputs is skipped with a note (its page,
if any, is kept: client-go-release.md is written by hand), so that one matrix file's runs
make their pages without the others'. It reads run folders and writes Markdown and SVG;
it runs nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgspec import UNSET

from fencecheck.records import matrix as matrix_record
from fencecheck.records import results as results_record
from fencecheck.records import test as test_record

FINDINGS = Path("examples/findings")
WORDS = ("title", "row", "kind", "what_happens", "mechanism")


class FindingError(Exception):
    """A finding folder or matrix output that cannot make a page (one line; exit 3)."""


@dataclass(frozen=True, slots=True)
class Measured:
    """A finding's matrix row: its runs' folders (None where a run left none) and verdicts."""

    row: str
    runs: tuple[tuple[int, Path | None, str], ...]  # (seed, run folder, verdict)


def read_words(folder: Path) -> dict[str, Any]:
    """finding.toml, with every field a page needs."""
    path = folder / "finding.toml"
    try:
        words = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise FindingError(f"{path}: {e}") from None
    missing = [w for w in WORDS if not isinstance(words.get(w), str)]
    if missing:
        raise FindingError(f"{path}: {', '.join(missing)}: missing (a string each)")
    return words


def measured(out_dirs: Sequence[Path], row: str) -> Measured | None:
    """The last matrix output among out_dirs that ran `row`."""
    found: Measured | None = None
    for out in out_dirs:
        try:
            matrix = matrix_record.read(out / "matrix.json")
        except Exception as e:  # a record error names the file and field
            raise FindingError(f"{out}: unreadable matrix output ({e})") from None
        for r in matrix.rows:
            if r.row == row:
                found = Measured(row, tuple((run.seed, Path(run.run_dir) if run.run_dir
                                             else None, run.verdict) for run in r.runs))
    return found


def _kinds(run_dir: Path) -> set[str]:
    try:
        return set(results_record.read(run_dir / "results.json").kinds())
    except Exception:
        return set()


def rate(m: Measured, kind: str) -> dict[str, Any]:
    """How many seeds found any violation, how many the finding's kind, and the median time
    to the first violation of those."""
    with_kind, firsts = [], []
    for seed, run_dir, verdict in m.runs:
        if run_dir is None or verdict != "invalid" or kind not in _kinds(run_dir):
            continue
        with_kind.append(seed)
        first = results_record.read(run_dir / "results.json").first_violation_ns
        if first is not None:
            firsts.append(first / 1e9)
    return {"seeds": len(m.runs), "found": sum(v == "invalid" for _, _, v in m.runs),
            "kind": len(with_kind), "kind_seeds": with_kind,
            "first_s": statistics.median(firsts) if firsts else None}


def evidence_run(m: Measured, kind: str) -> Path | None:
    """The first seed's run that found the finding's kind."""
    return next((d for _, d, v in m.runs
                 if d is not None and v == "invalid" and kind in _kinds(d)), None)


def first_violation(run_dir: Path, kind: str) -> tuple[str, dict[str, Any]]:
    """(check, violation as results.json has it) of the first violation of `kind`, preferring
    one a library step explains."""
    doc = json.loads((run_dir / "results.json").read_text())
    found = [(name, v) for name, c in doc["checks"].items() for v in c.get("violations", [])
             if v.get("kind") == kind]
    if not found:
        raise FindingError(f"{run_dir}: no {kind} violation in results.json")
    return next(((n, v) for n, v in found if "cause" in v), found[0])


def versions_of(run_dir: Path) -> dict[str, str | None]:
    test = test_record.read(run_dir / "test.json")
    return {} if test.versions is UNSET else dict(test.versions)


def replay_line(folder: Path, replays: dict[str, Any] | None, kind: str) -> list[str]:
    """What the shipped replay is and how often it finds the kind again."""
    out: list[str] = []
    shrink = folder / "shrink.json"
    if shrink.is_file():
        s = json.loads(shrink.read_text())
        out.append(f"`fencecheck shrink` reduced the recorded run's {s['original_faults']} "
                   f"faults to {s['shrunk_faults']} ({s.get('spent_s', '?')} s of reruns).")
    steps = json.loads((folder / "schedule.json").read_text())["steps"]
    out.append("The shipped schedule (`schedule.json`): " + "; ".join(
        f"{st['fault']} of {_target(st)} after {st['gap_s']} s for {st['hold_s']} s"
        for st in steps) + ".")
    mine = (replays or {}).get(folder.name)
    if mine:
        out.append(f"Replayed {mine['tries']} times (`benchmarks/bench_replay.py --findings`): "
                   f"{mine['same_kind']} of {mine['tries']} found {kind} again.")
    else:
        out.append("Not yet replayed by `benchmarks/bench_replay.py --findings`.")
    return out


def _target(step: dict[str, Any]) -> str:
    if step.get("role") == "holder":
        return "the fresh holder"
    value = step.get("value")
    if isinstance(value, dict):
        names = value.get("targets") or value.get("nodes")
        if isinstance(names, list):
            return ", ".join(map(str, names))
    return json.dumps(value)


def main(argv: Sequence[str] | None = None) -> int:
    from fencecheck.reports.findings_page import write_pages

    ap = argparse.ArgumentParser(prog="python -m fencecheck.reports.findings",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--matrix", type=Path, action="append", required=True,
                    help="a `fencecheck matrix --out` directory (repeatable)")
    ap.add_argument("--replays", type=Path, help="benchmarks/bench_replay.py --findings JSON")
    ap.add_argument("--findings", type=Path, default=FINDINGS,
                    help="the folder of shipped findings")
    ap.add_argument("--out", type=Path, default=Path("docs/findings"))
    args = ap.parse_args(argv)
    try:
        replays = json.loads(args.replays.read_text()) if args.replays else None
        written, skipped = write_pages(args.findings, args.matrix, replays, args.out)
    except (FindingError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    for path in written:
        print(path)
    for note in skipped:
        print(f"skipped {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
