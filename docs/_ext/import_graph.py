"""Draw mfengine's import structure from its own source, at every documentation build.

    python docs/_ext/import_graph.py [OUT.png]       # standalone (default: imports.png here)

As a Sphinx extension (``extensions = [..., "import_graph"]`` with ``docs/_ext`` on
``sys.path``) it writes ``generated/imports.png`` and ``generated/imports.rst`` (the module
table) under the documentation's source directory when the build starts.

What is read, and how:

* every ``mfengine/**/*.py``, parsed with :mod:`ast`: ``import mfengine.x``,
  ``from mfengine.x import y`` (an edge to ``mfengine.x.y`` when that is a module of the
  package, else to ``mfengine.x``) and relative imports; a string constant that names a
  module of the package (``importlib.import_module("mfengine.hmm")``, a table of lazily
  loaded names) counts as a lazy import and is drawn dashed;
* every ``mfengine/**/*.pyx`` and ``.pxd`` (Cython, which :mod:`ast` cannot parse), by its
  ``cimport`` lines, and the C headers of ``csrc/`` it names in ``cdef extern from "..."``
  or ``#include "..."``;
* the C headers' own ``#include "..."`` lines, for headers that are in ``csrc/``.

Nothing is laid out by hand: modules are grouped by family (the top-level modules, then one
column per subpackage), and within a family by kind (package and public modules, private
Python modules, compiled kernels, C headers).  Whatever modules the package holds when the
build runs are drawn.
"""
import ast
import os
import re
import sys
from collections import defaultdict

KINDS = ("public", "private", "kernel", "c")
KIND_LABELS = {"public": "package and public modules", "private": "private Python modules",
               "kernel": "compiled kernels (Cython)", "c": "C headers (csrc/)"}
COLOURS = {"public": "#cfe2f3", "private": "#fff2cc", "kernel": "#f4cccc", "c": "#e0e0e0"}

_CIMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+cimport\s+([\w\s,()]+)|cimport\s+([\w.]+))",
                      re.M)
_EXTERN = re.compile(r"""(?:cdef\s+extern\s+from\s+|#\s*include\s+)["<]([\w./]+)[">]""")


