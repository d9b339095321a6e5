"""Run the suite from a scratch directory.

Several tests start child processes (``python -c ...``) so that a crash is a test failure
rather than a dead test run.  A child's ``sys.path`` starts with its working directory; from
the repository root that would import the unbuilt source tree instead of the installed
package.  Every test therefore runs with a scratch directory as its working directory, which
also keeps files that tests write out of the checkout.
"""
import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _scratch_working_directory(tmp_path_factory):
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    try:
        yield
    finally:
        os.chdir(old)
