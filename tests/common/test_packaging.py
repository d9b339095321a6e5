"""The installed package is complete: every compiled module of setup.py's table, the C headers
that mfengine.get_include() points at; and, when MFENGINE_TEST_SDIST=1 (set by .ci/run), a
release that a packager can trust: the sdist carries every source of the tree and nothing
generated, and the installed distribution declares the runtime dependencies."""
import ast
import importlib
import importlib.machinery
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile

import pytest

import mfengine
from mfengine._config import get_include

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.dirname(os.path.abspath(mfengine.__file__))
PUBLIC_HEADERS = ("mfengine_solver.h", "mf_status.h")

release = pytest.mark.skipif(
    os.environ.get("MFENGINE_TEST_SDIST", "") != "1",
    reason="release checks run when MFENGINE_TEST_SDIST=1 (as .ci/run does)",
)


def _extension_table():
    """(module, pyx, C patterns) of setup.py's EXTENSIONS table, read without running setup.py."""
    path = os.path.join(REPO, "setup.py")
    if not os.path.isfile(path):
        pytest.skip("the tests are not beside mfengine's setup.py")
    with open(path) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXTENSIONS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no EXTENSIONS table")


def _c_compiler():
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    if not cc or cc[0] == "false" or shutil.which(cc[0]) is None:
        return None
    return cc


def test_every_extension_is_compiled_inside_the_package():
    table = _extension_table()
    assert table, "setup.py builds no extension"
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for name, pyx, _ in table:
        mod = importlib.import_module(name)
        path = os.path.abspath(mod.__file__)
        assert path.endswith(suffixes), f"{name} is not a compiled module: {path}"
        expected_dir = os.path.join(PACKAGE_DIR, *name.split(".")[1:-1])
        assert os.path.dirname(path) == expected_dir, (name, path)


def test_get_include_holds_the_public_headers():
    include = get_include()
    assert os.path.isabs(include)
    assert os.path.dirname(include) == PACKAGE_DIR, "the headers live inside the installed package"
    for header in PUBLIC_HEADERS:
        assert os.path.isfile(os.path.join(include, header)), f"{header} not in {include}"
    # every header a shipped header includes with #include "..." ships too
    for header in os.listdir(include):
        with open(os.path.join(include, header)) as fh:
            for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', fh.read(), re.MULTILINE):
                assert os.path.isfile(os.path.join(include, inc)), f"{header} includes {inc}, not shipped"
    assert mfengine.get_config()["include"] == include


def test_installed_headers_match_the_source_tree():
    csrc = os.path.join(REPO, "csrc")
    if not os.path.isdir(csrc):
        pytest.skip("no source tree beside the tests")
    include = get_include()
    for header in os.listdir(include):
        with open(os.path.join(include, header), "rb") as a, open(os.path.join(csrc, header), "rb") as b:
            assert a.read() == b.read(), (
                f"{header}: the installed copy differs from csrc/ (rebuild: pip install ., or "
                "python setup.py build_ext --inplace)"
            )


@pytest.mark.parametrize("header", PUBLIC_HEADERS)
def test_each_public_header_compiles_on_its_own(tmp_path, header):
    cc = _c_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "use.c"
    src.write_text(f'#include "{header}"\nint main(void) {{ return MF_OK; }}\n')
    res = subprocess.run(cc + ["-std=c99", "-Wall", "-Werror", "-fsyntax-only", f"-I{get_include()}",
                               str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def _sdist(tmp_path):
    given = os.environ.get("MFENGINE_SDIST")
    if given:
        assert os.path.isfile(given), f"MFENGINE_SDIST={given} is not a file"
        return given
    pytest.importorskip("build", reason="making an sdist needs the 'build' package")
    if not os.path.isfile(os.path.join(REPO, "setup.py")):
        pytest.skip("no source tree beside the tests")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path), REPO],
                   check=True, capture_output=True, timeout=600)
    (path,) = tmp_path.glob("mfengine-*.tar.gz")
    return str(path)


def _tree_sources():
    """Every file of the source tree that the build or the tests need, relative to REPO."""
    if not os.path.isfile(os.path.join(REPO, "setup.py")):
        pytest.skip("no source tree beside the tests")
    wanted = {
        "mfengine": (".pyx", ".pxd", ".pxi", ".py"),
        "csrc": (".c", ".h"),
        "tests": (".py",),
    }
    found = {"setup.py", "pyproject.toml", "MANIFEST.in", "README.md"}
    for top, exts in wanted.items():
        for dirpath, dirnames, filenames in os.walk(os.path.join(REPO, top)):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "include")]
            for f in filenames:
                rel = os.path.relpath(os.path.join(dirpath, f), REPO).replace(os.sep, "/")
                if f.endswith(exts) and rel != "mfengine/_build_config.py":
                    found.add(rel)
    return found


@release
def test_sdist_carries_every_source_and_nothing_generated(tmp_path):
    sdist = _sdist(tmp_path)
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    needed = _tree_sources()
    missing = sorted(needed - names)
    assert not missing, f"{os.path.basename(sdist)} lacks {missing}"
    for name, pyx, patterns in _extension_table():
        assert pyx in names, (name, pyx)
        for pattern in patterns:
            assert any(re.fullmatch(pattern.replace(".", r"\.").replace("*", "[^/]*"), n) for n in names), pattern
    generated = sorted(
        n for n in names
        if n.startswith("mfengine/") and (n.endswith((".c", ".h", ".so", ".pyd", ".html"))
                                          or n == "mfengine/_build_config.py")
    )
    assert not generated, f"generated files in the sdist: {generated}"


@release
def test_installed_distribution_declares_its_dependencies():
    requires = importlib.metadata.requires("mfengine") or []
    runtime = {re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0].lower() for r in requires if "extra ==" not in r}
    assert {"numpy", "scipy", "scikit-learn"} <= runtime, requires
    assert not {"tqdm", "matplotlib"} & runtime, "tqdm and matplotlib stay optional"


def test_one_version_everywhere(tmp_path):
    """The version is written once (mfengine/__init__.py); the installed distribution, the
    configuration report and a saved model's header all carry that same string."""
    import io
    import json

    import numpy as np

    try:
        dist_version = importlib.metadata.version("mfengine")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("mfengine is not installed as a distribution")
    assert mfengine.__version__ == dist_version
    assert mfengine.get_config()["version"] == dist_version
    buf = io.StringIO()
    mfengine.show_config(file=buf)
    assert buf.getvalue().splitlines()[0] == f"mfengine {dist_version}"
    net = mfengine.SigmoidBeliefNet([2, 3], random_state=0, progress=False)
    path = net.save(tmp_path / "m")
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(str(archive["_header"]))
    assert header["mfengine_version"] == dist_version
    # pyproject.toml takes the version from the package, it does not repeat it
    pyproject = os.path.join(REPO, "pyproject.toml")
    if os.path.isfile(pyproject):
        with open(pyproject) as fh:
            text = fh.read()
        project = re.search(r"^\[project\]\n(.*?)(?=^\[)", text, re.MULTILINE | re.DOTALL).group(1)
        assert re.search(r'^dynamic\s*=\s*\[[^]]*"version"', project, re.MULTILINE), "version not dynamic"
        assert not re.search(r"^version\s*=", project, re.MULTILINE), "[project] repeats the version"
