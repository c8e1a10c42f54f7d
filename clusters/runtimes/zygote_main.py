"""The zygote process (`python -m fencecheck.clusters.runtimes.zygote_main FD ROOM`): serves
the controller's spawn requests on the socket FD by forking, and reports its children's exits.
What a forked worker is, and the protocol: clusters/runtimes/zygote.py."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import sys
import threading
from typing import Any

from fencecheck.clusters.runtimes.zygote import MAX_MSG, MODULE

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15

def _title(argv: list[str]) -> None:
    """Show argv in ps (setproctitle, when installed) and the interpreter's name as the
    process's name (acct, top), as a process exec'd with that argv would."""
    import ctypes

    with contextlib.suppress(ImportError):
        import setproctitle

        setproctitle.setproctitle(" ".join(argv))
    ctypes.CDLL(None).prctl(PR_SET_NAME, os.path.basename(argv[0]).encode()[:15])


def _setns(path: str) -> None:
    import ctypes  # the child only; preloaded by the zygote

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _child(sock: socket.socket, req: dict[str, Any], fds: list[int], zygote: int) -> int:
    """In the forked child: become the worker, run it, and return its exit code."""
    import importlib

    sock.close()
    for sig in (signal.SIGCHLD, signal.SIGTERM):  # the zygote's own dispositions
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (devnull, *fds):
        if fd > 2:
            os.close(fd)
    import ctypes

    # Die with the zygote (it dies with the controller), as an exec'd worker dies with its run.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != zygote:  # the zygote ended before the line above
        return 1
    if req.get("netns"):
        _setns(str(req["netns"]))
    module = str(req["module"])
    sys.argv = [module, *map(str, req["args"])]
    _title([sys.executable, "-m", module, *sys.argv[1:]])  # what an exec'd worker shows
    mod = importlib.import_module(module)
    try:
        code = mod.main(list(sys.argv[1:]))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    # What the interpreter does on its way out, as an exec'd worker's would: join the threads
    # that are not daemons, then the atexit functions.
    import atexit

    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    return int(code or 0)


def _check_main(module: Any) -> None:
    """A module the zygote forks must have `main(argv)`, argv its arguments as a list."""
    import inspect

    fn = getattr(module, "main", None)
    if not callable(fn):
        raise ImportError(f"{module.__name__} has no main(argv)")
    try:
        inspect.signature(fn).bind([])
    except (TypeError, ValueError):
        raise ImportError(f"{module.__name__}.main does not take argv") from None


def _serve(sock: socket.socket) -> None:
    import importlib

    children: set[int] = set()
    me = os.getpid()

    def send(msg: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            sock.send(json.dumps(msg).encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    send({"ready": True})
    while True:
        r, _, _ = select.select([sock], [], [], 0.05)
        reap()
        if not r:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MSG, 2)
        except OSError:
            data, fds = b"", []
        if not data:
            break
        req = json.loads(data)
        if "preload" in req:
            for m in req["preload"]:
                with contextlib.suppress(Exception):
                    importlib.import_module(str(m))
            continue
        try:  # imported here, once: every later child finds it done
            _check_main(importlib.import_module(str(req["module"])))
            pid = os.fork()
        except Exception as e:  # the caller execs instead, and that reports its own failure
            send({"id": req["id"], "error": f"{type(e).__name__}: {e}"})
            for fd in fds:
                os.close(fd)
            continue
        if pid == 0:
            code = 1
            try:
                code = _child(sock, req, fds, me)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                with contextlib.suppress(Exception):
                    logging.shutdown()
                os._exit(code)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        send({"id": req["id"], "pid": pid})
    # The controller is gone or done: nothing this zygote forked outlives it.
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    import ctypes  # noqa: F401  (for the children's setns and prctl)

    # A child's title goes where the zygote's argv was (setproctitle, with SPT_NOENV: never
    # over the environment block, which /proc/PID/environ and the cleaner read): the padding
    # the controller put on the command line is that room.
    os.environ["SPT_NOENV"] = "1"
    _title([sys.executable, "-m", MODULE, args[0]])
    os.environ.pop("SPT_NOENV", None)

    _serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
