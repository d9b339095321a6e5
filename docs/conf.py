"""Sphinx configuration of mfengine's documentation.

Build it from the repository root, against an installed, built mfengine (Sphinx imports the
package, and the gallery runs its examples)::

    pip install ".[docs]" && sphinx-build -W -b html docs docs/_build/html

Written at every build, all under ignored directories:

* ``api/generated/``: the API reference's list of names (``reference.rst``, read from
  ``mfengine.__all__``) and autosummary's one page per name;
* ``generated/gallery/``: the examples gallery, run from ``examples/gallery/plot_*.py``;
* ``generated/imports.png`` and ``generated/imports.rst``: the import structure, drawn from
  the package's source by ``_ext/import_graph.py``;
* ``generated/solver_contract.txt``: the C API's contract, ``mfengine.solver.__doc__``.
"""
import inspect
import os
import sys
import types

import mfengine  # the installed package: the compiled kernels must be built

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "_ext"))

# Long calls show a progress bar after two seconds; the gallery's output does not want them.
os.environ.setdefault("MFENGINE_PROGRESS_DELAY", "1e9")

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
    "sphinx_gallery.gen_gallery",
    "import_graph",
]

templates_path = ["_templates"]
# generated/imports.rst is included by architecture.rst, not a page of its own
exclude_patterns = ["_build", "_ext", "generated/imports.rst"]
html_theme = "alabaster"
html_title = f"mfengine {release}"
html_theme_options = {
    "description": "Mean-field inference and learning for belief networks",
    "fixed_sidebar": True,
    "page_width": "1160px",
    "sidebar_width": "250px",
    "body_max_width": "none",
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
html_static_path = ["_static"]   # custom.css: alabaster loads it

# -- API reference ------------------------------------------------------------------------
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


def _write_if_changed(path, text):
    """Write ``text`` unless the file already holds it (keeps Sphinx's incremental build)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    old = open(path).read() if os.path.exists(path) else None
    if text != old:
        with open(path, "w") as fh:
            fh.write(text)


def write_reference():
    """Write api/generated/reference.rst: one autosummary table per kind of name in __all__."""
    names = [n for n in mfengine.__all__ if n != "__version__"]
    kinds = {n: _kind(n) for n in names}
    lines = [
        "Every public name",
        "=================",
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
    _write_if_changed(os.path.join(HERE, "api", "generated", "reference.rst"), "\n".join(lines))


def write_solver_contract():
    """Write generated/solver_contract.txt: the C API's contract as the package states it."""
    import mfengine.solver

    _write_if_changed(os.path.join(HERE, "generated", "solver_contract.txt"),
                      inspect.cleandoc(mfengine.solver.__doc__) + "\n")


write_reference()
write_solver_contract()

# -- examples gallery ---------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": os.path.join(ROOT, "examples", "gallery"),
    "gallery_dirs": "generated/gallery",
    "filename_pattern": r"plot_",          # every plot_*.py runs at build time
    "within_subsection_order": "gallery_order.GalleryOrder",   # docs/_ext/gallery_order.py
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "min_reported_time": 0,
    "write_computation_times": False,      # per-example times are on each example's page
    "reset_modules": ("matplotlib",),
    "doc_module": (),
    "backreferences_dir": None,
    "show_memory": False,
    "capture_repr": ("_repr_html_", "__repr__"),
}


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
