#!/usr/bin/env python3
"""Where cuda/getrf_short_panel.cu's time goes: the kernel compiled again with parts taken out
of its source (the fences of the publication, the publication, the factorization), launched
cooperatively or not, on leaves of one block and more; CUDA events around the launch only,
best of --repeat. The answers are wrong without those parts: this times, it does not check.

    python3 perf/probe_short_panel_parts.py --shapes 1024x32 1024x64 --repeat 10
"""
from __future__ import annotations

import argparse
import ctypes
import warnings

import cupy as cp
import numpy as np
import pycuda.driver as drv
from pycuda.compiler import compile as compile_cuda

from hybridla.backend import _driver, cuda as cuda_backend, get_backend

# (name, [(text, replacement)], blocks at most (a part whose absence would leave a wait
# unanswered is only taken out of one-block launches))
VARIANTS = [
    ("as it is", [], 16),
    ("no fences", [("__threadfence();", "")], 16),
    ("no rank-1 updates", [("a[r][e] = fmaf(-l, reinterpret_cast<const float*>(s.update_row)[e], "
                            "a[r][e]);", ";")], 16),
    ("no update (GEMM, trsm)", [("if (j < b) update(a, pub, s, j, m);", ";")], 16),
    ("no publication", [("publish(a, position, pub, s, j * BW, m, flags + j, tag);", ";")], 1),
    ("no factorization, no publication",
     [("factor(a, position, s, j * BW, width, m, ipiv, row_offset);", ";"),
      ("publish(a, position, pub, s, j * BW, m, flags + j, tag);", ";")], 1),
]
FILES = ("getrf_panel.cu", "tslu.cu", "getrf_short_panel.cu")
# block 0's thread 0 reads its SM's clock at these places (the text before which it is read)
CLOCKS = [("start", "    float a[RPT][BW];\n"),
          ("keyed", "            if (lane == 0) s.slot_key[warp] = best, s.slot_position[warp] = best_at;"),
          ("barrier 1", "            key = lane < WARPS ? s.slot_key[lane] : 0u;"),
          ("barrier 2", "            const float pivot = s.pivot, inverse = 1.0f / pivot;"),
          ("group done", "#pragma unroll\n        for (int r = 0; r < RPT; ++r) {\n"
                         "            float done[GROUP];"),
          ("factored", "            publish(a, position, pub, s, j * BW, m, flags + j, tag);"),
          ("published", "            apply_moves(a, pub, s, m);  // this block's rows"),
          ("stored", "}\n\n}  // namespace short_panel")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["1024x32", "1024x64", "1024x512"])
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--clock-only", action="store_true", help="only block 0's clock")
    args = p.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    ops = get_backend("cuda")
    source = "\n".join(cuda_backend._kernel_source(name) for name in FILES)
    shape = cuda_backend._SHORT_PANEL
    floats = shape["max_blocks"] * shape["max_rows"] * shape["columns"]
    ints = shape["max_blocks"] * (1 + 4 * shape["columns"])
    rows_pub = cp.zeros(floats, cp.float32)
    moves = cp.zeros(ints, cp.int32)
    flags = cp.zeros(shape["max_blocks"], cp.uint32)
    tag = 0
    rng = np.random.default_rng(0)
    print("| variant | launch | " + " | ".join(args.shapes) + " |")
    print("|---|---|" + "---:|" * len(args.shapes))
    ops.context.push()
    try:
        for name, edits, most_blocks in [] if args.clock_only else VARIANTS:
            text = source
            for old, new in edits:
                assert old in text, old
                text = text.replace(old, new)
            module = _driver.Module(compile_cuda(text, no_extern_c=True, options=["-O3"]))
            for cooperative in (True, False):
                cells = []
                for spec in args.shapes:
                    m, w = (int(v) for v in spec.split("x"))
                    blocks = -(-w // shape["columns"])
                    if blocks > most_blocks:
                        cells.append("-")
                        continue
                    original = cp.asarray(rng.standard_normal((m, w)), cp.float32, order="F")
                    a = cp.empty_like(original, order="F")
                    ipiv = cp.zeros(w, cp.int32)
                    best = float("inf")
                    for _ in range(args.repeat + 1):
                        a[...] = original
                        tag += 1
                        start, stop = cp.cuda.Event(), cp.cuda.Event()
                        start.record()
                        module.launch("getrf_short_panel_s", (blocks,), (shape["threads"],), 0,
                                      ctypes.c_void_p(a.data.ptr), ctypes.c_longlong(m),
                                      ctypes.c_int(m), ctypes.c_int(w),
                                      ctypes.c_void_p(ipiv.data.ptr), ctypes.c_int(0),
                                      ctypes.c_void_p(rows_pub.data.ptr),
                                      ctypes.c_void_p(moves.data.ptr),
                                      ctypes.c_void_p(flags.data.ptr), ctypes.c_uint(tag),
                                      cooperative=cooperative)
                        stop.record()
                        stop.synchronize()
                        best = min(best, cp.cuda.get_elapsed_time(start, stop))
                    cells.append(f"{best * 1e3:.1f} us")
                print(f"| {name} | {'cooperative' if cooperative else 'plain'} | "
                      + " | ".join(cells) + " |", flush=True)
        clocked(source, args.shapes[0], rows_pub, moves, flags, tag + 1)
    finally:
        drv.Context.pop()


def clocked(source, spec, rows_pub, moves, flags, tag):
    """Block 0's clock at the places CLOCKS names, one launch of the `spec` leaf."""
    text = source.replace("namespace short_panel {",
                          "__device__ long long probe_clock[256];\n__device__ int probe_count;\n"
                          "namespace short_panel {", 1)
    for index, (label, before) in enumerate(CLOCKS):
        assert before in text, label
        read = ("if (threadIdx.x == 0 && blockIdx.x == 0) { int k = atomicAdd(&probe_count, 1); "
                f"if (k < 256) probe_clock[k] = (clock64() << 8) | {index}; }}\n")
        text = text.replace(before, read + before)
    module = _driver.Module(compile_cuda(text, no_extern_c=True, options=["-O3"]))
    m, w = (int(v) for v in spec.split("x"))
    a = cp.asarray(np.random.default_rng(1).standard_normal((m, w)), cp.float32, order="F")
    ipiv = cp.zeros(w, cp.int32)
    for _ in range(2):  # the second launch: code and data where a run finds them
        pointer, size = ctypes.c_void_p(), ctypes.c_size_t()
        _driver._cuda.cuModuleGetGlobal_v2(ctypes.byref(pointer), ctypes.byref(size),
                                           ctypes.c_void_p(module.handle), b"probe_count")
        cp.cuda.runtime.memset(pointer.value, 0, 4)
        tag += 1
        module.launch("getrf_short_panel_s", (-(-w // 32),),
                      (cuda_backend._SHORT_PANEL["threads"],), 0,
                      ctypes.c_void_p(a.data.ptr), ctypes.c_longlong(m), ctypes.c_int(m),
                      ctypes.c_int(w), ctypes.c_void_p(ipiv.data.ptr), ctypes.c_int(0),
                      ctypes.c_void_p(rows_pub.data.ptr), ctypes.c_void_p(moves.data.ptr),
                      ctypes.c_void_p(flags.data.ptr), ctypes.c_uint(tag), cooperative=True)
        cp.cuda.Device().synchronize()
    _driver._cuda.cuModuleGetGlobal_v2(ctypes.byref(pointer), ctypes.byref(size),
                                       ctypes.c_void_p(module.handle), b"probe_clock")
    raw = np.zeros(256, np.int64)
    cp.cuda.runtime.memcpy(raw.ctypes.data, pointer.value, raw.nbytes,
                           cp.cuda.runtime.memcpyDeviceToHost)
    _driver._cuda.cuModuleGetGlobal_v2(ctypes.byref(pointer), ctypes.byref(size),
                                       ctypes.c_void_p(module.handle), b"probe_count")
    count = np.zeros(1, np.int32)
    cp.cuda.runtime.memcpy(count.ctypes.data, pointer.value, 4, cp.cuda.runtime.memcpyDeviceToHost)
    stamps = [(int(v) >> 8, CLOCKS[int(v) & 255][0]) for v in raw[:min(int(count[0]), 256)]]
    print(f"\nblock 0's clock, {spec} (cycles since the previous mark):")
    for (cycle, label), (previous, _) in zip(stamps, [stamps[0]] + stamps[:-1]):
        print(f"  {label:12s} {cycle - previous:8d}")


if __name__ == "__main__":
    main()
