"""fencecheck's Python API: the one module a user's code and tests import.

- `check_history(source, *, max_drift=0.01, model=None) -> Result`: judge a history (a file in
  history.jsonl, Jepsen EDN or Jepsen log format, a run folder, or an iterable of event dicts);
  the verdict is the one `fencecheck check` gives, from the checker's own `check_history`.
- `run_scenario(**options) -> Result`: one `fencecheck run` (option names as in a matrix row),
  in a child process of its own; the result carries its run folder.
- `HistoryRecorder(path)`: record a user's own lock and resource operations as a history.
- `Result`: `valid` (True, False, or None for unknown), `incidents`, `violations`, `summary()`,
  `to_json()`, `exit_code`, `run_dir`, `seed`.

Bad input raises `CheckerError` (a history) or `ConfigError` (scenario options), each with a
one-line message naming what is wrong; a scenario that could not run raises `ScenarioError`.
See docs/python-api.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fencecheck.api.core import (
        CheckerError,
        ConfigError,
        HistoryRecorder,
        RecorderError,
        Result,
        ScenarioError,
        check_history,
        run_scenario,
    )

__all__ = [
    "CheckerError",
    "ConfigError",
    "HistoryRecorder",
    "RecorderError",
    "Result",
    "ScenarioError",
    "check_history",
    "run_scenario",
]


def __getattr__(name: str) -> Any:
    # The names load their implementation when first used, so that importing a submodule (the
    # pytest plugin, which every pytest run of a project with fencecheck installed loads) costs
    # nothing of fencecheck.
    if name in __all__:
        return getattr(importlib.import_module("fencecheck.api.core"), name)
    raise AttributeError(f"module 'fencecheck.api' has no attribute {name!r}")
