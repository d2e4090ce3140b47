"""LU error paths: validation messages, engine arguments, configuration, memory budget, failures
inside the engine. Validation happens once at the user layer; its messages name the argument.
"""
from __future__ import annotations

import json
import math
import re
import threading
import warnings

import numpy as np
import pytest
import scipy.linalg

import hybridla
import hybridla.backend
import hybridla.config

from _lapack_checks import getrf_ratio

THRESH = 30.0


# What refers to an argument in hybridla's messages ("expected a 2-D array for a; got shape
# (7,)", "b must have 6 rows to match lu (shape (6, 6))", "got nb=0", "a and b must both be ..."),
# as opposed to the same letters used as a word of the sentence (the article in "expected a
# 2-D array"). Case-sensitive: an argument is spelled as in the signature.
_VERBS = r"(?:must|has|have|is|are|needs|need|should|cannot|does|do|was|were)"
_CLAUSE_START = r"(?:^|(?<=[;:(])\s*|(?<=[.!?])\s+)"
_PHRASE_END = r"(?=\s*(?:$|[;:,.!?)]|\((?:shape|dtype|got|of|with)\b))"
_OBJECT_OF = r"(?:for|of|to|match|matches|matching|in|from|with|argument|parameter|array|matrix)"


def names_argument(message: str, name: str) -> bool:
    """True when ``message`` refers to the argument ``name`` as an argument:

    - quoted: `a`, 'a', "a";
    - assigned: "nb=0", "backend='tpu'";
    - the subject of a requirement at the start of a clause: "a must ...", "b has ...", "a and
      b must ...", "...; lu is ...";
    - the object that ends a phrase: "... for a;", "... to match lu (shape (6, 6))", "... of a.".

    Never the same letters as a word in the middle of a sentence ("expected a 2-D array", "a
    singular matrix", "this is a must"): for name "a" the article would otherwise always match."""
    n = re.escape(name)
    other = r"[A-Za-z_][A-Za-z0-9_]*"
    patterns = (
        rf"[`'\"]{n}[`'\"]",
        rf"(?<![A-Za-z0-9_.]){n}=(?!=)",
        rf"{_CLAUSE_START}{n}(?:,? (?:and|or) {other})? {_VERBS}\b",
        rf"{_CLAUSE_START}{other},? (?:and|or) {n} {_VERBS}\b",
        rf"(?<![A-Za-z0-9_]){_OBJECT_OF} {n}{_PHRASE_END}",
    )
    return any(re.search(p, message) for p in patterns)


def shows_shape(message: str, shape) -> bool:
    """True when ``message`` shows ``shape`` as Python prints a tuple: "(7,)", "(3, 5, 11)"."""
    return str(tuple(int(d) for d in shape)) in message


@pytest.mark.parametrize("message, name, expected", [
    ("expected a 2-D array for a; got shape (7,)", "a", True),
    ("expected a square 2-D matrix for a; got shape (6, 4)", "a", True),
    ("a must hold numbers; got dtype object for a", "a", True),
    ("a must not contain infs or NaNs (check_finite=True)", "a", True),
    ("b must have 6 rows to match lu (shape (6, 6)); got shape (7,)", "b", True),
    ("b must have 6 rows to match lu (shape (6, 6)); got shape (7,)", "lu", True),
    ("lu and b must both be host arrays or both device arrays", "lu", True),
    ("lu and b must both be host arrays or both device arrays", "b", True),
    ("nb must be an integer >= 1; got nb=0", "nb", True),
    ("backend must be one of 'auto', 'host', 'cuda'; got backend='tpu'", "backend", True),
    ("trans must be 0, 1 or 2 (or 'N', 'T', 'C'); got trans=3", "trans", True),
    ("the argument `a` is not a matrix", "a", True),
    # the article, or the name of another argument: not a reference to a
    ("expected a 2-D array; got shape (7,)", "a", False),
    ("expected a square matrix; got shape (6, 4)", "a", False),
    ("a 2-D array is needed", "a", False),
    ("Matrix is singular: a pivot is exactly zero.", "a", False),
    ("the result is a must-have", "a", False),
    ("b must have 6 rows to match lu (shape (6, 6)); got shape (7,)", "a", False),
    ("lu and b must both be host arrays or both device arrays", "a", False),
    ("A must be square", "a", False),
    ("nb must be an integer >= 1; got nb=0", "b", False),
    ("must not contain infs or NaNs (check_finite=True)", "a", False),
])
def test_names_argument_is_strict(message, name, expected):
    """The matcher the error tests use accepts the forms hybridla's messages refer to an
    argument with, and not the same letters as an ordinary word (the article "a")."""
    assert names_argument(message, name) is expected