def _module_name(pkg_root, path):
    rel = os.path.relpath(path, os.path.dirname(pkg_root))
    parts = rel.split(os.sep)
    parts[-1] = os.path.splitext(parts[-1])[0]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def collect(pkg_root, csrc=None):
    """Read the package's modules and their imports.

    Parameters
    ----------
    pkg_root : str
        The package directory (``.../mfengine``).
    csrc : str, optional
        The directory of the C sources (``.../csrc``); C headers are left out without it.

    Returns
    -------
    modules : dict
        Module name -> dict with ``kind`` (one of ``KINDS``), ``family`` and ``path``.
    edges : set of tuple
        ``(importer, imported, style)`` with style ``"import"``, ``"lazy"``, ``"cimport"``
        or ``"c"``.
    """
    pkg = os.path.basename(os.path.normpath(pkg_root))
    files = {}
    for root, dirs, names in os.walk(pkg_root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        for name in sorted(names):
            if name.endswith((".py", ".pyx", ".pxd")):
                files.setdefault(_module_name(pkg_root, os.path.join(root, name)), []).append(
                    os.path.join(root, name))
    modules = {}
    for mod, paths in files.items():
        exts = {os.path.splitext(p)[1] for p in paths}
        parts = mod.split(".")
        subpackage = len(parts) > 1 and os.path.isdir(os.path.join(pkg_root, parts[1]))
        family = parts[1] if subpackage else "(top level)"
        if ".pyx" in exts:
            kind = "kernel"
        elif ".py" not in exts:      # a .pxd alone: declarations for Cython callers
            kind = "kernel"
        elif parts[-1].startswith("_") and parts[-1] != "__main__":
            kind = "private"
        else:
            kind = "public"
        modules[mod] = {"kind": kind, "family": family, "path": paths}

    edges = set()

    def resolve(base, name=None):
        if name is not None and f"{base}.{name}" in modules:
            return f"{base}.{name}"
        return base if base in modules else None

    for mod, info in list(modules.items()):
        for path in info["path"]:
            text = open(path, encoding="utf-8").read()
            if path.endswith(".py"):
                for node in ast.walk(ast.parse(text, path)):
                    if isinstance(node, ast.Import):
                        for a in node.names:
                            if a.name.split(".")[0] == pkg and resolve(a.name):
                                edges.add((mod, resolve(a.name), "import"))
                    elif isinstance(node, ast.ImportFrom):
                        if node.level:
                            here = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
                            for _ in range(node.level - 1):
                                here = here.rpartition(".")[0]
                            base = f"{here}.{node.module}" if node.module else here
                        else:
                            base = node.module or ""
                        if base.split(".")[0] != pkg:
                            continue
                        for a in node.names:
                            target = resolve(base, a.name)
                            if target and target != mod:
                                edges.add((mod, target, "import"))
                    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                        if node.value in modules and node.value != mod and "." in node.value:
                            edges.add((mod, node.value, "lazy"))
            else:
                for m in _CIMPORT.finditer(text):
                    base = m.group(1) or m.group(3)
                    if base.split(".")[0] != pkg:
                        continue
                    names = re.split(r"[\s,()]+", m.group(2) or "")
                    targets = {resolve(base, n) for n in names if n} or {resolve(base)}
                    for t in targets - {None, mod}:
                        edges.add((mod, t, "cimport"))
                if csrc:
                    for m in _EXTERN.finditer(text):
                        header = os.path.basename(m.group(1))
                        if os.path.exists(os.path.join(csrc, header)):
                            modules.setdefault(header, {"kind": "c", "family": info["family"],
                                                        "path": [os.path.join(csrc, header)]})
                            edges.add((mod, header, "c"))
    # the headers' own includes (a header shared by families goes to the top-level column)
    if csrc:
        pending = [m for m, i in modules.items() if i["kind"] == "c"]
        while pending:
            h = pending.pop()
            for m in _EXTERN.finditer(open(modules[h]["path"][0], encoding="utf-8").read()):
                inc = os.path.basename(m.group(1))
                if inc != h and os.path.exists(os.path.join(csrc, inc)):
                    if inc not in modules:
                        modules[inc] = {"kind": "c", "family": modules[h]["family"],
                                        "path": [os.path.join(csrc, inc)]}
                        pending.append(inc)
                    edges.add((h, inc, "c"))
        users = defaultdict(set)
        for a, b, _ in edges:
            if modules[b]["kind"] == "c":
                users[b].add(modules[a]["family"])
        for h, fams in users.items():
            if len(fams) > 1:
                modules[h]["family"] = "(top level)"
    return modules, edges


def layout(modules, per_row=2):
    """Place each module: one column per family, one band per kind.

    Returns
    -------
    pos : dict
        Module -> (x, y) of its box centre.
    columns : list of tuple
        ``(family, x_left, x_right)``.
    bands : list of tuple
        ``(kind, y_top, y_bottom)``.
    """
    families = sorted({i["family"] for i in modules.values()},
                      key=lambda f: (f != "(top level)", f))
    groups = defaultdict(list)
    for m, i in modules.items():
        groups[i["family"], i["kind"]].append(m)
    width = {f: max(1, min(per_row, max(len(groups[f, k]) for k in KINDS))) for f in families}
    rows = {k: max(1, max(-(-len(groups[f, k]) // width[f]) for f in families)) for k in KINDS
            if any(groups[f, k] for f in families)}
    pos, columns, bands = {}, [], []
    x = 0.0
    cell_w, cell_h = 2.3, 0.62
    for f in families:
        columns.append((f, x, x + width[f] * cell_w))
        y = 0.0
        for k in KINDS:
            if k not in rows:
                continue
            names = sorted(groups[f, k], key=lambda m: (m.count("."), m))
            for i, m in enumerate(names):
                pos[m] = (x + (i % width[f] + 0.5) * cell_w, y - (i // width[f] + 0.5) * cell_h)
            y -= rows[k] * cell_h + 0.45
        x += width[f] * cell_w + 0.5
    y = 0.0
    for k in KINDS:
        if k in rows:
            bands.append((k, y, y - rows[k] * cell_h))
            y -= rows[k] * cell_h + 0.45
    return pos, columns, bands


def draw(pkg_root, out, csrc=None):
    """Draw the import graph of the package at ``pkg_root`` into the image ``out``.

    Parameters
    ----------
    pkg_root : str
        The package directory.
    out : str
        The image to write (its extension gives the format).
    csrc : str, optional
        The directory of the C sources.

    Returns
    -------
    modules, edges
        As :func:`collect` returns them.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    modules, edges = collect(pkg_root, csrc)
    pos, columns, bands = layout(modules)
    x_max = max(c[2] for c in columns)
    y_min = min(b[2] for b in bands)
    scale = 0.75                         # inches per layout unit
    fig, ax = plt.subplots(figsize=(scale * x_max + 0.6, scale * (-y_min) + 1.4))
    for k, top, bottom in bands:
        ax.axhspan(bottom - 0.15, top + 0.15, color=COLOURS[k], alpha=0.18, lw=0)
        ax.text(-0.15, (top + bottom) / 2, KIND_LABELS[k], rotation=90, ha="right",
                va="center", fontsize=8, color="0.35")
    for f, left, right in columns:
        ax.text((left + right) / 2, 0.45, f if f.startswith("(") else f"mfengine.{f}",
                ha="center", va="bottom", fontsize=11, weight="bold")
    styles = {"import": dict(color="#3d6fb6", ls="-", alpha=0.55),
              "lazy": dict(color="#3d6fb6", ls="--", alpha=0.45),
              "cimport": dict(color="#b03a2e", ls="-", alpha=0.6),
              "c": dict(color="0.45", ls="-", alpha=0.45)}
    for a, b, style in sorted(edges):
        (x0, y0), (x1, y1) = pos[a], pos[b]
        rad = 0.25 if abs(x0 - x1) < 1e-9 else 0.12
        kw = dict(styles[style])
        if modules[a]["family"] != modules[b]["family"]:
            kw["alpha"] *= 0.5          # edges between families drawn lighter
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=7,
                                     connectionstyle=f"arc3,rad={rad}", lw=0.7,
                                     shrinkA=9, shrinkB=9, **kw))
    for m, (x, y) in pos.items():
        kind = modules[m]["kind"]
        label = m if kind == "c" else m.split(".", 1)[-1] if "." in m else m
        if modules[m]["family"] != "(top level)" and kind != "c":
            label = label.split(".", 1)[-1] if label.count(".") else label
        ax.add_patch(FancyBboxPatch((x - 1.0, y - 0.2), 2.0, 0.4,
                                    boxstyle="round,pad=0.02,rounding_size=0.08",
                                    fc=COLOURS[kind], ec="0.4", lw=0.6, zorder=3))
        ax.text(x, y, label, ha="center", va="center", fontsize=7.5, zorder=4,
                family="monospace")
    handles = [plt.Line2D([], [], label="import", **styles["import"]),
               plt.Line2D([], [], label="lazy import (by name)", **styles["lazy"]),
               plt.Line2D([], [], label="cimport", **styles["cimport"]),
               plt.Line2D([], [], label="C #include / cdef extern", **styles["c"])]
    ax.legend(handles=handles, loc="lower right", fontsize=8, frameon=False,
              bbox_to_anchor=(1.0, 1.0), ncol=4)
    ax.set_xlim(-0.6, x_max + 0.1)
    ax.set_ylim(y_min - 0.3, 1.0)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return modules, edges


def module_table(modules, edges):
    """reStructuredText: one row per module with its family, kind and what it imports."""
    out = defaultdict(list)
    for a, b, style in sorted(edges):
        out[a].append(b + (" (lazy)" if style == "lazy" else ""))
    rows = []
    for m in sorted(modules, key=lambda m: (modules[m]["family"] != "(top level)",
                                            modules[m]["family"], KINDS.index(
                                                modules[m]["kind"]), m)):
        rows.append((m, modules[m]["family"], modules[m]["kind"], ", ".join(out[m]) or "-"))
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 22 10 10 58", "",
             "   * - module", "     - family", "     - kind", "     - imports"]
    for m, f, k, imp in rows:
        lines += [f"   * - ``{m}``", f"     - {f}", f"     - {k}", f"     - {imp}"]
    return "\n".join(lines) + "\n"


def _on_builder_inited(app):
    src = app.srcdir
    root = os.path.dirname(os.path.abspath(src))
    pkg = os.path.join(root, "mfengine")
    csrc = os.path.join(root, "csrc")
    outdir = os.path.join(src, "generated")
    os.makedirs(outdir, exist_ok=True)
    modules, edges = draw(pkg, os.path.join(outdir, "imports.png"),
                          csrc if os.path.isdir(csrc) else None)
    text = module_table(modules, edges)
    path = os.path.join(outdir, "imports.rst")
    old = open(path).read() if os.path.exists(path) else None
    if text != old:
        with open(path, "w") as fh:
            fh.write(text)


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "imports.png")
    mods, eds = draw(os.path.join(root, "mfengine"), out, os.path.join(root, "csrc"))
    print(f"{len(mods)} modules, {len(eds)} edges -> {out}")
