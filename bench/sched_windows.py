#!/usr/bin/env python3
"""Who had the CPUs while the calls were slow.

Reads `perf sched timehist -w` (recorded with `-k CLOCK_MONOTONIC`) and the
load's output of `ithaca-bench load --slow-ms` (`load.txt`: the run's start
on the wall clock and its slow calls per window), and prints, for the most
crowded windows, the CPU time each process (or kernel thread) ran in them,
and the longest wait a woken thread had for a CPU. A process outside the
stack in those lines (another program starting, a kernel worker) is what
made the tail there; the stack's own threads with a long wait, the machine
being short of CPU.

    bench/sched_windows.py TIMEHIST LOAD_TXT OFFSET [WINDOWS]

OFFSET is the wall clock minus CLOCK_MONOTONIC, in seconds (Python's
`time.time() - time.monotonic()`), taken on the same machine during the run.
WINDOWS (default 5) is how many of the most crowded windows to print.
"""

import collections
import re
import sys

TASK = re.compile(r"(.*)\[(\d+)(?:/(\d+))?\]")
SLOW = re.compile(r"at\s+([\d.]+) s:\s+(\d+) calls, the slowest ([\d.]+) ms")
START = re.compile(r"run started at ([\d.]+) s after the Unix epoch")
WINDOW = re.compile(r"by the ([\d.]+) ms of the run")


def load_windows(path):
    text = open(path, encoding="utf-8").read()
    start = START.search(text)
    window = WINDOW.search(text)
    if not start or not window:
        sys.exit(f"{path}: no slow-call windows (run the load with --slow-ms)")
    slow = [(float(a), int(n), float(ms)) for a, n, ms in SLOW.findall(text)]
    return float(start.group(1)), float(window.group(1)) / 1000.0, slow


def switches(path):
    """(end time, task, process id, wait for a CPU ms, ran ms) per switch."""
    for line in open(path, encoding="utf-8", errors="replace"):
        parts = line.split()
        if len(parts) < 6 or "awakened:" in parts:
            continue
        try:
            at = float(parts[0])
            ran = float(parts[-1])
            delay = float(parts[-2])
        except ValueError:
            continue
        task = TASK.match(parts[2])
        if not task:
            continue
        pid = task.group(3) or task.group(2)
        yield at, task.group(1), pid, delay, ran


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    timehist, load_txt, offset = sys.argv[1], sys.argv[2], float(sys.argv[3])
    shown = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    started, width, slow = load_windows(load_txt)
    if not slow:
        print("no slow calls in the run")
        return
    crowded = sorted(slow, key=lambda w: -w[1])[:shown]
    # Each window as monotonic seconds.
    spans = [(started - offset + at, started - offset + at + width, at, n, ms)
             for at, n, ms in crowded]
    ran = [collections.Counter() for _ in spans]
    waited = [0.0 for _ in spans]
    names = {}
    for end, name, pid, delay, ms in switches(timehist):
        begin = end - ms / 1000.0
        for i, (lo, hi, *_rest) in enumerate(spans):
            overlap = min(end, hi) - max(begin, lo)
            if overlap <= 0:
                continue
            key = "idle" if name == "<idle>" else pid
            names.setdefault(key, name)
            ran[i][key] += overlap * 1000.0
            if name != "<idle>":
                waited[i] = max(waited[i], delay)
    for i, (_lo, _hi, at, n, ms) in enumerate(spans):
        total = sum(ran[i].values())
        if total == 0:
            print(f"at {at:8.3f} s ({n} slow, up to {ms:.1f} ms): outside the recording")
            continue
        print(f"at {at:8.3f} s ({n} slow, up to {ms:.1f} ms), longest wait for a CPU "
              f"{waited[i]:.2f} ms; CPU ms by process:")
        for key, cpu in ran[i].most_common(8):
            label = "idle" if key == "idle" else f"{names[key]} [{key}]"
            print(f"    {cpu:7.1f}  {label}")


if __name__ == "__main__":
    main()
