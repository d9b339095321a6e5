"""Sphinx configuration of mfengine's API reference.

Build it with (from the repository root, against an installed, built mfengine):

    pip install ".[docs]" && sphinx-build -b html docs/api docs/_build/html

The reference lists every name of ``mfengine.__all__``: this file writes the list
(``generated/reference.rst``) from ``mfengine.__all__`` each time Sphinx starts, and autosummary
makes one page per name from its numpydoc docstring.
"""
import inspect
import os
import types

import mfengine  # the installed package: the compiled kernels must be built

project = "mfengine"
author = "the mfengine authors"
copyright = "the mfengine authors"
release = mfengine.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
]

templates_path = ["_templates"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = f"mfengine {release} API reference"

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"member-order": "groupwise"}
# Methods are listed by the class template (autosummary + autodoc :members:), not by numpydoc,
# whose own member tables would point at pages that do not exist.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# Types stay plain text (cross-referencing them would need intersphinx, a network fetch at
# every build).  A fitted attribute named in a type is written in backquotes, as scikit-learn
# does: "ndarray of shape (`n_iter_`,)" (a bare n_iter_ is a reStructuredText link).
numpydoc_xref_param_type = False

HERE = os.path.dirname(os.path.abspath(__file__))


def _kind(name):
    obj = getattr(mfengine, name)
    if isinstance(obj, types.ModuleType):
        return "module"
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return "warning"
        if any(hasattr(obj, verb) for verb in ("fit", "infer", "score_samples")):
            return "estimator"
        return "class"
    if callable(obj):
        return "function"
    return "data"


SECTIONS = [
    ("estimator", "Models", "class.rst"),
    ("class", "Results", "class.rst"),
    ("warning", "Warnings", "class.rst"),
    ("function", "Functions", None),
    ("module", "Modules", "module.rst"),
]


def write_reference():
    """Write generated/reference.rst: one autosummary table per kind of name in __all__."""
    names = [n for n in mfengine.__all__ if n != "__version__"]
    kinds = {n: _kind(n) for n in names}
    lines = [
        "API reference",
        "=============",
        "",
        f"Every public name of ``mfengine`` (``mfengine.__all__``), version {release}.",
        "",
        ".. currentmodule:: mfengine",
        "",
    ]
    for kind, title, template in SECTIONS:
        group = [n for n in names if kinds[n] == kind]
        if not group:
            continue
        lines += [title, "-" * len(title), "", ".. autosummary::", "   :toctree: ."]
        if template:
            lines.append(f"   :template: {template}")
        lines.append("")
        lines += [f"   {n}" for n in group]
        lines.append("")
    data = [n for n in names if kinds[n] == "data"]
    if data:
        lines += ["Constants", "---------", ""]
        lines += [f"``mfengine.{n}``: ``{getattr(mfengine, n)!r}``" for n in data]
        lines.append("")
    lines += ["Version", "-------", "", f"``mfengine.__version__``: ``{release!r}``", ""]
    os.makedirs(os.path.join(HERE, "generated"), exist_ok=True)
    path = os.path.join(HERE, "generated", "reference.rst")
    text = "\n".join(lines)
    old = open(path).read() if os.path.exists(path) else None
    if text != old:  # unchanged text keeps Sphinx's incremental build
        with open(path, "w") as fh:
            fh.write(text)


write_reference()


# scikit-learn's base classes bring get_params/set_params (documented here: they are part of
# every estimator's surface) and the metadata-routing helpers (set_fit_request, ...), whose
# docstrings point into scikit-learn's own documentation: those are left to it.
KEEP_FROM_SKLEARN = {"get_params", "set_params"}


def skip_sklearn_members(app, what, name, obj, skip, options):
    module = getattr(obj, "__module__", None) or ""
    if what == "class" and module.startswith("sklearn.") and name not in KEEP_FROM_SKLEARN:
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", skip_sklearn_members)
