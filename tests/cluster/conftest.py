"""The per-process driver in-process (the cluster's executor threads and pool), small."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentruns.cluster.driver import Driver, DriverConfig


@pytest.fixture
def driver() -> Iterator[Driver]:
    config = DriverConfig(
        threads=2,
        pool_max=2,
        pool_timeout=5,
        lease_seconds=30,
        sweep_seconds=3600,
        shutdown_seconds=5,
    )
    started = Driver(config)
    try:
        yield started
    finally:
        started.shutdown(timeout=5)
