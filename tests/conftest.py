"""Shared test helpers."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require(module: str, install: str) -> ModuleType:
    """Import an optional dependency; skip on a developer's machine without it, but fail under CI
    (CI=true), where .ci/run installs it, so that a missing install step cannot hide tests."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is missing under CI; .ci/run must install it ({install})")
        pytest.skip(f"{module} is not installed ({install})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds (timings, big inputs)")
