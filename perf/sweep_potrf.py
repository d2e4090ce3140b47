#!/usr/bin/env python3
"""Tuning sweep for potrf through the GPU interface: hybridla variants against cuSOLVER's dpotrf
in one process, one row per variant (medians; the cuSOLVER reference is re-timed after every
variant, and each row's ratio is against the mean of the references around it, since the
device's clock drifts over a long sweep).

    python3 perf/sweep_potrf.py --n 32768 --nb 1024 --tail 12288 16384 --leaf 128 256 \
        --solve-block 128 256 [--repeat 5]

--leaf sets the cuda backend's _DIAGONAL_LEAF (the diagonal blocks' halving) and --solve-block sets
update/chol.SOLVE_BLOCK (the off-diagonal solve's column blocks) for the variant's calls.
"""
import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import hybridla  # noqa: E402
import hybridla.update.chol as chol_update  # noqa: E402
from hybridla.bench import baselines, harness, report  # noqa: E402  (cuSOLVER, clocks, tables)
from hybridla.bench.harness import median_time  # noqa: E402
from hybridla.bench.matrices import spd_matrix  # noqa: E402

from hybridla.backend.cuda import chol as leaf_owner  # noqa: E402 - owns _DIAGONAL_LEAF


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, nargs="+", default=[1024])
    p.add_argument("--tail", type=int, nargs="+", default=[16384])
    p.add_argument("--leaf", type=int, nargs="+", default=[leaf_owner._DIAGONAL_LEAF])
    p.add_argument("--solve-block", type=int, nargs="+", default=[chol_update.SOLVE_BLOCK])
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    cp = harness.cupy()
    original = cp.asarray(spd_matrix(a.n, "float64", 0), order="F")

    def copy():
        return original.copy(order="F")

    def cusolver(x):
        baselines.potrf(x)

    def variant(nb, tail):
        def call(x):
            with hybridla.config.set({"cho.tail": tail}):
                hybridla.cho_factor(x, lower=True, overwrite_a=True, nb=nb, panel="gpu")
        return call

    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"potrf n = {a.n}, GPU interface, {report.device_name()}, {now}, median of {a.repeat}")
    print("| nb | tail | leaf | solve block | hybridla (s) | cuSOLVER (s) | vs cuSOLVER |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    before = median_time(cusolver, copy, a.repeat)
    for nb, tail, leaf, block in itertools.product(a.nb, a.tail, a.leaf, a.solve_block):
        leaf_owner._DIAGONAL_LEAF, chol_update.SOLVE_BLOCK = leaf, block
        ours = median_time(variant(nb, tail), copy, a.repeat)
        after = median_time(cusolver, copy, a.repeat)
        reference = (before + after) / 2
        print(f"| {nb} | {tail} | {leaf} | {block} | {ours:.4f} | {reference:.4f} | "
              f"{reference / ours:.3f}x |", flush=True)
        before = after


if __name__ == "__main__":
    main()
