"""Sphinx configuration of hybridla's API site.

Build it as CI does (warnings are errors; the output goes where you say):

    python3 -m pip install -q ".[docs]"
    python3 -m sphinx -W --keep-going -b html docs /tmp/hybridla-docs

The pages document the installed package (autodoc imports hybridla, which needs no GPU: the
cuda backend is imported only when a device is used) with numpydoc reading the docstrings.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, os.path.abspath(".."))  # a source checkout documents itself

import hybridla  # noqa: E402
from hybridla import cli  # noqa: E402

project = "hybridla"
author = "the hybridla developers"
copyright = "the hybridla developers (BSD-3-Clause)"  # noqa: A001 - Sphinx's name
release = version = hybridla.__version__

extensions = ["sphinx.ext.autodoc", "numpydoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
nitpicky = False

autodoc_typehints = "none"  # the numpydoc Parameters sections give the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "alabaster"
html_title = f"hybridla {release}"
html_static_path: list = []

# argparse reads COLUMNS when it formats help: one width for the CLI page, whatever the terminal
os.environ["COLUMNS"] = "96"


class CommandHelp(SphinxDirective):
    """``.. hybridla-help:: [COMMAND]``: the help text of the ``hybridla`` command (or of one
    of its commands) as argparse prints it, so that this page and ``--help`` never differ."""

    optional_arguments = 1

    def run(self):
        command = self.arguments[0] if self.arguments else None
        if command == "bench":  # its options are the benchmark runner's (hybridla.bench)
            from hybridla.bench import runner
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                runner.parse_args(["--help"], prog="hybridla bench")
            text = out.getvalue()
        else:
            parser = cli.make_parser()
            text = (parser.commands[command] if command else parser).format_help()
        return [nodes.literal_block(text, text)]


def setup(app):
    app.add_directive("hybridla-help", CommandHelp)
    return {"parallel_read_safe": True}

