"""JUnit XML for CI systems: `write_junit(run_dirs, path, suite)`, one test case per run.

A run with violations is a <failure> whose text lists every violation's explanation; an unknown
verdict, or a run without results, is an <error> (not a pass: an unjudged run proves nothing).
"""

from __future__ import annotations

import json
import logging
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from fencecheck.reports.html import write_atomic
from fencecheck.reports.rundata import ReportError, load_run

log = logging.getLogger(__name__)


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters, which a history's values may contain."""
    return "".join(
        c if c in "\t\n\r" or (ord(c) >= 0x20 and ord(c) not in (0xFFFE, 0xFFFF)) else "\ufffd"
        for c in text
    )


def write_junit(run_dirs: Sequence[Path], path: Path, suite: str) -> None:
    """Write one <testsuite> named suite with a <testcase> per run directory."""
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=_clean(suite))
    failures = errors = 0
    total_s = 0.0
    for run_dir in run_dirs:
        try:
            run = load_run(run_dir, with_ops=False)
        except ReportError as e:
            case = ET.SubElement(ts, "testcase", name=_clean(run_dir.name), classname=_clean(suite))
            ET.SubElement(case, "error", message=_clean(str(e)), type="bad-run-dir")
            errors += 1
            continue
        duration = run.test.get("duration_s")
        seconds = float(duration) if isinstance(duration, int | float) else 0.0
        total_s += seconds
        case = ET.SubElement(
            ts,
            "testcase",
            name=_clean(f"{run.run_dir.name} ({run.test.get('run_id', '')})"),
            classname=_clean(run.name),
            time=f"{seconds:.3f}",
        )
        verdict = run.verdict
        if verdict == "invalid":
            failures += 1
            violations = run.violations
            kinds = Counter(str(v.get("kind", "?")) for v in violations)
            summary = ", ".join(f"{k} × {n}" for k, n in sorted(kinds.items()))
            failure = ET.SubElement(
                case,
                "failure",
                message=_clean(f"{len(violations)} violations: {summary}"),
                type=_clean(",".join(sorted(kinds))),
            )
            failure.text = _clean(
                "\n".join(
                    f"[{v.get('kind', '?')}] {v.get('explanation', '')}" for v in violations
                )
                + f"\nreport: {run.run_dir / 'report.html'}"
            )
        elif verdict != "valid":
            errors += 1
            ET.SubElement(
                case,
                "error",
                message=f"verdict {verdict}",
                type="unknown" if verdict == "unknown" else "no-results",
            )
        sysout = ET.SubElement(case, "system-out")
        config = json.dumps(run.config, default=str)
        sysout.text = _clean(f"run directory: {run.run_dir}\nconfig: {config}")
    ts.set("tests", str(len(run_dirs)))
    ts.set("failures", str(failures))
    ts.set("errors", str(errors))
    ts.set("time", f"{total_s:.3f}")
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
    log.info("wrote %s (%d runs, %d failures, %d errors)", path, len(run_dirs), failures, errors)
