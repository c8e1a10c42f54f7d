"""The command group under the CLI: commands imported only when used, usage errors as exit 3.

- Lazy commands: `matrix`, `report`, `compare` and `serve` live in modules that import jinja2,
  pydantic and every backend; registering them eagerly cost `fencecheck check` 0.3 s of imports.
  The group knows their names and imports a module when one of its commands is asked for (to
  run it, or to list it in --help).
- Usage errors (an unknown option, a bad value, a missing argument) are exit code 3 with one line
  on stderr: in this tool exit 2 means "unknown", and click's default for usage errors is 2.
- Any other exception a command lets out is one line and exit 3, never a traceback
  (`FENCECHECK_TRACEBACK=1` lets it through). A Python package the install lacks (a command of
  an extra on a core install, `pip install fencecheck`) is one line naming the extra to install;
  `--help` still lists such a command, saying which extra it needs.
- `shown(text)`: user text (a lock name, a path, an option value) made safe to print through
  rich: markup escaped, control and bidi characters shown as escapes, never sent to the terminal.
- `console()`: the consoles the commands print through; off a terminal (a pipe, a file) they
  never break a line, so a printed path stays whole for `open "$(fencecheck report DIR)"`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from fencecheck.records.text import visible

if TYPE_CHECKING:
    from rich.console import Console

BAD_INPUT = 3
# click's exception classes, wherever this typer gets click from (newer ones vendor it)
UsageError: type[Exception] = typer.BadParameter.__mro__[1]
ClickException: type[Exception] = UsageError.__mro__[1]

# command -> the module whose register(app) defines it
LAZY: dict[str, str] = {
    "run": "fencecheck.cli.run",
    "report": "fencecheck.cli.reports",
    "compare": "fencecheck.cli.reports",
    "serve": "fencecheck.cli.reports",
    "matrix": "fencecheck.cli.matrix",
    "merge": "fencecheck.cli.matrix",
    "libraries": "fencecheck.cli.matrix",
    "shrink": "fencecheck.cli.shrink",
    "plugins": "fencecheck.cli.plugins",
    "build": "fencecheck.cli.build",
    "kube": "fencecheck.cli.kube",
}

def shown(text: object) -> str:
    """`text` as rich prints it literally: markup escaped, control characters as escapes."""
    from rich.markup import escape

    return escape(visible(str(text)))


def console(*, stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A console of the CLI. On a terminal rich wraps at its width; anywhere else (a pipe, a file)
    it would wrap at $COLUMNS or 80 and cut a path or a summary line in two, so there it
    soft-wraps: each printed line is written whole, as `print` would (everywhere if `soft_wrap`)."""
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False, soft_wrap=soft_wrap)
    if not c.is_terminal:
        c.soft_wrap = True
    return c


class _OneLine(logging.Formatter):
    """A log record as one line: a crashed check is reported in the results, not as a
    traceback on the terminal (-v logs in full)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            e = record.exc_info[1]
            text += f" ({type(e).__name__}: {e})"
        return f"warning: {visible(' '.join(text.split()))}"


def one_line_logging() -> None:
    """Warnings of the checker on stderr, one line each, never a traceback."""
    logger = logging.getLogger("fencecheck")
    if any(isinstance(h.formatter, _OneLine) for h in logger.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLine())
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)
    logger.propagate = False


# Whether this process is the `fencecheck` program (set by fencecheck.cli.app.main), not a host
# that invokes the command group in-process.
AS_PROGRAM = False


def _command() -> str:
    """`fencecheck <command>` as typed, for messages."""
    words = [a for a in sys.argv[1:] if not a.startswith("-")][:1]
    return " ".join(["fencecheck", *words])


def _needs_extra(name: str, module: str) -> Any:
    """A stand-in for command `name`, whose module needs `module`, which is not installed."""
    from fencecheck.descriptors.extras import dist_for_module, install_hint

    sub = typer.Typer()

    from rich.markup import escape  # typer's help is rich markup: "[run]" would vanish

    @sub.command(name=name, help=escape(f"(needs: {install_hint(dist_for_module(module))})"),
                 add_help_option=False,
                 context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    def missing() -> None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    return typer.main.get_command(sub)


class LazyGroup(TyperGroup):
    """A TyperGroup whose LAZY commands are imported on first use."""

    def _load(self, module: str, name: str) -> None:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:
                return
            # The command exists but a package it needs is not installed (an extra's): it is
            # still listed, and running it says what to install.
            self.commands.setdefault(name, _needs_extra(name, e.name or ""))
            return
        sub = typer.Typer()
        mod.register(sub)
        group = typer.main.get_command(sub)
        commands = getattr(group, "commands", None)
        if commands is None:  # one command: typer returns it, not a group
            commands = {group.name or "": group}
        for name, cmd in commands.items():
            self.commands.setdefault(name, cmd)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in LAZY:
            self._load(LAZY[cmd_name], cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        names = set(super().list_commands(ctx)) | set(LAZY)
        return sorted(names, key=lambda n: (n in LAZY, n))

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the CLI; usage errors exit 3 with one line on stderr."""
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except UsageError as e:
            text: str = e.format_message()  # type: ignore[attr-defined]
            if type(e).__name__ == "NoArgsIsHelpError":  # no arguments: the help it carries
                sys.stderr.write(text.rstrip("\n") + "\n")
                sys.exit(BAD_INPUT)
            ctx = getattr(e, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else ""
            message = visible(" ".join(text.split()))
            sys.stderr.write(f"error: {where}{message} (see --help)\n")
            sys.exit(BAD_INPUT)
        except ClickException as e:
            text = e.format_message()  # type: ignore[attr-defined]
            sys.stderr.write(f"error: {visible(' '.join(text.split()))}\n")
            sys.exit(BAD_INPUT)
        except typer.Abort:
            sys.stderr.write("aborted\n")
            sys.exit(130)
        except ModuleNotFoundError as e:
            if os.environ.get("FENCECHECK_TRACEBACK"):
                raise
            from fencecheck.descriptors.extras import missing_module_message

            sys.stderr.write(f"error: {missing_module_message(e.name or str(e), _command())}\n")
            sys.exit(BAD_INPUT)
        except Exception as e:
            # The last net under every command: a crash is not a verdict, and no command may
            # end in a traceback (FENCECHECK_TRACEBACK=1 shows it, for a bug report).
            if os.environ.get("FENCECHECK_TRACEBACK"):
                raise
            text = visible(" ".join(f"{type(e).__name__}: {e}".split()))
            sys.stderr.write(f"error: {text} (an internal error; FENCECHECK_TRACEBACK=1 shows "
                             "where)\n")
            sys.exit(BAD_INPUT)
        code = rv if isinstance(rv, int) else 0
        search = sys.modules.get("fencecheck.checker.linear.search")
        if AS_PROGRAM and search is not None and search.abandoned():
            # A model search ran out of time: exit now rather than spend seconds freeing it.
            # Only as the program itself: invoked in-process (a test's CliRunner, a user's own
            # harness), os._exit would end the host process, and one search left behind by an
            # earlier call there would end it on any later command (it killed test workers).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        sys.exit(code)
