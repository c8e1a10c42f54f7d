"""The resources' `fencing` option is a bool everywhere: a string such as "off" (which reads as
true in Python) is refused rather than guessed at."""

from __future__ import annotations

import pytest

from fencecheck.workloads.base import WorkloadError
from fencecheck.workloads.resources.etcd import fencing_option


@pytest.mark.parametrize(("options", "expected"), [
    ({"fencing": True}, True), ({"fencing": False}, False), ({}, True),
])
def test_fencing_is_a_bool(options: dict[str, object], expected: bool) -> None:
    assert fencing_option(options) is expected


@pytest.mark.parametrize("value", ["off", "on", 0, 1, None])
def test_anything_but_a_bool_is_refused_with_the_field_named(value: object) -> None:
    with pytest.raises(WorkloadError, match="fencing"):
        fencing_option({"fencing": value})
