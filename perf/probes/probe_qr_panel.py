"""Probe: how long a tall QR panel takes on the GPU, alone and beside the trailing update's
GEMMs, as cuSOLVER's geqrf on the whole panel against a recursive panel (geqrf on leaves of
`leaf` columns; between halves the left half's block reflector applied to the right half by
larft and larfb, BLAS-3). The question: is the distributed QR's panel (17 ms alone, 42-85 ms
beside the update at n = 65536 on 2 GPUs, 512 columns) bound by cuSOLVER's cost per column,
and would a recursive panel shorten it?

    python3 perf/probes/probe_qr_panel.py --rows 65536,24576 --leaves cusolver,0,256,128

leaf "cusolver" is cuSOLVER's geqrf on the whole panel; 0 is the backend's panel (on an sm_90
device: recursive halves on thread-block cluster leaves, cuda/geqrf_leaf_cluster.cu, of
device.qr_panel_leaf's default width); a number is this probe's recursion down to leaves of
that width, each leaf the backend's panel; "wN" (w32) is the backend's panel with cluster
leaves of at most N columns; "leaves" the default's cluster leaves alone, one launch per leaf down
the diagonal without the updates between them (the leaves' share of the backend's panel,
not a factorization).

Each time is the median of --repeat runs, by CUDA events
on the panel lane (and the host's time to enqueue it); "beside" runs the panel while a loop of DGEMMs (16384 x 16384 x 512) runs
on the update lane. The check: R of each variant against geqrf's (relative difference).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np

from hybridla.backend import get_backend
from hybridla.backend.ops import DeviceSettings
from hybridla.update.qr import apply_block_reflector


def recursive_panel(ops, lane, A, r0, r1, c0, c1, leaf, level=0):
    """[A(r0:r1, c0:c1)] = Q R in place (LAPACK's storage, tau at the columns' places)."""
    n = c1 - c0
    if leaf == 0 or n <= leaf:
        ops.householder_panel(lane, A, 0, "QR", (r0, r1), (c0, c1), (c0, c1))
        return
    h = n // 2
    recursive_panel(ops, lane, A, r0, r1, c0, c0 + h, leaf, level + 1)
    V = A.workspace(f"probe V{level}", r1 - r0, h)
    T = A.workspace(f"probe T{level}", h, h)
    ops.explicit_reflectors(lane, A.block(r0, r1, c0, c0 + h), V, "QR")
    ops.triangular_factor(lane, V, A.tau_block(c0, c0 + h), T, "forward",
                          work=A.scratch(lane, h, h))
    apply_block_reflector(ops, lane, A, "L", "C", V, T, A.block(r0, r1, c0 + h, c1), "forward")
    recursive_panel(ops, lane, A, r0 + h, r1, c0 + h, c1, leaf, level + 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="65536,24576")
    parser.add_argument("--cols", type=int, default=512)
    parser.add_argument("--leaves", default="cusolver,0")
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    ops = get_backend("cuda")
    nb = opts.cols
    rng = np.random.default_rng(0)
    big = 16384
    G = ops.matrix(big, big, np.float64, nb)
    update = ops.lane("gpu:update")
    for m in [int(r) for r in opts.rows.split(",")]:
        x = rng.standard_normal((m, nb))
        A = ops.matrix(m, nb, np.float64, nb)
        lane = ops.lane("gpu:panel")
        reference = None
        for spec in opts.leaves.split(","):
            # cuSOLVER: no lane launches a cluster as large as asked
            width = 0 if spec == "cusolver" else int(spec[1:]) if spec.startswith("w") \
                else DeviceSettings().qr_panel_leaf
            A.settings = dataclasses.replace(A.settings, qr_panel_leaf=width)
            leaf = int(spec) if spec.isdigit() else -1 if spec == "leaves" else 0
            for beside in (False, True):
                times, calls = [], []
                for _ in range(opts.repeat):
                    ops.from_host(None, x, A.block(0, m, 0, nb))  # its own wait
                    ops.synchronize()
                    if beside:
                        with update:
                            for _ in range(24):  # about 5 ms each, longer than any panel
                                ops.gemm(update, -1, G.block(0, big, 0, nb),
                                         G.block(0, nb, 0, big), 1, G.block(0, big, 0, big))
                    with lane:
                        called = time.perf_counter()
                        start = lane.record()
                        if leaf < 0:
                            step = width
                            for c0 in range(0, nb, step):
                                ops.householder_panel(lane, A, 0, "QR", (c0, m),
                                                      (c0, c0 + step), (c0, c0 + step))
                        else:
                            recursive_panel(ops, lane, A, 0, m, 0, nb, leaf)
                        end = lane.record()
                        calls.append((time.perf_counter() - called) * 1e3)
                    ops.synchronize()
                    times.append(end.time_since(start))
                R = np.triu(ops.to_host(None, A.block(0, nb, 0, nb)))
                if reference is None:
                    reference = R
                diff = np.abs(np.abs(R) - np.abs(reference)).max() / np.abs(reference).max()
                print(f"m {m} cols {nb} leaf {spec} {'beside' if beside else 'alone'}:"
                      f" median {statistics.median(times):.2f} ms (runs "
                      f"{', '.join(f'{t:.2f}' for t in times)}); the host's calls "
                      f"{statistics.median(calls):.2f} ms; R against the first's {diff:.1e}",
                      flush=True)
        A.close()
    G.close()


if __name__ == "__main__":
    main()
