"""Run the suite from a scratch directory.

Several tests start child processes (``python -c ...``) so that a crash is a test failure
rather than a dead test run.  A child's ``sys.path`` starts with its working directory; from
the repository root that would import the unbuilt source tree instead of the installed
package.  Every test therefore runs with a scratch directory as its working directory, which
also keeps files that tests write out of the checkout.

The suite is organised by family (``sbn/``, ``nlgbn/``, ``hmm/``, ``classify/``, ``common/``)
with the slow NumPy references in ``references/`` and the fuzz harness in ``fuzz/``.  This file
puts ``tests/`` and ``tests/references/`` on ``sys.path``, so that ``import reference_hmm`` and
``from fuzz import cases`` work from every folder (there are no ``__init__.py`` files: test
module basenames are unique across the folders).
"""
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.join(TESTS, "references"), TESTS):
    if _path not in sys.path:
        sys.path.insert(0, _path)


@pytest.fixture(autouse=True, scope="session")
def _scratch_working_directory(tmp_path_factory):
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    try:
        yield
    finally:
        os.chdir(old)
