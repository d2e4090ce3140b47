"""BLAS threads limited while host runs are under way, and given back exactly as they were."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import threadpool_limits


class SingleThreadedBlas:
    """BLAS limited to one thread while any host run is under way, and given back exactly as it
    was when the last of them ends. The limit is process-wide, so concurrent runs share one,
    counted under a lock. Every change is made from one long-lived thread of ours:
    threadpoolctl lets a single live thread control OpenBLAS's limit and silently ignores
    the others (the last run to end restoring from its own thread left the whole process at
    one thread). Where another thread took that control first, our limit is ignored too:
    slower, never wrong, and nothing is left behind."""

    def __init__(self):
        self._lock = threading.Lock()
        self._runs = 0
        self._limits = None
        self._controller = None  # the thread that makes the changes, started on first use

    def _in_controller(self, change):
        if self._controller is None:
            self._controller = ThreadPoolExecutor(1, thread_name_prefix="hybridla-blas")
        return self._controller.submit(change).result()

    def enter(self):
        with self._lock:
            if self._runs == 0:
                self._limits = self._in_controller(
                    lambda: threadpool_limits(limits=1, user_api="blas"))
            self._runs += 1

    def leave(self):
        with self._lock:
            self._runs -= 1
            if self._runs == 0:
                self._in_controller(self._limits.restore_original_limits)
                self._limits = None


single_threaded_blas = SingleThreadedBlas()
