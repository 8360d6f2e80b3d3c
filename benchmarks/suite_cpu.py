"""Where a command's CPU time goes, per kind of process: `make test` (or any command) run under a sampler
that reads /proc for every process of the command's tree and sums their CPU seconds by kind: the
interpreter's environment and what it runs (`.venv-image python train.py`, `.venv python -m pytest`,
`node program.js`, `cfn-guard`, ...).

The total is exact: it is the CPU of every process of the tree, read from this process's own children
times once all have been waited for (the sampler is the tree's subreaper, so orphans come back to it). The
split is sampled every --interval seconds: what a process spent after its last sample, or a process that
lived less than one interval, is printed as "between samples".

    .venv/bin/python benchmarks/suite_cpu.py [--interval 0.2] [--top 25] -- make test
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
INLINE_CODE = ("-c", "-e", "--eval", "-p", "--print")  # python -c, node -e/-p: the code is no name


def label(argv: list[str]) -> str:
    """A process's kind: its program, and for an interpreter the environment and the script or module."""
    if not argv:
        return "?"
    program = Path(argv[0])
    name = program.name
    if not (name.startswith("python") or name == "node"):
        return name
    # A virtual environment's interpreter: the environment's name tells the suites apart.
    environment = program.parent.parent.name + " " if (program.parent.parent / "pyvenv.cfg").exists() else ""
    arguments = iter(argv[1:])
    for argument in arguments:
        if argument in INLINE_CODE:
            return f"{environment}{name} {argument}"
        if argument == "-m":
            return f"{environment}{name} -m {next(arguments, '')}"
        if not argument.startswith("-"):
            return f"{environment}{name} {Path(argument).name}"
    return f"{environment}{name}"


def read_process(pid: str) -> tuple[int, str, float, list[str]] | None:
    """(parent pid, start time, CPU seconds, argv) from /proc, or None for a process gone meanwhile."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return int(fields[1]), fields[19], (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, argv


class Sampler:
    def __init__(self) -> None:
        self.latest: dict[tuple[int, str], tuple[float, str]] = {}  # (pid, start time) -> (CPU s, kind)

    def sample(self) -> None:
        processes = {int(pid): read_process(pid) for pid in os.listdir("/proc") if pid.isdigit()}
        mine = {os.getpid()}
        # Parents before children is not guaranteed by pid order: follow each chain up to this process.
        for pid, process in processes.items():
            chain = []
            while process is not None and pid not in mine and pid > 1:
                chain.append(pid)
                pid = process[0]
                process = processes.get(pid)
            if pid in mine:
                mine.update(chain)
        for pid in mine - {os.getpid()}:
            process = processes[pid]
            if process is not None and process[3]:  # a zombie has no argv: its last sample stands
                self.latest[(pid, process[1])] = (process[2], label(process[3]))

    def by_kind(self) -> tuple[Counter, Counter]:
        seconds, counts = Counter(), Counter()
        for cpu, kind in self.latest.values():
            seconds[kind] += cpu
            counts[kind] += 1
        return seconds, counts


def reap_orphans(command: int) -> None:
    """Wait for processes of the tree that their parents left to this subreaper (their CPU counts then);
    the command itself is left to Popen, which reads its exit status."""
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if ended is None or ended.si_pid == command:
            return
        os.waitpid(ended.si_pid, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between samples")
    parser.add_argument("--top", type=int, default=25, help="kinds to print, the most CPU first")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    arguments = parser.parse_args()
    command = arguments.command[1:] if arguments.command[:1] == ["--"] else arguments.command
    if not command:
        parser.error("argument command: give the command to measure after --, e.g. -- make test")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    sampler = Sampler()
    started = time.monotonic()
    child = subprocess.Popen(command)
    try:
        while child.poll() is None:
            sampler.sample()
            reap_orphans(child.pid)
            time.sleep(arguments.interval)
    except KeyboardInterrupt:  # the command had the signal too: report what it spent until it ended
        child.wait()
    reap_orphans(child.pid)
    wall = time.monotonic() - started
    times = os.times()
    total = times.children_user + times.children_system
    seconds, counts = sampler.by_kind()
    print(f"\nsuite_cpu: {' '.join(command)}: exit {child.returncode}, {wall:.0f} s, {total:.1f} CPU-s")
    print(f"{'CPU-s':>9} {'share':>6} {'procs':>6}  kind")
    for kind, cpu in seconds.most_common(arguments.top):
        print(f"{cpu:9.1f} {cpu / total if total else 0:6.1%} {counts[kind]:6d}  {kind}")
    rest = seconds.most_common()[arguments.top :]
    if rest:
        other = sum(cpu for _, cpu in rest)
        print(f"{other:9.1f} {other / total if total else 0:6.1%} {len(rest):6d}  ({len(rest)} other kinds)")
    between = max(total - sum(seconds.values()), 0.0)
    print(f"{between:9.1f} {between / total if total else 0:6.1%} {'':6}  between samples")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
