"""Screenshots for the README: `docs/report.png` (a run report), `docs/incident.png` (its first
incident) and `docs/compare.png` (the comparison).

Not a test (pytest does not collect it). Take real runs first, then:
    .venv/bin/python tests/reports/screenshots.py STORE RUN_DIR [--out docs] [--compare PAGE]
It shoots RUN_DIR's report and either PAGE (a matrix's compare.html, with its expectations) or
STORE's comparison written to a temporary directory, in the same headless Chromium the browser
tests use.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fencecheck.reports.compare import compare
from fencecheck.reports.html import write_report
from tests.reports.conftest import browser as browser_fixture


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs"))
    ap.add_argument("--height", type=int, default=1500)
    ap.add_argument("--compare", type=Path, help="an existing compare.html (e.g. a matrix's)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = write_report(args.run_dir)
    gen = browser_fixture.__wrapped__()  # type: ignore[attr-defined]
    b = next(gen)
    try:
        b.driver.set_window_size(1400, args.height)
        b.get(report.as_uri())
        b.wait("return window.fcReady === true")
        time.sleep(0.5)
        b.driver.save_screenshot(str(args.out / "report.png"))
        b.driver.find_element("id", "incident-1").screenshot(str(args.out / "incident.png"))
        with tempfile.TemporaryDirectory() as tmp:
            page = args.compare or compare([args.store], Path(tmp))[0]
            b.driver.set_window_size(1400, 900)
            b.get(page.resolve().as_uri())
            b.driver.save_screenshot(str(args.out / "compare.png"))
    finally:
        gen.close()


if __name__ == "__main__":
    main()
