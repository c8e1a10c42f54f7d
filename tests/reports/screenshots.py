"""Screenshots for the README: `docs/report.png` (a run report) and `docs/compare.png` (the matrix).

Not a test (pytest does not collect it). Take real runs first, then:
    .venv/bin/python tests/reports/screenshots.py STORE RUN_DIR [--out docs]
It writes STORE's comparison to a temporary directory and shoots it and RUN_DIR's report in the
same headless Chromium the browser tests use.
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
        with tempfile.TemporaryDirectory() as tmp:
            page, _ = compare([args.store], Path(tmp))
            b.driver.set_window_size(1400, 900)
            b.get(page.as_uri())
            b.driver.save_screenshot(str(args.out / "compare.png"))
    finally:
        gen.close()


if __name__ == "__main__":
    main()
