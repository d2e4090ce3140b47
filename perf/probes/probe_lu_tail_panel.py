#!/usr/bin/env python3
"""Probe (issue 32): how long a float64 LU panel of 512 columns takes on the GPU at the heights of
an LU's last steps, as the backend's whole panel (cuSOLVER getrf) against recursive halving down
to leaves of `leaf` columns (panel/lu.getrf_panel_recursive: each leaf our one-launch fused
kernel, cuda/getrf_panel.cu, up to 256 wide). The question: at n = 65536 on 2 GPUs the last 30-40
steps of the distributed LU are a chain of panels (the owner's panel, the broadcast, the next
owner's look-ahead column, its panel), 155 ms of the 2.70 s engine span in steps whose time is
within 1.5 ms of their panel's (cuSOLVER's 512-wide panel: 4.5 ms at 9216 rows, 2.0 ms at 2048;
perf/RESULTS.md, issue 32, stop 54): would a recursive panel shorten that chain?

    python3 perf/probes/probe_lu_tail_panel.py
    python3 perf/probes/probe_lu_tail_panel.py --rows 4096,16384 --leaves 0,256,128 --repeat 5

Each time is the median of --repeat runs, by CUDA events on the panel lane; "beside" runs the
panel while DGEMMs (4096 x 4096 x 512, a tail step's update) run on the update lane. The check:
the pivots against LAPACK's getrf of the same panel (equal), and the factors' largest
difference relative to LAPACK's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import scipy.linalg.lapack as lapack  # noqa: E402

from hybridla.backend import get_backend  # noqa: E402
from hybridla.panel.lu import getrf_panel_recursive  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="2048,4096,8192,12288,16384,24576,32768,65536")
    parser.add_argument("--cols", type=int, default=512)
    parser.add_argument("--leaves", default="0,256,128,64")
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    ops = get_backend("cuda")
    nb = opts.cols
    rng = np.random.default_rng(0)
    busy = 4096
    G = ops.matrix(busy, busy, np.float64, nb)
    update, lane = ops.lane("gpu:update"), ops.lane("gpu:panel")
    for m in [int(r) for r in opts.rows.split(",")]:
        x = np.asfortranarray(rng.standard_normal((m, nb)))
        lu_ref, piv_ref, _ = lapack.dgetrf(x)
        A = ops.matrix(m, nb, np.float64, nb)
        for leaf in [int(s) for s in opts.leaves.split(",")]:
            for beside in (False, True):
                times = []
                for _ in range(opts.repeat):
                    ops.from_host(None, x, A.block(0, m, 0, nb))
                    ops.synchronize()
                    if beside:
                        with update:
                            for _ in range(12):
                                ops.gemm(update, -1, G.block(0, busy, 0, nb),
                                         G.block(0, nb, 0, busy), 1, G.block(0, busy, 0, busy))
                    with lane:
                        start = lane.record()
                        if leaf and nb > leaf:
                            getrf_panel_recursive(ops, lane, A, 0, 0, nb, leaf)
                        else:
                            ops.getrf_panel(lane, A, 0, 0, 0, nb)
                        end = lane.record()
                    ops.synchronize()
                    times.append(end.time_since(start))
                lu = ops.to_host(None, A.block(0, m, 0, nb))
                piv, _ = A.finish()  # the panel's pivots, 0-based rows
                same = bool(np.array_equal(piv[:nb], piv_ref))
                diff = np.abs(lu - lu_ref).max() / np.abs(lu_ref).max()
                print(f"m {m} cols {nb} leaf {leaf or 'whole'} {'beside' if beside else 'alone'}:"
                      f" median {statistics.median(times):.3f} ms (runs "
                      f"{', '.join(f'{t:.3f}' for t in times)}); pivots "
                      f"{'as LAPACK' if same else 'DIFFER'}; factors {diff:.1e}", flush=True)
        A.close()
    G.close()


if __name__ == "__main__":
    main()
