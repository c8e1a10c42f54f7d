"""Messages as users meet them: a bad `run` option is named as typed (`--lease-ms`, not the
config field `lease_ms`), with the value given; `version` and `--version` say the same; a failing
test's summary, like `fencecheck check`, tells the first five incidents and counts the rest."""

from __future__ import annotations

from typing import Any

import pytest

from fencecheck.api import check_history
from tests.conftest import run_fencecheck

MS = 1_000_000


# (test_config.py checks more options by name; these two the whole line: the issue's, and one
# whose config field is not named after its option)
@pytest.mark.parametrize(("args", "message"), [
    (("--lease-ms", "-5"), "--lease-ms: Input should be greater than or equal to 1 (got -5)"),
    (("--writes", "0"), "--workload-opt writes_per_section: Input should be greater than or "
                        "equal to 1 (got 0) (given as --writes)"),
])
def test_a_bad_run_option_is_named_as_typed(args: tuple[str, ...], message: str) -> None:
    r = run_fencecheck("run", *args, timeout=60)
    assert r.returncode == 3 and not r.stdout
    assert r.stderr == f"error: bad configuration: {message}\n"


def _double_grants(locks: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for k in range(locks):
        t = k * 100 * MS
        for p, token in ((2 * k, 1), (2 * k + 1, 2)):
            t += MS
            events += [{"time": t, "process": p, "type": "invoke", "f": "acquire",
                        "value": {"lock": f"L{k}", "lease_ms": 10_000}},
                       {"time": t + MS // 2, "process": p, "type": "ok", "f": "acquire",
                        "value": {"token": token}}]
    events.sort(key=lambda e: e["time"])
    return [{"index": i, **e} for i, e in enumerate(events)]


def test_a_summary_tells_five_incidents_and_counts_the_rest() -> None:
    result = check_history(_double_grants(7))
    assert result.valid is False and len(result.incidents) == 7
    lines = result.summary().splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("incident ")] == [
        f"incident {i}" for i in range(1, 6)]
    assert lines[-1] == ("... and 2 more incidents (Result.incidents, or results.json, has every "
                         "one)")
    assert len(result.summary(most=7).splitlines()) == len(lines) + 1
