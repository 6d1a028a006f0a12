"""Sphinx configuration of helmpinn's documentation.

Build from the repository root (the package importable, e.g. installed, or PYTHONPATH=python in a
source checkout that holds the compiled module):

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""
from __future__ import annotations

import inspect
import os
import re
import sys
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

import helmpinn  # noqa: E402  (the installed package, or python/ on PYTHONPATH)

project = "helmpinn"
author = "The helmpinn developers"
copyright = "2026, the helmpinn developers"
release = helmpinn.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]

myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# Docstrings are numpydoc style.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Defaults as the source writes them (``clock=time.perf_counter``), not as their repr
# (``<built-in function perf_counter>``): a repr that is not Python made Sphinx give up parsing
# the whole signature and print its annotations raw, each with a literal "~"
# (``~helmpinn.problems.Problem``).
autodoc_preserve_defaults = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
# A broken link between pages fails the build (myst.xref_missing under -W). References to Python
# objects are checked only with HELMPINN_DOCS_NITPICKY=1: the docstrings' references and types
# are not all resolvable yet (docs/README.md lists them). Other projects' objects (NumPy, the
# standard library) are never checked: there is no intersphinx, the build works offline.
nitpicky = os.environ.get("HELMPINN_DOCS_NITPICKY") == "1"
nitpick_ignore_regex = [(r"py:.*", r"(numpy|os|collections|typing|argparse)(\..*)?")]

html_theme = "alabaster"
html_title = f"helmpinn {release}"
html_static_path: list[str] = []


def _load_core_stubs() -> None:
    """Document ``helmpinn._core`` from its type stubs (``_core.pyi``).

    The compiled module's own docstrings are one line each; the stubs carry the full text and
    the argument types. autodoc cannot read a ``.pyi`` file, so the stub is executed here as a
    module of the same name, for the documentation build only (``helmpinn`` has already bound
    the compiled objects, so nothing else sees it).
    """
    path = os.path.join(os.path.dirname(helmpinn.__file__), "_core.pyi")
    if not os.path.exists(path):
        return   # an installation without the stubs: autodoc documents the compiled module
    module = types.ModuleType("helmpinn._core")
    module.__file__ = path
    module.__package__ = "helmpinn"
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    exec(code, module.__dict__)
    sys.modules["helmpinn._core"] = module


_load_core_stubs()

# Docstrings that reStructuredText cannot parse as written, patched for the build only (object
# name -> (text, replacement)). Each entry is a docstring to fix at its source; the entry then
# matches nothing and can go.
DOCSTRING_FIXES = {
    # "|u - u_exact|" reads as a substitution reference.
    "helmpinn.plots.plot_error": ("|u - u_exact|", r"\|u - u_exact\|"),
    # "*_streams" opens an emphasis that never closes.
    "helmpinn._core.Workspace": ("named *_streams", "named ``*_streams``"),
}


def _fix_docstring(app, what, name, obj, options, lines) -> None:
    fix = DOCSTRING_FIXES.get(name)
    if fix is None:
        return
    old, new = fix
    for i, line in enumerate(lines):
        lines[i] = line.replace(old, new)


def _parseable_defaults(app, what, name, obj, options, signature, return_annotation):
    """A default that has no source to preserve and whose repr is not Python (a dataclass
    field's ``<factory>``) written as ``...``: Sphinx then parses the signature instead of
    printing its annotations raw, each with a literal "~"."""
    if signature:
        signature = re.sub(r"=\s*<[^<>]*>", "= ...", signature)
    return signature, return_annotation


def _resolve_reexport(app, env, node, contnode):
    """Resolve a reference to a name helmpinn re-exports (``helmpinn.Problem``,
    ``helmpinn.Trainer.fit_lm``) to where it is documented (``helmpinn.problems.Problem``)."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target.startswith("helmpinn."):
        return None
    parts = target.split(".")
    obj = helmpinn
    try:
        for part in parts[1:]:
            obj = getattr(obj, part)
    except AttributeError:
        return None
    owner = obj
    if not hasattr(owner, "__qualname__"):   # a property: its getter says where it lives
        owner = getattr(owner, "fget", None)
    module = getattr(owner, "__module__", None)
    qualname = getattr(owner, "__qualname__", None)
    if inspect.isbuiltin(owner):   # a compiled function: pybind11 prefixes its own record type
        qualname = owner.__name__
    if not module or not qualname or f"{module}.{qualname}" == target:
        return None
    node["reftarget"] = f"{module}.{qualname}"
    return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                                             node["reftarget"], node, contnode)


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _fix_docstring)
    app.connect("autodoc-process-signature", _parseable_defaults)
    app.connect("missing-reference", _resolve_reexport)
