"""Lanes, runs and synchronization on the host: a task runs to completion in its worker thread,
so the Dask dependencies alone order the work, and a lane stands where a CUDA stream stands with
nothing to wait for and nothing to record."""
from __future__ import annotations

from ..blas_threads import single_threaded_blas


class HostLane:
    """Stands where a CUDA stream stands on the cuda backend: nothing to wait for, nothing to
    record."""

    def __init__(self, name: str):
        self.name = name

    def wait_for(self, events):
        pass

    def record(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def lane(lanes: dict, name: str) -> HostLane:
    """The lane `name` of a backend's `lanes`, made on first use."""
    return lanes.setdefault(name, HostLane(name))


def host_wait(events):
    pass


def begin_run(workers: int, settings=None):
    """Task parallelism instead of BLAS threading: each worker's BLAS runs one thread
    (several multithreaded BLAS calls at once only fight over the cores: perf/RESULTS.md,
    "Host backend on the CPU machine (2 cores, no GPU)" and "Measurements formerly in
    docstrings"), and the trailing update is cut into one task per worker (`update_tasks`).
    The host has no device settings."""
    single_threaded_blas.enter()


def end_run():
    single_threaded_blas.leave()


def update_tasks(workers: int) -> int:
    return workers


def synchronize():
    pass


def event_times(start_event, end_event, origin):
    return None


def replay(lane, recordings: dict, key, record, launch=True):
    """Run record(), work on `lane` only. A device backend records it once per `key` (into
    `recordings`, which the caller keeps while it may replay) and replays the recording
    after that (launch=False: only records it); here it simply runs, when launched."""
    if launch:
        record()
