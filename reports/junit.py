"""JUnit XML for CI systems: one writer for `run`, `check`, `compare` and `matrix`.

A `Case` is one run judged against what was expected of it: nothing (it must be valid),
"must-find" (violations) or "must-pass". Cases are named so that CI can follow a test across
nights: classname = the test or matrix row, name = `seed <n>` (a timestamp only where two runs
would otherwise share a name); seed, versions and the run folder are <properties>. A run that
missed its expectation with a verdict is a <failure> whose text lists the violations, capped; an
unjudged run (unknown without expectation, error, crash, timeout, not run) is an <error>: an
unjudged run proves nothing.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from msgspec import UNSET

from fencecheck.records.base import write_atomic
from fencecheck.records.results import Results
from fencecheck.reports.rundata import (
    ReportError,
    load_run,
    verdict_of,
    violation_counts,
    violations_of,
)

log = logging.getLogger(__name__)

EXPECTED_VERDICT = {"must-find": "invalid", "must-pass": "valid", None: "valid"}
JUDGED = ("valid", "invalid", "unknown")
MAX_LINES = 40  # a failure's text lists this many violations, then says how many more
MAX_CHARS = 8000


@dataclass(frozen=True, slots=True)
class Case:
    classname: str  # the test or matrix row: stable across nights
    name: str  # "seed <n>"
    verdict: str  # valid, invalid, unknown, no results, or why there is none (error, timeout…)
    expect: str | None = None  # "must-find", "must-pass", or None: the run must be valid
    duration_s: float = 0.0
    exit_code: int | None = None
    properties: tuple[tuple[str, str], ...] = ()
    violations: tuple[str, ...] = ()  # "[kind] explanation", as listed by the checks
    counts: tuple[tuple[str, int], ...] = ()  # violations by kind, all counted
    detail: str = ""  # the error, or where to look
    where: str = ""  # the report or run folder

    @property
    def want(self) -> str:
        return EXPECTED_VERDICT[self.expect]


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters, which a history's values may contain."""
    return "".join(
        c if c in "\t\n\r" or (ord(c) >= 0x20 and ord(c) not in (0xFFFE, 0xFFFF)) else "\ufffd"
        for c in text
    )


def case_of_run(run_dir: Path, *, classname: str | None = None, name: str | None = None,
                expect: str | None = None, duration_s: float | None = None,
                exit_code: int | None = None) -> Case:
    """A run folder as a case; a folder that cannot be read is an error case."""
    try:
        run = load_run(run_dir, with_ops=False)
    except ReportError as e:
        return Case(classname or run_dir.name, name or run_dir.name, "bad-run-dir", expect,
                    detail=str(e))
    seed = None if (s := run.test.run_seed) is UNSET else s
    props: list[tuple[str, str]] = [("seed", str(seed)), ("run_dir", str(run.run_dir))]
    report = run.run_dir / "report.html"
    if report.is_file():
        props.append(("report", str(report)))
    if run.test.versions is not UNSET:
        props += [(f"version.{k}", str(v)) for k, v in sorted(run.test.versions.items())]
    if run.results is not None and run.results.tool_version:
        props.append(("tool_version", run.results.tool_version))
    settings = run.settings
    for k in ("backend", "client", "resource", "workload", "nemesis", "fencing"):
        v = getattr(settings, k)
        if v is not UNSET:
            text = ("+".join(map(str, v)) or "none" if isinstance(v, list)
                    else ("on" if v else "off") if isinstance(v, bool) else str(v))
            props.append((f"config.{k}", text))
    if expect:
        props.append(("expect", expect))
    duration = run.test.duration_s if duration_s is None else duration_s
    return Case(
        classname=classname or run.name,
        name=name or f"seed {seed}",
        verdict=run.verdict,
        expect=expect,
        duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
        exit_code=exit_code,
        properties=tuple(props),
        violations=tuple(f"[{v.kind}] {v.explanation}" for _, v in run.violations),
        counts=tuple(sorted(violation_counts(run.results).items())),
        where=str(report if report.is_file() else run.run_dir),
    )


def distinct_names(cases: Sequence[Case]) -> list[Case]:
    """Cases that would share classname and name get their run folder added to the name."""
    seen = Counter((c.classname, c.name) for c in cases)
    out = []
    for c in cases:
        if seen[(c.classname, c.name)] > 1:
            run = dict(c.properties).get("run_dir", "")
            c = replace(c, name=f"{c.name} ({Path(run).name})" if run else c.name)
        out.append(c)
    return out


