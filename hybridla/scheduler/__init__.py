"""Tasks, dependencies from read/write sets, execution on Dask, traces.

The algorithms record tasks into a `TaskGraph`; `run` executes it on a backend through Dask's
threaded scheduler, ordering device work with CUDA events, and leaves a `Trace`.
"""
from .graph import Region, Task, TaskGraph
from .engine import run
from .trace import Trace

__all__ = ["Region", "Task", "TaskGraph", "run", "Trace"]