def assert_names(excinfo, name):
    message = str(excinfo.value)
    assert names_argument(message, name), f"message {message!r} does not name {name!r}"


def exception_texts(exc):
    """str() and repr() of ``exc`` and of everything chained to it (cause, context, groups)."""
    seen, stack, texts = set(), [exc], []
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        texts += [str(e), repr(e)]
        stack += [e.__cause__, e.__context__]
        stack += list(getattr(e, "exceptions", ()) or ())  # ExceptionGroup
    return texts


def panel_steps(trace_path) -> set:
    """The steps of the events named like "panel" in a Chrome trace file."""
    events = json.loads(open(trace_path, encoding="utf-8").read())["traceEvents"]
    return {e.get("args", {}).get("step") for e in events
            if e.get("ph") == "X" and "panel" in e["name"].lower()}


@pytest.fixture
def square(rng):
    return np.asfortranarray(rng.standard_normal((40, 40)))


# -- check_finite -----------------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_lu_factor_rejects_non_finite(backend, square, bad):
    square[3, 5] = bad
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.lu_factor(square, backend=backend)


@pytest.mark.parametrize("overwrite_a", [False, True], ids=["new-result", "in-place"])
@pytest.mark.parametrize("routine", ["lu", "cho", "qr"])
def test_non_finite_found_beside_the_run_or_before_it_loses_nothing(backend, square, routine,
                                                                      overwrite_a):
    """A new result array is checked beside the factorization (the error comes once the run
    ends), one factored in place before anything is written: either way the input is as it
    was, the error names a, and the next call works."""
    a = np.asfortranarray(square @ square.T + 40 * np.eye(40)) if routine == "cho" else square
    call = {"lu": lambda x, **kw: hybridla.lu_factor(x, backend=backend, **kw),
            "cho": lambda x, **kw: hybridla.cho_factor(x, backend=backend, **kw),
            "qr": lambda x, **kw: hybridla.qr(x, mode="raw", backend=backend, **kw)}[routine]
    a[39, 39] = np.nan
    saved = a.copy(order="F")
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        call(a, overwrite_a=overwrite_a)
    np.testing.assert_array_equal(a, saved)
    a[39, 39] = 41.0
    call(a, overwrite_a=overwrite_a)


@pytest.mark.parametrize("where", ["lu", "b"])
def test_lu_solve_rejects_non_finite(backend, square, where):
    lu, piv = hybridla.lu_factor(square, backend=backend)
    b = np.ones(40)
    if where == "lu":
        lu = lu.copy()
        lu[0, 0] = np.nan
    else:
        b[7] = np.inf
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.lu_solve((lu, piv), b, backend=backend)


@pytest.mark.parametrize("where", ["a", "b"])
def test_solve_rejects_non_finite(backend, square, where):
    b = np.ones(40)
    if where == "a":
        square[10, 10] = np.nan
    else:
        b[0] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        hybridla.solve(square, b, backend=backend)


@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_finiteness_check_by_threads_finds_each_entry(monkeypatch, dtype, order):
    # the check of large arrays (summed in pieces by a thread per core) with the size threshold
    # lowered, a bad entry in the first, a middle and the last piece, in the imaginary part too
    from hybridla import _common as linalg
    monkeypatch.setattr(linalg, "PARALLEL_CHECK_BYTES", 0)
    monkeypatch.setattr(linalg.os, "cpu_count", lambda: 3)
    a = np.ones((30, 20), dtype=dtype, order=order)
    assert linalg._all_finite(a)
    bad = [np.nan, np.inf, -np.inf] + ([complex(0, np.nan)] if a.dtype.kind == "c" else [])
    for value in bad:
        for where in [(0, 0), (15, 10), (29, 19)]:
            b = a.copy(order=order)
            b[where] = value
            assert not linalg._all_finite(b), (value, where)


