"""Every example in the public docstrings runs, as a doctest, against the installed package."""
import doctest
import importlib

import pytest

MODULES = [
    "mfengine",
    "mfengine._base",
    "mfengine._config",
    "mfengine.inference",
    "mfengine.sbn._result",
    "mfengine.sbn.layered",
    "mfengine.sbn.dag",
    "mfengine.nlgbn._result",
    "mfengine.nlgbn.model",
    "mfengine.hmm._result",
    "mfengine.hmm.model",
    "mfengine.classify",
    "mfengine.mixture.model",
    "mfengine.datasets",
    "mfengine.solver",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name, tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)          # examples that save files write here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed"


def test_every_estimator_has_an_example():
    import mfengine as mf

    for name in ("SigmoidBeliefNet", "BeliefNet", "BeliefNetBatch", "NLGBN", "ContextHMM",
                 "GenerativeClassifier"):
        doc = getattr(mf, name).__doc__
        assert "Examples\n    --------" in doc and ">>>" in doc, name
