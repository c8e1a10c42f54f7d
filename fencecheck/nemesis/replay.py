"""`fencecheck run --replay RUN_DIR`: the configuration of a recorded run with exactly its fault
schedule (RUN_DIR/schedule.json, see fencecheck/nemesis/schedule.py): the same faults after the
same gaps
for the same holds, each aimed at the same role (the holder of the moment is resolved again at
replay time; named nodes and workers are the same names). Timing inside the system under test is
not replayed: a replay is a rerun that puts the faults where they were, not a recording.

RUN_DIR needs only `test.json` and `schedule.json`: a run folder, what `fencecheck shrink`
writes, or a shipped finding (examples/findings/<name>/, no history). `drift` says which of the
versions it was recorded on (test.json's `versions`: the lock client, the backend's server) differ
from the ones installed, so that a replay that no longer finds it can be read for what it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from msgspec import UNSET
from pydantic import ValidationError

from fencecheck.nemesis.schedule import load_steps
from fencecheck.records import test as test_record
from fencecheck.records.base import RecordError
from fencecheck.run.config import ConfigError, OptionError, RunConfig

SCHEDULE = "schedule.json"


def replay_config(run_dir: Path, store: Path) -> RunConfig:
    """The recorded run's configuration, kept in `store`, replaying its schedule. A folder that
    is not a run with a schedule is a one-line ConfigError."""
    test_json, schedule = run_dir / "test.json", run_dir / SCHEDULE
    try:
        data = test_json.read_bytes()
    except OSError as e:
        raise ConfigError(f"--replay: {test_json}: cannot read: {e.strerror or e} "
                          "(expected a run directory)") from None
    try:
        recorded = test_record.decode(data, str(test_json)).config
    except RecordError as e:
        raise ConfigError(f"--replay: not a run's test.json: {e}") from None
    if not recorded:
        raise ConfigError(f"--replay: {test_json}: config: missing (not a run's test.json)")
    if not schedule.is_file():
        raise ConfigError(f"--replay: {schedule}: no recorded schedule (the run predates "
                          "schedule recording, or was stopped before its faults began)")
    try:
        cfg = RunConfig.model_validate({**recorded, "store": store, "replay": schedule.resolve()})
    except OptionError as e:
        raise ConfigError(f"--replay: {test_json}: config: "
                          f"{str(e).removeprefix('bad configuration: ')}") from None
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"--replay: {test_json}: config: {'.'.join(map(str, err['loc']))}: "
                          f"{err['msg']}") from None
    load_steps(schedule, list(cfg.faults))
    return cfg


def recorded_versions(run_dir: Path) -> dict[str, str | None]:
    """The versions test.json says the recorded run ran on ({} where it names none)."""
    try:
        rec = test_record.read(run_dir / "test.json")
    except RecordError:
        return {}
    return {} if rec.versions is UNSET else dict(rec.versions)


def drift(cfg: RunConfig, recorded: Mapping[str, str | None],
          installed: Callable[[RunConfig], Mapping[str, str | None]] | None = None) -> list[str]:
    """One line per version the finding depends on (its lock client, its backend's server) that
    the recorded run had and this machine does not: "client: recorded X, installed Y"."""
    if installed is None:
        from fencecheck.run.store import versions

        def installed(c: RunConfig) -> Mapping[str, str | None]:
            return versions(c.backend, c.client_name, c.client_options)

    now = installed(cfg)
    return [f"{key}: recorded {recorded[key]}, installed {now.get(key) or 'none'}"
            for key in ("client", cfg.backend)
            if recorded.get(key) is not None and recorded.get(key) != now.get(key)]
