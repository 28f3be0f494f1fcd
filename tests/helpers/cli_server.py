"""A process that has imported fedlight's CLI once and forks a fresh child for each `python -m
fedlight` a test asks for, so the suite pays torch's and Lightning's import (about 6 s on 2 cores)
once per test process instead of once per command.

Each child is its own process, as with `subprocess.run`: its own working directory, environment,
argv, stdin from /dev/null and stdout/stderr into files; it runs `fedlight.__main__` as `__main__`
(what `python -m fedlight` runs) and exits with the command's exit code. This process never runs
a torch operation, so a child starts without an OpenMP thread pool, as a new process does; torch's
thread count, which OpenMP reads from OMP_NUM_THREADS when torch is loaded, is set in the child
where the command's environment asks for another. Tests that look at what a command imports, start
a launcher (torchrun) or signal the process use `subprocess` directly (`run_cli(fresh=True)`).

Protocol, one JSON line per request on stdin: {"argv", "cwd", "env", "stdout", "stderr"}; the
answer, one JSON line on stdout: {"pid"} when the child started, then {"returncode"}.
"""

import atexit
import gc
import json
import os
import runpy
import sys
import traceback

import torch

import fedlight.cli.main  # noqa: F401  (the import this process exists to share)


def run_child(request: dict) -> None:
    """In the forked child: become the command, run it, exit with its code (never returns)."""
    code = 1
    try:
        os.chdir(request["cwd"])
        threads = request["env"].get("OMP_NUM_THREADS")
        if threads != os.environ.get("OMP_NUM_THREADS") and threads:
            torch.set_num_threads(int(threads))
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.argv = ["-m", *request["argv"]]
        runpy.run_module("fedlight", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, int | None):
            print(done.code, file=sys.stderr)
    except Exception:  # noqa: BLE001  (printed as the interpreter prints it: exit code 1)
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what the interpreter does at a normal exit
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    # what every child inherits (torch, Lightning, Hydra, fedlight) is left out of the cyclic
    # collector's walks (CPython's `gc.freeze`, meant for forking servers): a run's gc.collect()
    # walks its own objects only, and the inherited pages stay shared
    gc.collect()
    gc.freeze()
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints go to stderr, not into the answers
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    serve()
