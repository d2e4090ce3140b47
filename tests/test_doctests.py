"""The public functions' docstrings: numpydoc sections, and their Examples run as doctests.

One test per user-layer module runs every example in it (doctest, on the host backend: the
examples pass backend="host"), so the README's test command checks that the documentation still
says what the code does. Only these modules are imported: a doctest run over the whole package
would import hybridla/backend/cuda.py, which needs PyCUDA.
"""
import doctest
import importlib
import inspect

import pytest

import hybridla

MODULES = ["hybridla._decomp_lu", "hybridla._decomp_cholesky", "hybridla._basic",
           "hybridla._decomp_qr", "hybridla._decomp_householder", "hybridla._decomp_qr_pivoted", "hybridla._decomp_hessenberg",
           "hybridla._lstsq", "hybridla._solve_mixed", "hybridla.info"]

PUBLIC = ["lu_factor", "lu_solve", "solve", "cho_factor", "cho_solve", "cholesky", "qr", "ql",
          "lq", "geqrf", "geqlf", "gelqf", "geqp3", "hessenberg", "gehrd", "lstsq", "solve_mixed",
          "lstsq_mixed", "show_config"]

FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS

SECTIONS = ("Parameters", "Returns", "Raises", "Examples")


@pytest.mark.parametrize("name", MODULES)
def test_examples(name):
    """Every example in the module's docstrings gives the output it shows."""
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = []
    for test in doctest.DocTestFinder().find(module, module.__name__):
        runner.run(test, out=report.append)
    assert runner.tries > 0, f"{name} has no examples"
    assert runner.failures == 0, "".join(report)


@pytest.mark.parametrize("name", PUBLIC)
def test_numpydoc_sections(name):
    """Each public function has a one-line summary and the four sections, in order, and its
    examples are among those test_examples runs."""
    function = getattr(hybridla, name)
    assert function.__module__ in MODULES
    doc = inspect.getdoc(function)
    lines = doc.splitlines()
    assert lines[0].strip() and (len(lines) == 1 or not lines[1].strip()), lines[:2]
    where = []
    for section in SECTIONS:
        header = f"\n{section}\n{'-' * len(section)}\n"
        assert header in doc, f"{name}: no {section} section"
        where.append(doc.index(header))
    assert where == sorted(where), f"{name}: sections out of order"
    assert ">>> " in doc[where[-1]:]
