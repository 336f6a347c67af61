"""Helpers the tracking tests import (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import importlib
import os
import socket

import pytest


def free_port() -> int:
    """Return a TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_mlflow(what: str = "mlflow") -> None:
    """Skip when ``what`` cannot be imported, unless CI=true: there the test extra must provide it."""
    try:
        importlib.import_module(what)
    except ImportError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{what} is missing on CI: install the test extra ({exc})")
        pytest.skip(f"{what} is not installed ({exc})")
