# The pre-imported Python of a sandbox slot (temper): started once per slot, it forks a child
# for each run, so a run pays for neither the interpreter's start nor these imports. It runs as
# the sandboxed user, under the same seccomp filters as any program (plus a refusal of System V
# IPC, since its runs share an IPC namespace), and makes itself non-dumpable so that a run (a
# forked child with the same uid) cannot read or write its memory.
import ctypes, json, os, resource, runpy, socket, sys, traceback

import array, bisect, collections, copy, dataclasses, decimal, fractions, functools, heapq  # noqa: F401
import itertools, math, operator, random, re, statistics, string, typing  # noqa: F401

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
control = socket.socket(fileno=0)
os.chdir("/")


def child(request, fds):
    code = 70  # the run could not be set up
    try:
        # The control socket is fd 0: close it before fd 0 becomes the run's stdin.
        control.close()
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        for fd in fds:
            os.close(fd)
        os.chdir("/work")
        cpu = int(request["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.argv = ["main.py"]
        code = 0
        try:
            runpy.run_path("main.py", run_name="__main__")
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code & 0xFF
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                code = code or 1
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        os._exit(code)


while True:
    try:
        message, fds, _, _ = socket.recv_fds(control, 65536, 3)
    except OSError:
        break
    if not message:
        break
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        child(request, fds)
    for fd in fds:
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    reply = {
        "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "cpu_ms": (usage.ru_utime + usage.ru_stime) * 1000.0,
        "max_rss_kb": usage.ru_maxrss,
    }
    control.send(json.dumps(reply).encode())
