"""The run's configuration error, apart from the configuration (config.py, pydantic) so that
the Python API can name it on a core install, which has no pydantic (`pip install fencecheck`;
the `run` extra brings it)."""

from __future__ import annotations


class ConfigError(Exception):
    """A configuration the run cannot start with; the message names the field (`field`, where
    it is one of RunConfig's, so that the CLI can name its option instead)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
