"""A run's progress, counted as work finishes rather than as it is queued.

A CPU task has finished when it returns. A GPU or copy task only enqueues its work on a stream
and returns long before the device has done it: it has finished when the event its lane
recorded after the work has completed. `FinishedWork` takes each task as the engine is done
with it, reports CPU tasks at once, and keeps device tasks until their events complete, which a
watcher thread polls (the event's non-blocking `query()`, cuEventQuery) in each lane's order:
a lane's events complete in the order they were recorded, so only the oldest of each lane is
asked. When the run ends the engine has synchronized the device, and `finish` reports the rest.
"""
from __future__ import annotations

import collections
import contextlib
import threading

# how often the watcher asks the device (seconds): a bar redraws no faster than this anyway
POLL_INTERVAL = 0.05


class FinishedWork:
    """Calls `callback(task)` once per task, when its work has finished; one call at a time,
    from the worker that ran a CPU task or from the watcher thread. `backend`: the run's (its
    `active()` makes the device context current in the watcher, where it has one)."""

    def __init__(self, callback, backend, interval: float | None = None):
        self.callback, self.backend = callback, backend
        self.interval = POLL_INTERVAL if interval is None else interval
        self._pending: dict = collections.defaultdict(collections.deque)  # lane -> (task, event)
        self._lock = threading.Lock()     # the pending queues
        self._report = threading.Lock()   # one callback at a time (a bar is not thread-safe)
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def done(self, task, event) -> None:
        """The engine has run `task`: finished now when `event` is None (CPU work, or a backend
        without a device), else once `event` has completed."""
        if event is None:
            self._call(task)
            return
        with self._lock:
            self._pending[task.lane].append((task, event))
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, daemon=True,
                                                 name="hybridla-progress")
                self._watcher.start()

    def poll(self) -> int:
        """Report the device tasks whose events have completed; returns how many."""
        reported = 0
        with self._lock:
            lanes = list(self._pending.values())
        for queue in lanes:
            while True:
                with self._lock:
                    if not queue or not queue[0][1].query():
                        break
                    task, _ = queue.popleft()
                self._call(task)
                reported += 1
        return reported

    def finish(self) -> None:
        """The run is over and the device synchronized: every pending task has finished."""
        self.close()
        with self._lock:
            rest = [task for queue in self._pending.values() for task, _ in queue]
            self._pending.clear()
        for task in rest:
            self._call(task)

    def close(self) -> None:
        """Stop the watcher (after a failure, the pending tasks are never reported)."""
        self._stop.set()
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join()

    def _call(self, task) -> None:
        with self._report:
            self.callback(task)

    def _watch(self) -> None:
        active = getattr(self.backend, "active", None)
        with active() if active is not None else contextlib.nullcontext():
            while not self._stop.wait(self.interval):
                self.poll()
