"""Skip the garbage collector's last passes when a process of ours ends.

With torch and MONAI imported the heap holds millions of objects, and CPython's shutdown spends
~1.3 s on a 2-core VM collecting them (`python bench/exit_time.py`), after every command and at the
end of every SLURM job. ``gc.freeze()`` at exit moves them out of the collector's sight: the process
is ending, so nothing frozen is ever reused. atexit handlers, thread joins and reference-count
deallocation still run; only objects in reference cycles are left unfinalized, and nothing we write
relies on a finalizer (files are closed, fsynced and renamed explicitly).
"""

from __future__ import annotations

import atexit
import gc

_registered = False


def freeze_at_exit() -> None:
    """Register, once per process, an atexit hook that freezes the heap so shutdown skips collecting it."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(gc.freeze)
