"""A fork server for the tests' ``alilama`` commands: it imports torch and the CLI once, then forks a child
per command, which runs as ``python -c "from alilama_core.app.cli import main; main()" ARGS`` would.

Started by ``alilama_testing.run_cli`` with the environment the commands run in (a call with another
environment gets a fresh interpreter instead). ``import torch`` takes seconds on a test machine, and the
suite runs hundreds of commands; a forked child skips it and nothing else. The child is a process of its
own: its working folder, ``sys.argv``, standard streams (files, not a terminal; stdin empty) and exit
status are its own, and it ends through the interpreter's normal shutdown (threads joined, ``atexit``,
finalizers), as a fresh process does. The server never runs a command, nor any torch operation, so no
thread pool of torch's exists when it forks.

Protocol: one JSON line per command on stdin (``args``, ``cwd``, ``timeout``, ``stdout``, ``stderr``: the
files for the child's output); one JSON line back on stdout (``exit``: the status as ``subprocess``
gives it, ``killed``: it ran past its timeout).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TextIO


def wait(pid: int, timeout: float) -> tuple[int, bool]:
    """A forked child's exit status, as ``subprocess`` gives it; after ``timeout`` seconds its process group
    is killed. Also whether it was."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), True
        time.sleep(0.005)


def reply_channel() -> TextIO:
    """The replies' stream: the server's stdout as it was started; from here on, whatever else the server
    prints goes to its stderr (its log), never into the replies. Called before anything is imported."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return reply


def serve(reply: TextIO, extra: Callable[[dict, bool], dict] | None = None) -> dict | None:
    """Answer requests until stdin closes (``None``); in a forked child, its request. ``extra(spec, killed)``
    adds to each answer what the child left behind."""
    for line in sys.stdin:
        spec = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            reply.close()
            os.setpgid(0, 0)  # its own group, so a timeout kills what it started too
            return spec
        try:
            os.setpgid(pid, pid)  # from both sides: the group exists before the parent could kill it
        except OSError:
            pass  # the child made it already, or has exited
        status, killed = wait(pid, spec["timeout"])
        answer = {"exit": status, "killed": killed, **(extra(spec, killed) if extra else {})}
        reply.write(json.dumps(answer) + "\n")
        reply.flush()
    return None


def redirect(spec: dict) -> None:
    """In a child: stdin empty, stdout and stderr (the file descriptors) into the request's files."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin.close()
    sys.stdin = open(0, encoding=sys.stdin.encoding, closefd=False)  # noqa: SIM115 - the process's own stdin
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(spec[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)


def become(spec: dict) -> None:
    """In the child: the command's folder, argv and standard streams."""
    os.chdir(spec["cwd"])
    sys.argv = ["-c", *spec["args"]]
    redirect(spec)


if __name__ == "__main__":
    replies = reply_channel()
    import torch  # noqa: F401 - what every command imports first, and the seconds this server saves

    import alilama_core.app.cli  # noqa: F401

    request = serve(replies)
    if request is None:
        sys.exit(0)
    become(request)
    del request
    from alilama_core.app.cli import main

    main()
