"""Time `reports.html.write_report` on a large history (goal: 200,000 ops in under 10 s).

Generates an unfenced run with paused clients (so the report has violations and fault windows)
with benchmarks/gen_history.py's simulator, runs the checker once for results.json, then times
writing the report (load + lay out + incidents + render + write) and, with --browser, loading it
in headless Chromium until its plots are drawn.

    .venv/bin/python benchmarks/bench_report.py [--ops 200000] [--out benchmarks/out/report]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from gen_history import SimConfig, simulate, write_jsonl  # noqa: E402

from fencecheck.checker.history import load_ops  # noqa: E402
from fencecheck.checker.verdict import judge  # noqa: E402
from fencecheck.reports.html import write_report  # noqa: E402

log = logging.getLogger("bench_report")


def browser_load_s(report: Path) -> float:
    """Seconds from navigation until the report's plots are drawn, in headless Chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    profile = tempfile.mkdtemp(prefix="fc-bench-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--enable-unsafe-swiftshader",
                 f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        t0 = time.perf_counter()
        driver.get(report.as_uri())
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return window.fcReady"))
        return time.perf_counter() - t0
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "report")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--browser", action="store_true", help="also time loading it in Chromium")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    run = args.out / "store" / "bench" / "20260101T000000"
    shutil.rmtree(args.out / "store", ignore_errors=True)
    run.mkdir(parents=True)
    t = time.perf_counter()
    cfg = SimConfig(processes=20, locks=4, lease_ms=500, writes_per_section=3, p_pause=0.01,
                    p_info=0.002, fenced=False, events=2 * args.ops)
    write_jsonl(run / "history.jsonl", simulate(cfg, random.Random(args.seed)))
    gen_s = time.perf_counter() - t
    ops = load_ops(run / "history.jsonl")
    results = judge(ops, time_limit_s=60.0).to_json()
    (run / "results.json").write_text(json.dumps(results))
    (run / "test.json").write_text(json.dumps({
        "run_id": "bench0", "name": "bench", "started": "2026-01-01T00:00:00Z",
        "config": {"backend": "sim", "client": "sim", "resource": "unfenced", "nemesis": ["pause"],
                   "fencing": False, "seed": args.seed},
        "versions": {}, "duration_s": 0.0, "exit_code": 1}))
    t, cpu = time.perf_counter(), time.process_time()
    report = write_report(run)
    render_s, render_cpu_s = time.perf_counter() - t, time.process_time() - cpu
    figures = {
        "ops": len(ops),
        "violations": sum(len(c["violations"]) for c in results["checks"].values()),
        "generate_s": round(gen_s, 2),
        "write_report_s": round(render_s, 2),
        "write_report_cpu_s": round(render_cpu_s, 2),
        "incidents": len(results.get("incidents") or []),
        "report_mb": round(report.stat().st_size / 1e6, 1),
        # what a copied run folder carries for the page (report + plotly's JS)
        "page_and_js_mb": round(sum(p.stat().st_size for p in run.glob("*.js")) / 1e6
                                + report.stat().st_size / 1e6, 1),
    }
    if args.browser:
        figures["chromium_load_s"] = round(browser_load_s(report), 2)
    log.info("%s", json.dumps(figures))
    log.info("report: %s", report)


if __name__ == "__main__":
    main()
