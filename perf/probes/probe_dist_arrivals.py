#!/usr/bin/env python3
"""Probe: what copying a distributed device part in during the run (distributed.arrive_parts:
its block columns as the run's first tasks, on a copy lane, checked as they arrive,
lapack/_dist_parts.arriving_part) gives against copying it first (device_part: the chunks
stacked, then checked, then the run), on 2 GPUs at n = 65536, with the chunks laid out
cyclically as the call wants them.

The two ways alternate, `--repeat` times each, on the same input after an untimed call (the
client's configuration says which). Each way's best and every run are printed.

    python3 perf/probes/probe_dist_arrivals.py --routines lu,cho --repeat 3
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
# perf/distributed.py by its path: its name would shadow the `distributed` package
_SPEC = importlib.util.spec_from_file_location("perf_distributed",
                                               os.path.join(_ROOT, "perf", "distributed.py"))
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--routines", default="lu,cho")
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args(argv)
    from distributed import wait

    import hybridla.config
    cluster, client = bench.start_cluster("cuda", None)
    try:
        for routine in opts.routines.split(","):
            nb = bench.workers_nb(client, routine, opts.n, "cuda", True)
            a = bench.placed_cyclically(client, bench.matrix(opts.n, routine, nb, device=True))
            wait(a)
            factors = bench.run_distributed(client, routine, a, "cuda", nb, None)
            runs = {"arriving": [], "first": []}
            for _ in range(opts.repeat):
                for way in runs:
                    factors = None
                    with hybridla.config.set({"distributed.arrive_parts": way == "arriving"}):
                        start = time.perf_counter()
                        factors = bench.run_distributed(client, routine, a, "cuda", nb, None)
                        runs[way].append(time.perf_counter() - start)
            for way, seconds in runs.items():
                print(f"{routine} n {opts.n} nb {nb} part {way}: best {min(seconds):.3f} s "
                      f"(runs {', '.join(f'{s:.3f}' for s in seconds)})", flush=True)
            del factors, a
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
