#!/usr/bin/env python3
"""Where a keystroke's time goes, per hop, from a trace of system calls.

Reads `perf script` output of `raw_syscalls:sys_enter`,
`raw_syscalls:sys_exit` and `sched:sched_switch` events, recorded on every
CPU (docs/BENCHMARKS.md, "per hop", says how), and prints, for the threads
asked for, a Markdown table:

- every transition between two system calls of one thread (the previous
  call's exit to the next call's entry): how often it happens per echo and
  the median time between, less any time the thread spent switched out
  meanwhile (a write that wakes the program on the same CPU is often
  preempted on its way back): user-space work;
- every system call: how often per echo and its median time inside the
  kernel (`epoll_wait` and `poll` excluded: that is sleep);
- totals per echo: system calls, user-space time, kernel time.

An echo is counted as one call of `--per` (default `recvfrom`: each server
reads each keystroke's message with one).

    perf record -a -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit \
        -e sched:sched_switch -- sleep 3
    perf script --ns -F comm,pid,tid,cpu,time,event,trace \
        | python3 bench/hops.py --pid PID --comm tokio-rt-worker

`--self-test` checks the arithmetic on a small trace and exits.
"""

import argparse
import re
import statistics
import sys
from collections import defaultdict

# x86-64 numbers of the calls the servers make on the echo path.
NAMES = {
    0: "read",
    1: "write",
    7: "poll",
    17: "pread64",
    18: "pwrite64",
    44: "sendto",
    45: "recvfrom",
    202: "futex",
    232: "epoll_wait",
    233: "epoll_ctl",
    281: "epoll_pwait",
}
SLEEPS = {"epoll_wait", "epoll_pwait", "poll"}

# "comm [pid/]tid [cpu] time: event: ..."
EVENT = re.compile(
    r"^\s*(?P<comm>.+?)\s+(?:(?P<pid>\d+)/)?(?P<tid>\d+)\s+\[\d+\]\s+(?P<time>[\d.]+):\s+"
    r"(?P<event>\S+):\s+(?P<rest>.*)$"
)
SYSCALL = re.compile(r"NR (?P<nr>-?\d+)")
SWITCH = re.compile(r"prev_pid=(?P<prev>\d+) .*==> .*next_pid=(?P<next>\d+)")


def name(nr):
    return NAMES.get(nr, f"nr{nr}")


def analyse(lines, comm=None, per="recvfrom", pid=None):
    """The hop table's numbers for the trace `lines`, threads named `comm`
    of process `pid` (all when None)."""
    last_exit = {}  # tid -> (time, call)
    entered = {}  # tid -> (time, call)
    off_since = {}  # tid -> when it was switched out
    off_total = defaultdict(float)  # tid -> seconds switched out since its last exit
    ours = set()  # tids of the threads asked for
    gaps = defaultdict(list)  # (call, next call) -> [us]
    inside = defaultdict(list)  # call -> [us]
    calls = defaultdict(int)
    for line in lines:
        match = EVENT.match(line)
        if not match:
            continue
        time = float(match["time"])
        if match["event"] == "sched:sched_switch":
            switch = SWITCH.search(match["rest"])
            if switch:
                prev, following = int(switch["prev"]), int(switch["next"])
                if prev in ours:
                    off_since[prev] = time
                if following in off_since:
                    off_total[following] += time - off_since.pop(following)
            continue
        syscall = SYSCALL.match(match["rest"])
        if not syscall or not match["event"].startswith("raw_syscalls:sys_"):
            continue
        if comm is not None and match["comm"] != comm:
            continue
        if pid is not None and match["pid"] is not None and int(match["pid"]) != pid:
            continue
        tid = int(match["tid"])
        ours.add(tid)
        call = name(int(syscall["nr"]))
        if match["event"].endswith("enter"):
            calls[call] += 1
            if tid in last_exit:
                then, previous = last_exit[tid]
                gaps[(previous, call)].append((time - then - off_total[tid]) * 1e6)
            entered[tid] = (time, call)
        else:
            if tid in entered and entered[tid][1] == call:
                inside[call].append((time - entered[tid][0]) * 1e6)
            last_exit[tid] = (time, call)
            off_total[tid] = 0.0
    echoes = calls.get(per, 0)
    if echoes == 0:
        raise SystemExit(f"no `{per}` in the trace: nothing to count echoes by")
    hops = [
        (a, b, len(v) / echoes, statistics.median(v))
        for (a, b), v in gaps.items()
        if len(v) / echoes >= 0.05
    ]
    hops.sort(key=lambda h: -h[2] * h[3])
    kernel = [
        (c, calls[c] / echoes, statistics.median(v))
        for c, v in inside.items()
        if calls[c] / echoes >= 0.05
    ]
    kernel.sort(key=lambda k: -k[1] * k[2])
    return {
        "echoes": echoes,
        "hops": hops,
        "kernel": kernel,
        "calls_per_echo": sum(calls.values()) / echoes,
        "user_us": sum(n * us for _, _, n, us in hops),
        "kernel_us": sum(n * us for c, n, us in kernel if c not in SLEEPS),
    }


