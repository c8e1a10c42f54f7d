"""fencecheck's pytest plugin (the `pytest11` entry point: active once fencecheck is installed).

- `lock_history`: a `HistoryRecorder` writing `history.jsonl` in the test's tmp dir. When the test
  body has run, the history is judged; violations fail the test with each incident's story.
  A history too thin to judge (unknown) does not fail it: uncertainty is never a failure.
- `fencecheck_scenario`: a function `run(**options) -> Result` wrapping `api.run_scenario`, its
  runs kept under `--fencecheck-store DIR` (else in the test's tmp dir). It does not judge for
  you: assert on `result.valid`.
- `--fencecheck-store DIR`: keep runs there; `lock_history` copies its history and results.json
  into `DIR/<test name>/<timestamp>/` too (`fencecheck report` draws such a folder).
- Each verdict, seed and run folder goes to the JUnit report as test properties
  (`fencecheck_verdict`, `fencecheck_seed`, `fencecheck_run_dir`), through `user_properties` as
  `record_property` does.

This module imports only pytest and the standard library at load: every pytest start in an
environment with fencecheck installed loads it, so fencecheck itself loads only when a test asks
for one of its fixtures.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fencecheck.api import HistoryRecorder, Result

_STORE_KEY = pytest.StashKey["_LockHistory"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fencecheck", "fencecheck (distributed lock checks)")
    group.addoption("--fencecheck-store", metavar="DIR", default=None, type=Path,
                    help="keep fencecheck runs and recorded lock histories in DIR")


def _store(config: pytest.Config) -> Path | None:
    value: Path | None = config.getoption("fencecheck_store", None)
    return None if value is None else value.absolute()


def _record(item: pytest.Item, result: Result, run_dir: Path | None) -> None:
    item.user_properties.append(("fencecheck_verdict", result.verdict))
    if result.seed is not None:
        item.user_properties.append(("fencecheck_seed", result.seed))
    if run_dir is not None:
        item.user_properties.append(("fencecheck_run_dir", str(run_dir)))


class _LockHistory:
    """The recorder of one test and the one-time check of what it recorded."""

    def __init__(self, item: pytest.Item, path: Path) -> None:
        from fencecheck.api import HistoryRecorder

        self.item = item
        self.recorder: HistoryRecorder = HistoryRecorder(path)
        self.checked = False

    def judge(self) -> Result | None:
        """Close the recorder and check the history (once); None if already judged."""
        if self.checked:
            return None
        self.checked = True
        from fencecheck.api import check_history

        path = self.recorder.close()
        result = check_history(path)
        run_dir = self._keep(path, result)
        _record(self.item, result, run_dir)
        return result

    def _keep(self, path: Path, result: Result) -> Path | None:
        store = _store(self.item.config)
        if store is None:
            return None
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.item.name).strip("-.") or "test"
        run_dir = store / name / time.strftime("%Y%m%dT%H%M%S")
        n = 1
        while run_dir.exists():  # two checks of one test within a second
            n += 1
            run_dir = store / name / f"{time.strftime('%Y%m%dT%H%M%S')}-{n}"
        run_dir.mkdir(parents=True)
        shutil.copyfile(path, run_dir / "history.jsonl")
        from fencecheck.records import results as results_record

        results_record.write(run_dir / "results.json", result.results.record())
        return run_dir


@pytest.fixture
def lock_history(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HistoryRecorder]:
    """A HistoryRecorder (tmp_path / "history.jsonl") judged when the test body ends: the test
    fails with the incident stories when violations are found."""
    state = _LockHistory(request.node, tmp_path / "history.jsonl")
    request.node.stash[_STORE_KEY] = state
    yield state.recorder
    state.recorder.close()  # the body raised before it could be judged: still leave a history


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # Judged here, in the call phase, so that violations fail the test itself rather than
    # show up as an error in teardown.
    from_body: BaseException | None = None
    try:
        outcome = yield
    except BaseException as e:
        from_body = e
    state = item.stash.get(_STORE_KEY, None)
    if state is None:
        if from_body is not None:
            raise from_body
        return outcome
    try:
        result = state.judge()
    except Exception as e:
        from fencecheck.api import CheckerError

        if not isinstance(e, CheckerError):  # a bug of ours: keep its traceback
            raise
        if from_body is not None:  # a history the checker cannot read: one line
            item.add_report_section("call", "fencecheck", f"not judged: {e}")
            raise from_body from None
        pytest.fail(f"fencecheck could not judge the recorded lock history: {e}", pytrace=False)
    if from_body is not None:
        if result is not None and result.valid is False:
            item.add_report_section("call", "fencecheck", result.summary())
        raise from_body
    if result is not None and result.valid is False:
        pytest.fail(f"fencecheck found violations in the recorded lock history "
                    f"({state.recorder.path}):\n{result.summary()}", pytrace=False)
    return outcome


@pytest.fixture
def fencecheck_scenario(request: pytest.FixtureRequest,
                        tmp_path: Path) -> Callable[..., Result]:
    """`run(**options) -> Result`: one `fencecheck run` (options as in a matrix row), its run
    kept under --fencecheck-store (else the test's tmp dir); verdict, seed and run folder go to
    the JUnit report."""
    store = _store(request.config) or tmp_path / "store"

    def run(**options: Any) -> Result:
        from fencecheck.api import run_scenario

        options.setdefault("store", store)
        result = run_scenario(**options)
        _record(request.node, result, result.run_dir)
        return result

    return run
