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


# --- slow tests ---------------------------------------------------------------------------------
# The README's test command (`python -m pytest`) leaves out tests marked `slow` (pyproject.toml:
# addopts = -m "not slow"), so that it stays under 2 minutes on a 2-core machine; `.ci/run` runs
# them afterwards with `python -m pytest -m slow`. A test is slow when it measures this machine:
# a real `calibrate` or `validate` run, torch's kernels or collectives, or anything else that
# takes seconds. Mark such a test with `@pytest.mark.slow`; the ones below are marked here, by
# name, because their modules are shared with other work in progress.
MEASURING_TESTS = frozenset(
    {
        "test_calibrate_cli_quick",  # a real (quick) calibration
        "test_collectives_with_gloo",  # two gloo processes measuring collectives
        "test_collectives_under_torchrun",  # the same under torchrun
        "test_torch_job_runner_on_cpu_device",  # imports torch and times its kernels
    }
)
# Tests that take a real calibration of this machine as a fixture (tests/test_validate.py).
MEASURING_FIXTURES = frozenset({"host"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that measure this machine `slow` (see above)."""
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        fixtures = set(getattr(item, "fixturenames", ()))
        if name in MEASURING_TESTS or fixtures & MEASURING_FIXTURES:
            item.add_marker(pytest.mark.slow)
