"""A Fault over a clusters Nemesis: start/stop become the nemesis ops `start-<name>` and
`stop-<name>`, as the history records them."""

from __future__ import annotations

from typing import Any

from fencecheck.clusters.base import ClusterError, Nemesis, NemesisOp


class NemesisFault:
    """Base of the built-in faults: subclasses set `name` and `self.nemesis` in `bind`."""

    name = "nemesis"
    nemesis: Nemesis | None = None

    def _bound(self) -> Nemesis:
        if self.nemesis is None:
            raise ClusterError(f"{self.name}: fault used before bind")
        return self.nemesis

    def start(self, value: Any) -> Any:
        return self._bound().invoke(NemesisOp(f"start-{self.name}", value))

    def stop(self) -> Any:
        return self._bound().invoke(NemesisOp(f"stop-{self.name}", None))

    def heal(self) -> None:
        if self.nemesis is not None:
            self.nemesis.heal()