def test_finiteness_check_is_not_fooled_by_a_sum_that_overflows(backend):
    # every entry finite, their sum infinite: the entrywise test decides
    a = np.eye(8) * (np.finfo(np.float64).max / 2)
    hybridla.lu_factor(a, backend=backend)
    a[2, 3] = np.inf
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        hybridla.lu_factor(a, backend=backend)


def test_check_finite_false_skips_validation(backend, square):
    square[3, 5] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            hybridla.lu_factor(square, check_finite=False, backend=backend, nb=16)
        except ValueError as exc:
            # A LinAlgError (a ValueError subclass) would be a result, not validation.
            if not isinstance(exc, scipy.linalg.LinAlgError):
                pytest.fail(f"check_finite=False still validated finiteness: {exc!r}")


# -- shapes -----------------------------------------------------------------------------

# (a 3-D array is a stack of matrices, as scipy >= 1.15 takes it: tests/test_stacks.py)
@pytest.mark.parametrize("shape", [(7,), ()], ids=["1d", "0d"])
def test_lu_factor_rejects_non_2d(backend, shape):
    a = np.ones(shape)
    with pytest.raises(ValueError) as excinfo:
        hybridla.lu_factor(a, backend=backend)
    assert_names(excinfo, "a")
    message = str(excinfo.value)
    assert shows_shape(message, shape), f"shape {shape} not shown in {message!r}"


@pytest.mark.parametrize("b_shape", [(7,), (7, 2), (5, 3)], ids=["1d", "2d", "2d_short"])
def test_lu_solve_rejects_mismatched_b(backend, rng, b_shape):
    lu_piv = hybridla.lu_factor(rng.standard_normal((6, 6)), backend=backend)
    with pytest.raises(ValueError) as excinfo:
        hybridla.lu_solve(lu_piv, np.ones(b_shape), backend=backend)
    assert_names(excinfo, "b")


@pytest.mark.parametrize("b_shape", [(7,), (7, 2)], ids=["1d", "2d"])
def test_solve_rejects_mismatched_b(backend, rng, b_shape):
    with pytest.raises(ValueError) as excinfo:
        hybridla.solve(rng.standard_normal((6, 6)), np.ones(b_shape), backend=backend)
    assert_names(excinfo, "b")


def test_lu_solve_rejects_non_square_lu(backend, rng):
    lu, piv = hybridla.lu_factor(rng.standard_normal((6, 4)), backend=backend)
    assert lu.shape == (6, 4) and piv.shape == (4,)
    with pytest.raises(ValueError):
        hybridla.lu_solve((lu, piv), np.ones(6), backend=backend)


def test_solve_rejects_non_square_a(backend, rng):
    with pytest.raises(ValueError) as excinfo:
        hybridla.solve(rng.standard_normal((6, 4)), np.ones(6), backend=backend)
    assert_names(excinfo, "a")


# -- dtypes -----------------------------------------------------------------------------

@pytest.mark.parametrize("a", [
    np.array([[1.0, 2.0], [3.0, 4.0]], dtype=object),
    np.array([["x", "y"], ["z", "w"]]),
], ids=["object", "str"])
def test_lu_factor_rejects_non_numeric_dtypes(backend, a):
    with pytest.raises((TypeError, ValueError)) as excinfo:
        hybridla.lu_factor(a, backend=backend)
    message = str(excinfo.value)
    assert names_argument(message, "a") or "dtype" in message, \
        f"message {message!r} names neither the argument a nor the dtype"


# -- engine arguments -------------------------------------------------------------------

BAD_ENGINE_ARGS = [
    ({"nb": 0}, "nb"),
    ({"nb": -3}, "nb"),
    ({"nb": "big"}, "nb"),
    ({"lookahead": -1}, "lookahead"),
    ({"panel": "fpga"}, "panel"),
]


