"""Helpers that read the common keys of a client's or resource's `options` mapping:
`endpoints` (list of "host:port"), `address` ("host:port"), `op_timeout_s`.
Bad options raise WorkloadError with the key named, so a config mistake reads as one line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fencecheck.workloads.base import WorkloadError

DEFAULT_OP_TIMEOUT_S = 1.0


def parse_address(text: str) -> tuple[str, int]:
    """"host:port" -> (host, port). IPv6 hosts go in brackets: "[::1]:6379"."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise WorkloadError(f"bad address {text!r}: expected host:port")
    return host.strip("[]"), int(port)


def endpoints(options: Mapping[str, Any]) -> list[tuple[str, int]]:
    raw = options.get("endpoints")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise WorkloadError("options.endpoints must be a non-empty list of host:port")
    return [parse_address(str(e)) for e in raw]


def address(options: Mapping[str, Any]) -> tuple[str, int]:
    raw = options.get("address")
    if raw is None:
        return endpoints(options)[0]
    return parse_address(str(raw))


def op_timeout_s(options: Mapping[str, Any]) -> float:
    raw = options.get("op_timeout_s", DEFAULT_OP_TIMEOUT_S)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise WorkloadError(f"options.op_timeout_s must be a number, not {raw!r}") from None
    if value <= 0:
        raise WorkloadError("options.op_timeout_s must be > 0")
    return value
