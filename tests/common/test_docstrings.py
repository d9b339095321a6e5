"""numpydoc's validator on every public name of mfengine: the classes and functions of
``mfengine.__all__``, the public methods and properties that mfengine defines on those classes,
and the public functions of the modules listed there.  Every error is listed, grouped by
module; ``python tests/common/test_docstrings.py`` prints the same list and a count per module.
"""
import inspect
import sys
import types
from collections import defaultdict

import pytest

import mfengine

# Checks that do not fit this code base, each ignored everywhere:
IGNORED = {
    # "summary should start in the line immediately after the opening quotes": PEP 257 (and
    # this code base) puts the summary on the line of the opening quotes.
    "GL01",
    # "no extended summary": a one-line summary is enough for many names; the sections that
    # matter (Parameters, Returns, Raises, Examples) are still checked.
    "ES01",
    # "See Also section not found": not every name has a natural neighbour to point at.
    "SA01",
    # "the first line of the Returns section should contain only the type": scikit-learn's
    # style, which mfengine's estimators follow, names what is returned ("self : object",
    # "score : float"), and scikit-learn's own docstring test ignores RT02 for that reason.
    "RT02",
}
# Ignored on methods and properties only: COMMON.md asks for an Examples section on every
# public class and function (each estimator's class example runs as a doctest), not on every
# method, whose use the class example shows.
IGNORED_ON_MEMBERS = {"EX01"}
# Members inherited from scikit-learn (get_params, set_params, set_output, the metadata-routing
# helpers) are not validated at all: their docstrings are scikit-learn's, not ours; likewise
# members inherited from Python's own classes (Warning, dataclass machinery).  So GL08 ("no
# docstring") is never ignored: it only ever reports a member that mfengine defines.


def _defined_in_mfengine(obj):
    target = obj.fget if isinstance(obj, property) else obj
    target = getattr(target, "__func__", target)
    return (getattr(target, "__module__", None) or "").split(".")[0] == "mfengine"


def public_names():
    """(import path, is_member) of every public object to validate."""
    out = []
    for name in mfengine.__all__:
        if name.startswith("__"):
            continue  # __version__
        obj = getattr(mfengine, name)
        path = f"mfengine.{name}"
        if isinstance(obj, types.ModuleType):
            out.append((path, False))
            names = getattr(obj, "__all__", None) or [
                n for n, f in vars(obj).items() if not n.startswith("_") and f.__module__ == obj.__name__
            ]
            # its functions and classes (constants such as DIGITS_SHAPE have no docstring)
            out += [(f"{path}.{n}", False) for n in names
                    if inspect.isfunction(getattr(obj, n)) or inspect.isclass(getattr(obj, n))]
        elif inspect.isclass(obj):
            out.append((path, False))
            for attr in sorted(dir(obj)):
                if attr.startswith("_"):
                    continue
                static = inspect.getattr_static(obj, attr)
                member = getattr(obj, attr, None)
                is_property = isinstance(static, property)
                if not (is_property or callable(member)) or inspect.isclass(member):
                    continue  # data attributes (dataclass fields, constants)
                if _defined_in_mfengine(static if is_property else member):
                    out.append((f"{path}.{attr}", True))
        elif callable(obj):
            out.append((path, False))
    return out


def collect_errors():
    """{module: [(import path, code, message)]} of every error not ignored."""
    validate = pytest.importorskip(
        "numpydoc.validate", reason="numpydoc is not installed (pip install '.[test]')"
    ).validate
    errors = defaultdict(list)
    for path, is_member in public_names():
        ignored = IGNORED | (IGNORED_ON_MEMBERS if is_member else set())
        result = validate(path)
        obj = _resolve(path)
        if isinstance(obj, property):
            obj = obj.fget
        module = obj.__name__ if isinstance(obj, types.ModuleType) else obj.__module__
        for code, message in result["errors"]:
            if code not in ignored:
                errors[module].append((path, code, message))
    return errors


def _resolve(path):
    obj = mfengine
    parts = path.split(".")[1:]
    for i, part in enumerate(parts):
        owner = obj
        obj = getattr(obj, part)
        if i == len(parts) - 1 and inspect.isclass(owner):
            static = inspect.getattr_static(owner, part)
            if isinstance(static, property):
                return static
    return obj


def format_errors(errors):
    lines = []
    for module in sorted(errors):
        lines.append(f"{module}: {len(errors[module])} errors")
        lines += [f"    {path}: {code} {message}" for path, code, message in errors[module]]
    return "\n".join(lines)


def test_numpydoc_validation():
    errors = collect_errors()
    total = sum(len(v) for v in errors.values())
    assert total == 0, f"{total} numpydoc errors on mfengine's public names:\n" + format_errors(errors)


def test_validation_covers_every_public_name():
    # the walk above must reach every name of __all__ (a name it skips would never be checked)
    paths = {p for p, _ in public_names()}
    for name in mfengine.__all__:
        if not name.startswith("__"):
            assert f"mfengine.{name}" in paths, name
    assert "mfengine.SigmoidBeliefNet.fit" in paths
    assert "mfengine.SigmoidBeliefNet.get_params" not in paths  # scikit-learn's docstring


if __name__ == "__main__":
    errs = collect_errors()
    print(format_errors(errs))
    print(f"\n{sum(len(v) for v in errs.values())} errors in {len(public_names())} public names")
    for module in sorted(errs):
        print(f"  {module:<28} {len(errs[module])}")
    sys.exit(1 if errs else 0)
