"""The options models of the clients that declare theirs (`--client-opt KEY=VALUE`; the
descriptors name them). Each lists what a user may set, with the default the client applies;
what the lock service adds (endpoints, the op timeout) is not a user's option. Kept apart from
the clients so that checking and listing them imports no database driver."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PgAdvisoryOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    idle_session_timeout: bool = Field(
        default=False,
        description="the server ends a session silent for a lease (a paused holder loses its lock)",
    )
    poll_ms: float = Field(default=20, gt=0, description="how often a waiting acquire tries again")
    dsn: str | None = Field(
        default=None, description="a libpq connection string in place of the service's address"
    )
    database: str = Field(default="fencecheck", description="the database")
    user: str = Field(default="postgres", description="the login role")


class MariadbOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    wait_timeout: bool = Field(
        default=False,
        description="the server ends a session silent for a lease (a paused holder loses its lock)",
    )
    database: str = Field(default="fencecheck", description="the database")
    user: str = Field(default="fencecheck", description="the login user")
