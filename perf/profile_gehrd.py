#!/usr/bin/env python3
"""cProfile of one hybridla.gehrd on a CuPy array (GPU interface): where the host's time goes in
the panel loop (a tuning aid for perf/gehrd.py's numbers).

    python3 perf/profile_gehrd.py --n 4096 [--nb 32] [--top 25]
"""
import argparse
import cProfile
import pstats

import cupy as cp

import hybridla


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--nb", type=int, default=None)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    a = cp.asfortranarray(cp.random.default_rng(0).standard_normal((args.n, args.n)))
    hybridla.gehrd(cp.asfortranarray(a[:256, :256]), nb=args.nb)  # warm-up: kernels, handles
    profile = cProfile.Profile()
    profile.enable()
    hybridla.gehrd(a, overwrite_a=True, nb=args.nb)
    cp.cuda.Device().synchronize()
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
