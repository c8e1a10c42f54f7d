"""Which shipped findings a run of the test command replays (tests/e2e/test_findings_replay.py).

One a run, rotating with the UTC day; FC_REPLAY_FINDING picks instead (a name, or `all`).
tests/conftest.py fixes the day's pick in the environment once, before pytest-xdist starts its
workers, so that every worker collects the same test even across midnight; only the picked
findings are collected, so none is skipped.
"""

from __future__ import annotations

import os
import time

from tests.conftest import REPO

FINDINGS = REPO / "examples" / "findings"
ENV = "FC_REPLAY_FINDING"


def shipped() -> list[str]:
    """The findings a replay can play: a folder with its finding.toml and schedule.json."""
    return sorted(f.name for f in FINDINGS.iterdir()
                  if (f / "finding.toml").is_file() and (f / "schedule.json").is_file())


def chosen(names: list[str], env: str, day: int) -> list[str]:
    """Which findings this run replays: `env` (a name, or `all`) if set, else the day's one."""
    if env == "all":
        return names
    if env:
        return [env]  # an unknown name fails in the test, with the names it could have been
    return [names[day % len(names)]] if names else []


def today() -> int:
    return int(time.time() // 86400)


def picked() -> list[str]:
    return chosen(shipped(), os.environ.get(ENV, ""), today())


def fix_the_pick() -> None:
    """Set FC_REPLAY_FINDING to the day's finding unless it is set (in pytest's first process)."""
    day = chosen(shipped(), "", today())
    if day and not os.environ.get(ENV):
        os.environ[ENV] = day[0]
