"""When device prefetch pins a batch: only once the loop is seen to be compute-bound.

Pinning is one more full copy of every batch (pageable to page-locked memory). It pays when the GPU
is the bottleneck: the host then has time to spare, and a pinned batch's copy runs asynchronously
while the GPU works through the steps queued before it. When the loop waits for data, the extra copy
lies on the critical path (issue 36: 0.79x on an H100, 72.0 -> 91.1 ms/step), whereas an unpinned
copy on the side stream costs the host what the plain loop's copy costs. So the prefetcher starts
unpinned, measures on the GPU's clock how long the compute stream sat idle waiting for each batch
versus computing, and pins the rest of the epoch only if it waited less than ``PIN_BELOW_IDLE``, or
if the GPU falls ``BACKLOG_BATCHES`` batches behind the loop (a loop that never synchronises is
compute-bound long before the events of its first batches complete).

The choice is plain arithmetic on seconds, so it is tested with made-up times; the CUDA events that
supply them live in ``hpc_runner.data.prefetch``.
"""

from __future__ import annotations

from dataclasses import dataclass

# idle share of the compute stream below which the loop is compute-bound; the bottleneck report calls
# a wait under 5% of step time compute-bound too, and pinning must not cost a loop that waits more
PIN_BELOW_IDLE = 0.05
WARMUP_BATCHES = 1  # the first batches fill the loader's buffer: their waits say nothing about the loop
WINDOW_BATCHES = 4  # batches measured before deciding: a decision after one batch would follow its noise
# batches handed over whose work the GPU has not begun: that much queued work means the data came early
BACKLOG_BATCHES = 3


def compute_bound(idle_s: float, busy_s: float, threshold: float = PIN_BELOW_IDLE) -> bool:
    """Whether the compute stream waited for data less than `threshold` of the time it was measured."""
    total = idle_s + busy_s
    return total > 0 and idle_s / total < threshold


@dataclass
class PinChoice:
    """Decide once per epoch, from the idle and busy times of its first batches, whether to pin the rest.

    ``pin`` is False until `window` batches after the `warmup` ones have been observed (or a backlog
    of `backlog` batches is seen), so a short epoch is never pinned: unpinned never costs a loop more
    than the plain loop's own copy.
    """

    warmup: int = WARMUP_BATCHES
    window: int = WINDOW_BATCHES
    threshold: float = PIN_BELOW_IDLE
    backlog: int = BACKLOG_BATCHES
    seen: int = 0
    behind: int = 0
    idle_s: float = 0.0
    busy_s: float = 0.0
    decided: bool | None = None

    def observe(self, idle_s: float, busy_s: float) -> None:
        """Count one batch: `idle_s` the compute stream waited for it, `busy_s` it computed on the one before."""
        if self.decided is not None:
            return
        self.seen += 1
        if self.seen <= self.warmup:
            return
        self.idle_s += max(0.0, idle_s)
        self.busy_s += max(0.0, busy_s)
        if self.seen >= self.warmup + self.window:
            self.decided = compute_bound(self.idle_s, self.busy_s, self.threshold)

    def queued(self, batches: int) -> None:
        """Note that the GPU has not yet begun the last `batches` batches handed over; a backlog decides: pin."""
        if self.decided is None and batches >= self.backlog:
            self.behind, self.decided = batches, True

    @property
    def pin(self) -> bool:
        """Whether the batches from now on are pinned before their copy."""
        return bool(self.decided)

    def line(self) -> str:
        """Return one line saying what was decided, and from what."""
        total = self.idle_s + self.busy_s
        share = f"{self.idle_s / total:.1%}" if total > 0 else "n/a"
        if self.decided is None:
            return f"pinning undecided after {self.seen} batch(es): not pinned"
        if self.behind:
            return f"the GPU {self.behind} batches behind the loop after {self.seen} measured (compute-bound: pinned)"
        verdict = "compute-bound: pinned" if self.decided else "waits for data: not pinned"
        return f"compute stream idle {share} of {self.window} batches ({verdict})"
