"""MONAI's `_target_` lookup while another thread imports modules (the MLflow sender, a prefetch worker)."""

from __future__ import annotations

import sys
import threading
import types

from hpc_runner.config.monai_bridge import _guard_component_locator


def test_component_lookup_survives_modules_added_by_another_thread() -> None:
    _guard_component_locator()
    from monai.bundle.config_item import ComponentLocator

    stop = threading.Event()
    changes = [0]
    module = types.ModuleType("hpcr_fake_module")

    def importer() -> None:  # what a thread's imports do to sys.modules, as fast as it can (size kept bounded)
        while not stop.is_set():
            sys.modules["hpcr_fake_module"] = module
            del sys.modules["hpcr_fake_module"]
            changes[0] += 1

    thread = threading.Thread(target=importer, daemon=True)
    thread.start()
    try:
        for _ in range(300):  # unguarded, MONAI's comprehension raised "dictionary changed size" here
            names = ComponentLocator()._find_module_names()
            assert "monai.bundle" in names
    finally:
        stop.set()
        thread.join()
    assert changes[0] > 1000  # the other thread really ran during the lookups
