"""Shared by the benchmarks: how busy the machine was with other work while a benchmark ran."""

from __future__ import annotations

import os
import resource
import time


def _proc_stat() -> tuple[float, float]:
    """Return (busy seconds, total seconds) summed over all CPUs since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy / hz, (busy + idle + iowait) / hz


def _own_cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class Contention:
    """Context manager: the share of the CPUs that other processes (or the hypervisor) used meanwhile."""

    def __enter__(self) -> Contention:
        self.cpus = os.cpu_count() or 1
        self._t = time.perf_counter()
        self._own = _own_cpu()
        try:
            self._stat: tuple[float, float] | None = _proc_stat()
        except OSError:
            self._stat = None
        self.others: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t
        if self._stat is None or wall <= 0:
            return
        busy = _proc_stat()[0] - self._stat[0]
        own = _own_cpu() - self._own
        self.others = max(0.0, (busy - own) / (self.cpus * wall))

    def line(self) -> str:
        """One comment line for the benchmark output."""
        if self.others is None:
            return f"# machine: {self.cpus} CPUs; contention unknown"
        note = "  (busy machine: figures are not reliable)" if self.others > 0.10 else ""
        return f"# machine: {self.cpus} CPUs; other processes used {self.others:.0%} of them during the run{note}"