def table(result, title):
    out = [f"**{title}**: {result['echoes']} echoes", ""]
    out.append("| between | per echo | median, us |")
    out.append("|---|---:|---:|")
    for a, b, n, us in result["hops"]:
        out.append(f"| `{a}` → `{b}` | {n:.2f} | {us:.2f} |")
    for c, n, us in result["kernel"]:
        what = "asleep" if c in SLEEPS else "in the kernel"
        out.append(f"| in `{c}` ({what}) | {n:.2f} | {us:.2f} |")
    out.append(
        f"| **per echo** | **{result['calls_per_echo']:.1f} calls** | "
        f"**{result['user_us']:.1f} user, {result['kernel_us']:.1f} kernel** |"
    )
    return "\n".join(out)


SAMPLE = """\
 tokio-rt-worker  7428 [000] 24382.720355000:  raw_syscalls:sys_exit: NR 232 = 1
 tokio-rt-worker  7428 [000] 24382.720361000: raw_syscalls:sys_enter: NR 45 (12, 7fdd9c012f72, 32e, 0, 0, 0)
 tokio-rt-worker  7428 [000] 24382.720362000:  raw_syscalls:sys_exit: NR 45 = 26
 tokio-rt-worker  7428 [000] 24382.720364000: raw_syscalls:sys_enter: NR 1 (10, 7fdd9c00de00, 1, c4, 0, 2)
 tokio-rt-worker  7428 [000] 24382.720366000:  raw_syscalls:sys_exit: NR 1 = 1
 tokio-rt-worker  7428 [000] 24382.720366500: sched:sched_switch: prev_comm=tokio-rt-worker prev_pid=7428 prev_prio=120 prev_state=R ==> next_comm=cat next_pid=7500 next_prio=120
              cat  7500 [000] 24382.720369000: sched:sched_switch: prev_comm=cat prev_pid=7500 prev_prio=120 prev_state=S ==> next_comm=tokio-rt-worker next_pid=7428 next_prio=120
 tokio-rt-worker  7428 [000] 24382.720370000: raw_syscalls:sys_enter: NR 232 (3, 55bec254cab0, 400, 336, 0, 1)
              cat  7500 [001] 24382.720371000: raw_syscalls:sys_enter: NR 0 (0, 0, 1000, 0, 0, 0)
 tokio-rt-worker  7428 [000] 24382.720377000:  raw_syscalls:sys_exit: NR 232 = 1
 tokio-rt-worker  7428 [000] 24382.720379000: raw_syscalls:sys_enter: NR 45 (12, 7fdd9c012f72, 32e, 0, 0, 0)
 tokio-rt-worker  7428 [000] 24382.720381000:  raw_syscalls:sys_exit: NR 45 = 26
"""


def self_test():
    result = analyse(SAMPLE.splitlines(), comm="tokio-rt-worker")
    assert result["echoes"] == 2, result
    hops = {(a, b): (n, us) for a, b, n, us in result["hops"]}
    # epoll_wait's exit to recvfrom's entry: 6 us, then 2 us; median 4.
    assert abs(hops[("epoll_wait", "recvfrom")][1] - 4.0) < 1e-3, hops
    assert abs(hops[("epoll_wait", "recvfrom")][0] - 1.0) < 1e-9, hops
    assert abs(hops[("recvfrom", "write")][1] - 2.0) < 1e-3, hops
    # write's exit to epoll_wait's entry: 4 us, 2.5 of them switched out.
    assert abs(hops[("write", "epoll_wait")][1] - 1.5) < 1e-3, hops
    kernel = {c: (n, us) for c, n, us in result["kernel"]}
    # recvfrom took 1 us, then 2 us; cat's read is not the server's.
    assert abs(kernel["recvfrom"][1] - 1.5) < 1e-3, kernel
    assert "read" not in kernel, kernel
    assert result["calls_per_echo"] == 2.0, result
    print("hops.py self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comm", help="only threads of this name (perf's comm)")
    parser.add_argument("--pid", type=int, help="only threads of this process")
    parser.add_argument("--per", default="recvfrom", help="the call counted once per echo")
    parser.add_argument("--title", default="per hop")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    print(table(analyse(sys.stdin, args.comm, args.per, args.pid), args.title))


if __name__ == "__main__":
    main()
