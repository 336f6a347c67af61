"""The garbage collector of a process of ours: fewer passes while torch and MONAI are imported, none over them after.

``import monai`` (which imports torch, ignite and the optional packages installed: MLflow, scipy, scikit-learn)
leaves ~510,000 objects the collector tracks. With CPython's default thresholds (700, 10, 10) the import alone
runs ~1,250 young and 8 full collections, each full one a walk over everything imported so far: on this 2-core VM
1.1-1.3 s of a one-line bundle's 5.2-6.0 s start in a fast hour, 4.6-5.7 s of 15-17 s in a slow one
(`bench/exit_time.py` times the start both ways). While a command starts, almost nothing it allocates is garbage,
so ``collect_less_while_importing`` (the entry point's first call) raises the young threshold (63 young
collections, no full one: 0.4 s and 1.4 s). Once a bundle's config is parsed, before its initialize builds
anything, ``settle_after_imports`` freezes what is there (``gc.freeze``, as a long-lived server or a fork server
does) and puts the thresholds back, so the training loop's full collections no longer walk torch's and MONAI's
objects. The other long-lived loops settle too (inference's cases, ``status --wait``, a pipeline's wait, the
watch); a short command that reaches none of them ends with the raised thresholds, its garbage collected 20,000
allocations at a time.

Only a process whose entry point asked is changed: a caller of ``main()`` in-process (the tests, a notebook)
keeps its collector as it is, and frozen garbage there would never be freed.
"""

from __future__ import annotations

import gc

# the thresholds while a command starts (CPython's are 700, 10, 10): 63 young collections instead of ~1,250 for a
# one-line bundle's start, and no full one
IMPORT_THRESHOLDS = (20_000, 20, 20)

_saved: tuple[int, ...] | None = None


def collect_less_while_importing() -> None:
    """Raise the collector's thresholds for this process's start (its heavy imports); remember the old ones."""
    global _saved
    if _saved is None:
        _saved = gc.get_threshold()
        gc.set_threshold(*IMPORT_THRESHOLDS)


def settle_after_imports() -> bool:
    """Once the imports are done: freeze the heap and put the collector's thresholds back. Only in a process whose
    entry point called ``collect_less_while_importing`` (once); return whether it did anything. A bundle that turned
    the collector off gets its thresholds back, and nothing frozen (it collects, if ever, by its own calls)."""
    global _saved
    if _saved is None:
        return False
    if gc.isenabled():
        gc.freeze()
    gc.set_threshold(*_saved)
    _saved = None
    return True