def failure_text(case: Case) -> str:
    """The violations, at most MAX_LINES of them and MAX_CHARS in all, then the report."""
    lines = list(case.violations[:MAX_LINES])
    total = sum(n for _, n in case.counts) or len(case.violations)
    text = "\n".join(lines)
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS].rsplit("\n", 1)[0]
        lines = text.splitlines()
    if total > len(lines):
        text += f"\n… and {total - len(lines)} more violations (see the report)"
    return f"{text}\nreport: {case.where}".lstrip("\n")


def _add_case(ts: ET.Element, suite: str, case: Case) -> str:
    """Append case to ts; returns "pass", "failure" or "error"."""
    el = ET.SubElement(ts, "testcase", name=_clean(case.name), classname=_clean(case.classname),
                       time=f"{case.duration_s:.3f}")
    if case.properties:
        props = ET.SubElement(el, "properties")
        for k, v in case.properties:
            ET.SubElement(props, "property", name=_clean(k), value=_clean(v))
    exit_text = f" (exit {case.exit_code})" if case.exit_code is not None else ""
    total = sum(n for _, n in case.counts)
    summary = ", ".join(f"{k} × {n}" for k, n in case.counts if n)
    outcome = "pass"
    if case.verdict == case.want:
        pass
    elif case.expect is not None and case.verdict in JUDGED:
        outcome = "failure"
        f = ET.SubElement(el, "failure", type=case.verdict, message=_clean(
            f"row {case.classname} MISSED {case.expect}: {case.name} was {case.verdict}"
            f"{exit_text}, expected {case.want}"
            + (f"; {total} violations: {summary}" if total else "")))
        f.text = _clean(failure_text(case) if case.violations else
                        f"violations: none\nreport: {case.where or case.detail}")
    elif case.expect is None and case.verdict == "invalid":
        outcome = "failure"
        f = ET.SubElement(el, "failure", type=_clean(",".join(k for k, _ in case.counts)),
                          message=_clean(f"{total or len(case.violations)} violations: "
                                         f"{summary}"))
        f.text = _clean(failure_text(case))
    else:
        outcome = "error"
        kind = {"no results": "no-results"}.get(case.verdict, case.verdict)
        message = (f"row {case.classname} MISSED {case.expect}: {case.name}: {case.verdict}"
                   f"{exit_text}" if case.expect else f"verdict {case.verdict}")
        e = ET.SubElement(el, "error", type=_clean(kind),
                          message=_clean(message + (f": {case.detail}" if case.detail else "")))
        if case.where:
            e.text = _clean(f"report: {case.where}")
    if case.where or case.properties:
        out = ET.SubElement(el, "system-out")
        run_dir = dict(case.properties).get("run_dir", "")
        out.text = _clean(f"run directory: {run_dir}\nreport: {case.where}")
    return outcome


def write_cases(cases: Sequence[Case], path: Path, suite: str) -> None:
    """Write one <testsuite> named suite with a <testcase> per case."""
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=_clean(suite))
    outcomes = Counter(_add_case(ts, suite, c) for c in distinct_names(cases))
    ts.set("tests", str(len(cases)))
    ts.set("failures", str(outcomes["failure"]))
    ts.set("errors", str(outcomes["error"]))
    ts.set("time", f"{sum(c.duration_s for c in cases):.3f}")
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
    log.info("wrote %s (%d cases, %d failures, %d errors)", path, len(cases),
             outcomes["failure"], outcomes["error"])


def write_junit(run_dirs: Sequence[Path], path: Path, suite: str,
                expectations: Mapping[str, str] | None = None) -> None:
    """One case per run folder (`run`, `check`, `compare`): it must be valid, unless
    expectations (test name -> "must-find" or "must-pass") say otherwise."""
    cases = []
    for d in run_dirs:
        case = case_of_run(d)
        expect = (expectations or {}).get(case.classname)
        if expect is not None:
            case = replace(case, expect=expect, properties=(*case.properties, ("expect", expect)))
        cases.append(case)
    write_cases(cases, path, suite)


def write_check_junit(path: Path, source: Path, run_dir: Path | None,
                      results: Results) -> None:
    """`fencecheck check --junit`: one case, for a run folder (as `run` writes it) or for a bare
    history file (named after the file; results as just computed)."""
    if run_dir is not None:
        write_junit([run_dir], path, suite="fencecheck check")
        return
    case = Case(
        classname=source.stem, name=source.name, verdict=verdict_of(results),
        properties=(("history", str(source.resolve())),
                    ("tool_version", results.tool_version)),
        violations=tuple(f"[{v.kind}] {v.explanation}" for _, v in violations_of(results)),
        counts=tuple(sorted(violation_counts(results).items())),
        where=str(source.resolve()),
    )
    write_cases([case], path, suite="fencecheck check")
