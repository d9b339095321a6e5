"""The fuzz runner tells every outcome apart: a check that cannot fail would hide defects.

Synthetic cases (no mfengine call) that return a good answer, a NaN, raise a clear or an
unclear error, refuse valid input, kill the child with a signal, exit it without an
exception, hang, or corrupt state that only a later case trips over.  The children start
without importing mfengine (``bare``), so this runs in a few seconds.
"""
import pytest

from fuzz import runner


def case(cid, call, check="finite", names=("X",), valid=False, setup="", timeout=None):
    c = dict(id=cid, family="selftest", entry=cid, setup="import numpy as np\n" + setup,
             call=call, check=check, names=list(names), valid=valid, edit=cid, bare=True)
    if timeout:
        c["timeout"] = timeout
    return c


CASES = [
    case("ok", "out = np.zeros(3)"),
    case("nan", "out = np.array([0.0, np.nan])"),
    case("positive_bound", "out = np.array([0.5])", check="scores",
         setup="method = 'sjj'"),
    case("bad_proba", "out = np.array([[0.2, 1.3]])", check="proba"),
    case("modified_input", "X[0] = 1.0\nout = np.zeros(1)", setup="X = np.zeros(3)"),
    case("clean", "raise ValueError('X must be binary, found 0.5')"),
    case("unclear_message", "raise ValueError('operands could not be broadcast')"),
    case("unclear_type", "raise IndexError('X index 5 is out of bounds')"),
    case("word_only", "raise ValueError('max_iter must be positive')", names=("iter",)),
    case("refused", "raise ValueError('X must be C-contiguous')", valid=True),
    case("segfault", "import ctypes\nctypes.string_at(0)"),
    case("abort", "import os\nos.abort()"),
    case("exit", "import os\nos._exit(3)"),
    case("hang", "import time\ntime.sleep(60)", timeout=3),
    case("after_hang", "out = np.ones(2)"),
    # state left by one case that kills the child in a later one
    case("bomb", "import os\nos.environ['FUZZ_SELFTEST_BOMB'] = '1'\nout = np.zeros(1)"),
    case("innocent", "out = np.zeros(1)"),
    case("trigger", "import os, ctypes\nif os.environ.get('FUZZ_SELFTEST_BOMB'):\n"
                    "    ctypes.string_at(0)\nout = np.zeros(1)"),
]

EXPECTED = {
    "ok": "ok", "nan": "bad", "positive_bound": "bad", "bad_proba": "bad",
    "modified_input": "bad", "clean": "clean", "unclear_message": "unclear",
    "unclear_type": "unclear", "word_only": "unclear", "refused": "refused",
    "segfault": "crash", "abort": "crash", "exit": "crash", "hang": "hang", "after_hang": "ok",
    "bomb": "ok", "innocent": "ok", "trigger": "crash",
}


@pytest.fixture(scope="module")
def outcomes():
    results = runner.run_cases(CASES, timeout=30, bare=True)
    return {c["id"]: (res, outcome) for c, res, outcome in results}


@pytest.mark.parametrize("cid", list(EXPECTED))
def test_outcome(outcomes, cid):
    res, outcome = outcomes[cid]
    assert outcome == EXPECTED[cid], res


def test_crash_details(outcomes):
    res = outcomes["segfault"][0]
    assert res["signal"] == "SIGSEGV" and res["reproduced_alone"]
    assert "Fatal Python error" in res["stderr"] or "Segmentation" in res["stderr"]
    assert outcomes["exit"][0]["returncode"] == 3


def test_delayed_crash_is_traced_to_its_culprit(outcomes):
    res = outcomes["trigger"][0]
    assert res["reproduced_alone"] is False
    assert res["culprit"] == "bomb"
    assert "FUZZ_SELFTEST_BOMB" in res["culprit_repro"]


def test_names_are_words():
    assert runner.names_argument("X[0, 1] = nan", ["X"])
    assert not runner.names_argument("max_iter must be", ["iter"])
    assert not runner.names_argument("infer_max_iter must be", ["max_iter"])
    assert runner.names_argument("weights_[0] has shape", ["weights_"])
    assert not runner.names_argument("weights_[0] has shape", ["weights"])


def test_reproducer_is_one_line():
    line = runner.reproducer(case("q", "out = np.array(['it''s'])", setup="x = 'a'"))
    assert "\n" not in line and line.startswith("python -c '")
