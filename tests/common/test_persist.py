"""Model files as hostile input (``save`` / ``mf.load``).

* Round trips: random models of every family, fitted or not, come back bit for bit (the
  parameters, every fitted attribute, the scores), drawn by Hypothesis.
* Damaged, foreign and crafted files (``fuzz/model_files.py``: truncated, a flipped bit, a
  .npy array, a zip of other things, a pickle, every stored array replaced by hostile values,
  header keys added, removed, renamed or set to hostile values), drawn by Hypothesis with a
  fixed seed, each run in a child process (a crash fails the test, not the run): every one is
  refused with a ValueError that names the file, or loads a valid model.
* The issue's reproducers, each in a fresh child.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mfengine as mf
from fuzz import cases as fuzz_cases
from fuzz import runner

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------------------ round trips
@st.composite
def models(draw):
    """A model of any family with random sizes and seed, fitted or not, and data it scores."""
    kind = draw(st.sampled_from(["sbn", "dag", "dag-sparse", "batch", "batch-sparse", "nlgbn",
                                 "hmm", "classifier", "mixture", "mixture-classifier"]))
    seed = draw(st.integers(0, 2**16))
    fitted = draw(st.booleans())
    rng = np.random.default_rng(seed)
    n = draw(st.integers(3, 6))
    if kind == "sbn":
        sizes = [draw(st.integers(1, 3)), draw(st.integers(2, 4)), n]
        m = mf.SigmoidBeliefNet(sizes, max_iter=1, batch_size=5, random_state=seed,
                                progress=False)
        X = m.sample(8, random_state=seed)
        return (m.fit(X) if fitted else m), X, "score_samples"
    if kind.startswith("dag"):
        W = np.tril(rng.uniform(0, 1, (n, n)), -1) * (rng.random((n, n)) < 0.7)
        W = scipy.sparse.csr_matrix(W) if kind == "dag-sparse" else W
        act = draw(st.sampled_from(["sigmoid", "noisy_or"]))
        m = mf.BeliefNet(W, rng.uniform(0.1, 1, n), [n - 2, n - 1], act, max_iter=1,
                         batch_size=4, random_state=seed, progress=False)
        X = m.sample(8, random_state=seed)
        return (m.fit(X) if fitted else m), X, "score_samples"
    if kind.startswith("batch"):
        Ws = [np.tril(rng.uniform(0, 1, (n, n)), -1) for _ in range(3)]
        W = [scipy.sparse.csr_matrix(w) for w in Ws] if kind == "batch-sparse" else np.stack(Ws)
        m = mf.BeliefNetBatch(W, rng.uniform(0.1, 1, (3, n)), [n - 1], progress=False)
        return m, (rng.random((3, 1)) < 0.5).astype(float), "score_samples"
    if kind == "nlgbn":
        m = mf.NLGBN([1, 2, n], units=["binary", "rectified", "linear"], max_iter=1,
                     random_state=seed, progress=False)
        X = m.sample(10, random_state=seed)
        if fitted:
            m.partial_fit(X) if draw(st.booleans()) else m.fit(X)
        return m, X, "score_samples"
    if kind == "hmm":
        m = mf.ContextHMM(n_states=2, n_features=1, lag=1,
                          context=draw(st.sampled_from(["left", "right", "both"])),
                          max_iter=1, bw_max_iter=2, random_state=seed, progress=False)
        X = rng.normal(size=(20, 1))
        return m.fit(X), X, "score"
    Xc = (rng.random((12, n)) < 0.5).astype(float)
    y = np.repeat(["a", "b"], 6) if draw(st.booleans()) else np.repeat([3, 7], 6)
    if kind == "classifier":
        m = mf.GenerativeClassifier(hidden=(2,), max_iter=1, random_state=seed, progress=False)
        return m.fit(Xc, y), Xc, "predict_proba"
    if kind == "mixture":
        return (mf.BernoulliMixture(2, max_iter=3, tol=None, random_state=seed).fit(Xc), Xc,
                "score_samples")
    return (mf.MixtureClassifier(2, max_iter=3, tol=None, random_state=seed).fit(Xc, y), Xc,
            "predict_proba")


def _same(a, b, where):
    if scipy.sparse.issparse(a) or scipy.sparse.issparse(b):
        assert scipy.sparse.issparse(a) and scipy.sparse.issparse(b), where
        a, b = a.tocsr(), b.tocsr()
        for k in ("data", "indices", "indptr"):
            np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=where)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, np.random.Generator):
        assert a.bit_generator.state == b.bit_generator.state, where
    else:
        assert a == b and type(a) is type(b), where


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(drawn=models())
def test_every_family_round_trips_bit_for_bit(drawn, tmp_path_factory):
    import warnings

    m, X, verb = drawn
    path = m.save(tmp_path_factory.mktemp("rt") / "m")
    loaded = mf.load(path)
    assert type(loaded) is type(m)
    for name, value in m.get_params(deep=False).items():
        _same(value, loaded.get_params(deep=False)[name], f"params.{name}")
    for name in type(m)._saved_state:
        if name in vars(m) and not name.startswith("_"):
            _same(vars(m)[name], vars(loaded)[name], name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = getattr(m, verb)(X), getattr(loaded, verb)(X)
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------ hostile files
#: Cases of the suite's profile (the long profile, bench/tools/fuzz_long.py, draws more).
N_HOSTILE = 240


@pytest.fixture(scope="module")
def hostile_outcomes():
    drawn = fuzz_cases.generate("load", N_HOSTILE, seed=34)
    return runner.run_cases(drawn, timeout=60)


# slow: the drawn hostile files; the crafted files and the reproducers below run by
# default
@pytest.mark.slow
def test_hostile_files_are_refused_by_name_or_load_a_valid_model(hostile_outcomes):
    bad = [(c, r, o) for c, r, o in hostile_outcomes if o not in ("clean", "ok")]
    assert not bad, "\n".join(f"{o}: {c['edit']}: {r.get('msg') or r.get('problem')}\n    "
                              f"{runner.reproducer(c)}" for c, r, o in bad[:20])
    assert len(hostile_outcomes) >= 0.9 * N_HOSTILE


@pytest.mark.slow
def test_hostile_files_cover_every_family_and_damage(hostile_outcomes):
    from fuzz import model_files

    edits = {c["edit"].split(": mfz.")[1].split("(")[0] for c, _, _ in hostile_outcomes}
    kinds = {c["edit"].split(":")[0] for c, _, _ in hostile_outcomes}
    assert edits == {"truncate", "flip_bit", "foreign", "replace_array", "edit_header",
                     "edit_keys"}
    assert kinds == set(model_files.MODELS)
    refused = [r for c, r, o in hostile_outcomes if o == "clean"]
    assert len(refused) > 0.6 * len(hostile_outcomes)
    assert all(r["exc_type"] in ("ValueError", "InvalidParameterError", "MemoryError")
               for r in refused)


# ------------------------------------------------------------------------------ reproducers
def _child(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=os.getcwd())


def test_crafted_edge_indices_are_refused_not_a_crash():
    out = _child(
        "import os, tempfile, numpy as np, mfengine as mf\n"
        "net = mf.BeliefNet(np.tril(np.full((4, 4), .5), -1), np.zeros(4), [2, 3]); net.n_units\n"
        "p = net.save(os.path.join(tempfile.mkdtemp(), 'm'))\n"
        "z = dict(np.load(p)); k = [str(s) for s in z['_keys']].index('state._edges_saved.indices')\n"
        "z[f'a{k}'] = np.full_like(z[f'a{k}'], np.iinfo(z[f'a{k}'].dtype).max); np.savez(p, **z)\n"
        "try:\n    mf.load(p)\nexcept ValueError as e:\n    print('REFUSED', e)\n")
    assert out.returncode == 0, out.stderr
    assert "REFUSED" in out.stdout and "m.npz" in out.stdout
    assert "_edges_saved" in out.stdout


@pytest.mark.parametrize("key", ["score_samples", "__dict__", "__class__", "_src"])
def test_a_header_cannot_set_attributes_the_class_does_not_declare(key, tmp_path):
    net = mf.SigmoidBeliefNet([2, 3], random_state=0, progress=False)
    p = net.save(tmp_path / "m")
    z = dict(np.load(p))
    header = json.loads(str(z["_header"]))
    header["state"]["__dict__"][key] = 1
    z["_header"] = np.array(json.dumps(header))
    np.savez(p, **z)
    with pytest.raises(ValueError, match=f"m.npz.*state.{key} is not a fitted attribute"):
        mf.load(p)


@pytest.mark.parametrize("path", [None, 3, 2.5, b"m", ["m"]])
def test_save_refuses_a_path_that_is_not_a_str_or_path_like(path, tmp_path):
    os.chdir(tmp_path)
    net = mf.SigmoidBeliefNet([2, 3], random_state=0)
    with pytest.raises(TypeError, match="path must be a str or an os.PathLike"):
        net.save(path)
    assert os.listdir(tmp_path) == []


def test_load_names_the_file_for_truncated_and_foreign_files(tmp_path):
    net = mf.SigmoidBeliefNet([2, 3], random_state=0)
    p = net.save(tmp_path / "m")
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) // 2])
    with pytest.raises(ValueError, match="m.npz.*not an mfengine model file"):
        mf.load(p)
    q = str(tmp_path / "a.npy")
    np.save(q, np.arange(3))
    with pytest.raises(ValueError, match="a.npy.*a single .npy array"):
        mf.load(q)


def test_a_malformed_sparse_matrix_is_refused_by_the_constructor_in_a_child():
    out = _child(
        "import numpy as np, scipy.sparse as sp, mfengine as mf\n"
        "W = sp.csr_matrix(np.tril(np.full((4, 4), .5), -1))\n"
        "for damage in ('W.indptr[2] = 100', 'W.indices[0] = 2**31 - 1', 'W.indptr[1] = -5'):\n"
        "    A = W.copy(); exec(damage.replace('W.', 'A.'))\n"
        "    try:\n"
        "        mf.BeliefNet(A, np.zeros(4), [2, 3]).score_samples(np.zeros((1, 2)))\n"
        "    except ValueError as e:\n"
        "        print('REFUSED', e)\n")
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stdout.splitlines() if l.startswith("REFUSED")]
    assert len(lines) == 3 and all("W is a malformed sparse matrix" in l for l in lines)
