"""The lose-unsynced fault's wiring without root or servers: a ServiceDirs fault places the data
directories after the service is built and before it starts, and its undo runs after the
service's teardown (the mounts outlive the servers on them); every backend that declares the
capability has a service with the protocols the fault calls; one that does not is refused."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from fencecheck.clusters.base import DataDirs, Killable, LockService
from fencecheck.descriptors import catalog
from fencecheck.descriptors.base import UNSYNCED, FaultDescriptor
from fencecheck.nemesis.faults.base import FaultOptions, ServiceDirs
from fencecheck.nemesis.faults.lose_unsynced import LoseUnsyncedFault
from fencecheck.run import controller
from fencecheck.run import wiring as backends
from fencecheck.run.config import ConfigError, make_config
from fencecheck.run.plan import Parts
from tests.fencecheck.fakes import Calls, FakeFault, fake_parts


class FakeDirsFault(FakeFault):
    def place(self, service: LockService, nodes: list[str], stack: ExitStack,
              ledger: Any) -> None:
        stack.callback(self.calls, f"{self.name}.unmount")  # the undo first
        self.calls(f"{self.name}.place {','.join(nodes)}")


def test_place_runs_before_the_service_starts_and_its_undo_after_it_stops(
        tmp_path: Path) -> None:
    calls = Calls()
    parts = fake_parts(calls)

    def fault(d: FaultDescriptor, opts: FaultOptions) -> FakeFault:
        return FakeDirsFault(d.name, calls)

    parts = Parts(parts.runtime, parts.service, parts.resource, fault, report=False)
    cfg = make_config(nemesis=("lose-unsynced",), time_limit_s=0.3, store=tmp_path,
                      nemesis_interval_s=(0.05, 0.1))
    assert isinstance(FakeDirsFault("x", calls), ServiceDirs)
    controller.run(cfg, parts=parts)
    i = calls.index
    assert i("runtime.setup n1,r1 c1,c2,c3,c4,c5") < i("lose-unsynced.place n1") \
        < i("service.setup n1") < i("lose-unsynced.bind c1,c2,c3,c4,c5")
    assert i("service.teardown") < i("lose-unsynced.unmount") < i("runtime.teardown")


def test_the_real_fault_is_a_service_dirs_fault() -> None:
    assert isinstance(LoseUnsyncedFault.__new__(LoseUnsyncedFault), ServiceDirs)


@pytest.mark.parametrize("backend", [b.name for b in catalog.backends().values()
                                     if UNSYNCED in b.capabilities])
def test_a_backend_that_declares_it_has_a_service_that_can_do_it(backend: str) -> None:
    service = backends.make_service(make_config(backend=backend))
    assert isinstance(service, DataDirs) and isinstance(service, Killable)


def test_a_backend_without_it_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match="lose-unsynced: not supported by backend 'mariadb'"):
        backends.check_compatible(make_config(backend="mariadb", nemesis=("lose-unsynced",)))