@pytest.mark.parametrize("func", ["lu_factor", "solve"])
@pytest.mark.parametrize("kwargs, name", BAD_ENGINE_ARGS,
                         ids=[f"{k}={v!r}" for (kw, _) in BAD_ENGINE_ARGS for k, v in kw.items()])
def test_bad_engine_argument_named_in_error(backend, square, func, kwargs, name):
    saved = square.copy()
    with pytest.raises(ValueError) as excinfo:
        if func == "lu_factor":
            hybridla.lu_factor(square, backend=backend, **kwargs)
        else:
            hybridla.solve(square, np.ones(40), backend=backend, **kwargs)
    assert_names(excinfo, name)
    assert square.tobytes() == saved.tobytes()


@pytest.mark.parametrize("func", ["lu_factor", "lu_solve", "solve"])
def test_unknown_backend_named_in_error(square, func):
    with pytest.raises(ValueError) as excinfo:
        if func == "lu_factor":
            hybridla.lu_factor(square, backend="tpu")
        elif func == "lu_solve":
            lu_piv = scipy.linalg.lu_factor(square)
            hybridla.lu_solve(lu_piv, np.ones(40), backend="tpu")
        else:
            hybridla.solve(square, np.ones(40), backend="tpu")
    assert_names(excinfo, "backend")


@pytest.mark.parametrize("trans", [3, -1])
def test_lu_solve_bad_trans_named_in_error(backend, square, trans):
    lu_piv = hybridla.lu_factor(square, backend=backend)
    with pytest.raises(ValueError) as excinfo:
        hybridla.lu_solve(lu_piv, np.ones(40), trans=trans, backend=backend)
    assert_names(excinfo, "trans")


# -- configuration ----------------------------------------------------------------------

def test_config_set_is_a_context_manager_for_lu_nb():
    default = hybridla.config.get("lu.nb")
    assert default != 16
    with hybridla.config.set({"lu.nb": 16}):
        assert hybridla.config.get("lu.nb") == 16
    assert hybridla.config.get("lu.nb") == default


def test_config_lu_nb_is_the_block_size_used(backend, rng, tmp_path):
    n = 100
    a = np.asfortranarray(rng.standard_normal((n, n)))
    with hybridla.config.set({"lu.nb": 16}):
        lu, piv = hybridla.lu_factor(a, backend=backend, trace=tmp_path / "cfg.json")
        assert getrf_ratio(a, lu, piv) < THRESH
        # A call keyword wins over the configuration.
        hybridla.lu_factor(a, backend=backend, nb=50, trace=tmp_path / "kw.json")
    assert len(panel_steps(tmp_path / "cfg.json")) == math.ceil(n / 16)
    assert len(panel_steps(tmp_path / "kw.json")) == math.ceil(n / 50)


def test_config_environment_variable_lu_nb(backend, monkeypatch, rng, tmp_path):
    default = hybridla.config.get("lu.nb")
    monkeypatch.setenv("HYBRIDLA_LU__NB", "24")
    try:
        hybridla.config.refresh()
        assert hybridla.config.get("lu.nb") == 24
        a = np.asfortranarray(rng.standard_normal((100, 100)))
        lu, piv = hybridla.lu_factor(a, backend=backend, trace=tmp_path / "env.json")
        assert getrf_ratio(a, lu, piv) < THRESH
        assert len(panel_steps(tmp_path / "env.json")) == math.ceil(100 / 24)
    finally:
        monkeypatch.undo()
        hybridla.config.refresh()
    assert hybridla.config.get("lu.nb") == default


# -- device memory budget ---------------------------------------------------------------

@pytest.mark.cuda
def test_memory_budget_exceeded_raises_before_any_work(cuda_backend, rng):
    a = np.asfortranarray(rng.standard_normal((1000, 1000)))
    saved = a.copy(order="F")
    with hybridla.config.set({"device.memory_budget": 1_000_000}):
        # overwrite_a=True: the input stays untouched only if no work started at all.
        with pytest.raises(MemoryError) as excinfo:
            hybridla.lu_factor(a, overwrite_a=True, backend=cuda_backend)
    message = str(excinfo.value)
    assert any(s in message for s in ("8000000", "8,000,000", "8_000_000",
                                      "1000 x 1000", "1000x1000", "(1000, 1000)")), message
    assert any(s in message for s in ("1000000", "1,000,000", "1_000_000")), message
    assert a.tobytes() == saved.tobytes(), "work started before the budget check"
    assert hybridla.backend.get_backend(cuda_backend).allocated_bytes() == 0


