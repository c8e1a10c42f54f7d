"""The report tests' run-directory fixture (copies of the hand-made runs in tests/data/runs), for
the unit tier; the browser fixture stays with the browser tests in tests/reports."""

from tests.reports.conftest import store

__all__ = ["store"]
