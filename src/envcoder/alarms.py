"""XLA's slow-operation alarms kept off the user's terminal.

XLA logs a compile or a constant folding that takes long as an error ("E… slow_operation_alarm.cc:73] … Very slow
compile? If you want to file a bug, …"), with no switch to turn it off (openxla/xla#9828); on a loaded CPU a run
prints several. `hide_xla_alarms` routes the process's standard error through a small forked process that drops
those blocks and passes every other byte on: a child of its own, so that what a crashing process writes last
still reaches the terminal. `TF_CPP_MIN_LOG_LEVEL=0` (every XLA message) keeps them.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time

ALARM = b"slow_operation_alarm.cc"
"""The source file that XLA names in every alarm's first line."""
END = b"attach the results"
"""The end of an alarm's text (its last line may be a rule of asterisks)."""
MAX_LINES = 60
"""Lines held back at most for one alarm: a block without its end is passed on whole."""


def drop_alarms(lines):
    """The lines (bytes, each with its newline) without XLA's alarm blocks."""
    held, closed = [], False
    for line in lines:
        if held:
            held.append(line)
            if END in line:
                held, closed = [], True
            elif len(held) > MAX_LINES:  # not an alarm after all: nothing is lost
                yield from held
                held = []
            continue
        if ALARM in line:
            held = [line]
        elif not (closed and line.strip().startswith(b"*****")):  # the rule that closes an alarm
            yield line
        closed = False
    yield from held


def hide_xla_alarms() -> None:
    """Route this process's standard error through a forked filter (`drop_alarms`). Call it first, before
    anything starts a thread; does nothing where `TF_CPP_MIN_LOG_LEVEL` is 0 or fork is missing."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0" or not hasattr(os, "fork"):
        return
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the filter: it ends when every writer has closed the pipe
        os.close(write)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to handle
        code = 0
        try:
            with os.fdopen(read, "rb", buffering=0) as source:
                for line in drop_alarms(iter(source.readline, b"")):
                    os.write(2, line)
        except OSError:
            code = 1
        os._exit(code)
    os.dup2(write, 2)
    os.close(write)
    os.close(read)
    atexit.register(_drain, pid)  # registered first, so it runs last


def _drain(pid: int) -> None:
    """At exit: the filter passes on what is left before the process ends (else it could print after the
    shell's prompt)."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # the pipe's last writer closed: the filter reads its end
    os.close(devnull)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.01)