@pytest.mark.cuda
def test_a_call_past_the_pools_limit_gives_back_its_large_blocks_first(cuda_backend, rng):
    """A call whose cached memory passes device.pool_max_bytes gives back its large blocks
    (the matrix) and keeps the small ones (its windows' pivots, infos, moves) for the next
    call, as long as they fit the limit: the next call of the same shape takes them."""
    from hybridla.backend.cuda.memory import SMALL_BLOCK_BYTES
    backend = hybridla.backend.get_backend(cuda_backend)
    backend.free_cached()
    n, keep = 4096, 32 << 20
    assert n * n * 8 > max(SMALL_BLOCK_BYTES, keep)  # the matrix: a large block, over the limit
    a = np.asfortranarray(rng.standard_normal((n, n)))
    with hybridla.config.set({"device.pool_max_bytes": keep}):
        hybridla.lu_factor(a, backend=cuda_backend, nb=128)
        kept = backend.cached_bytes()
        assert 0 < kept <= keep
        lu, piv = hybridla.lu_factor(a, backend=cuda_backend, nb=128)
        assert backend.cached_bytes() == kept
    assert backend.allocated_bytes() == 0
    assert getrf_ratio(a, lu, piv) < THRESH
    backend.free_cached()
    assert backend.cached_bytes() == 0


@pytest.mark.cuda
@pytest.mark.parametrize("pool", [True, False])
def test_device_memory_pool_keeps_workspaces_for_the_next_call(cuda_backend, rng, pool):
    """With device.memory_pool a call's workspaces stay cached for the next call of the same
    shape, which takes them instead of allocating more; free_cached gives them back. Without
    it nothing stays."""
    backend = hybridla.backend.get_backend(cuda_backend)
    backend.free_cached()
    a = np.asfortranarray(rng.standard_normal((600, 600)))
    _, ref_piv = scipy.linalg.lu_factor(a)
    with hybridla.config.set({"device.memory_pool": pool}):
        hybridla.lu_factor(a, backend=cuda_backend, nb=64)
        cached = backend.cached_bytes()
        lu, piv = hybridla.lu_factor(a, backend=cuda_backend, nb=64)
        assert backend.cached_bytes() == cached
    assert backend.allocated_bytes() == 0
    assert (cached > 0) == pool
    assert (piv == ref_piv).all()
    assert getrf_ratio(a, lu, piv) < THRESH
    backend.free_cached()
    assert backend.cached_bytes() == 0


# -- failure inside the engine ----------------------------------------------------------

def test_injected_update_failure_propagates_and_leaves_input_untouched(backend, monkeypatch,
                                                                       rng):
    import hybridla.update.lu as update_lu

    original = update_lu.gemm_update
    lock = threading.Lock()
    calls = [0]

    def failing_gemm_update(*args, **kwargs):
        with lock:
            calls[0] += 1
            call = calls[0]
        if call == 3:
            raise RuntimeError("injected")
        return original(*args, **kwargs)

    monkeypatch.setattr(update_lu, "gemm_update", failing_gemm_update)
    a = np.asfortranarray(rng.standard_normal((160, 160)))
    saved = a.copy(order="F")
    with pytest.raises(Exception) as excinfo:
        hybridla.lu_factor(a, overwrite_a=False, backend=backend, nb=16)
    texts = exception_texts(excinfo.value)
    assert any("injected" in t for t in texts), f"'injected' not in the exception chain: {texts}"
    assert calls[0] >= 3
    assert a.tobytes() == saved.tobytes(), "a failed run modified the input (overwrite_a=False)"
    if backend == "cuda":
        assert hybridla.backend.get_backend("cuda").allocated_bytes() == 0
    # The engine is usable again after a failed run (the wrapper fails only on call 3).
    lu, piv = hybridla.lu_factor(a, backend=backend, nb=16)
    assert getrf_ratio(a, lu, piv) < THRESH
