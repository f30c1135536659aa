"""Fixtures for the real-program tests; the helpers live in proglib.py."""

import os

import pytest

from proglib import ULSOCK, End, Harness


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    h.close()


@pytest.fixture
def make_end(tmp_path):
    """make_end(name, accelerated, profile=None) -> End with its own log file."""
    if not os.access(ULSOCK, os.X_OK):
        pytest.fail("%s is missing: build first (make build), or set ULSOCK_BUILD" % ULSOCK)

    def make(name, accelerated, profile=None):
        return End(name, accelerated, profile, tmp_path / ("%s.ulsock.log" % name))
    return make


# A suite whose every test skipped (programs not installed) reports 77, which ctest
# shows as skipped rather than passed (SKIP_RETURN_CODE in tests/CMakeLists.txt).
_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.failed:
        _outcomes["failed"] += 1
    elif report.skipped:
        _outcomes["skipped"] += 1
    elif report.passed and report.when == "call":
        _outcomes["passed"] += 1


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and _outcomes["skipped"] and not _outcomes["passed"] \
            and not _outcomes["failed"]:
        session.exitstatus = 77
