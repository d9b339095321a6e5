"""ContextHMM speaks the shared protocol with hmmlearn's meanings (issue 10, item 1)."""
import warnings

import numpy as np
import pytest
from hmmlearn.hmm import GaussianHMM
from sklearn.base import BaseEstimator, clone

import mfengine as mf
from mfengine._base import ConvergenceWarning, InferenceResult, PersistMixin, load
from mfengine.hmm import HMMInferenceResult
from mfengine.hmm._problem import centred
from mfengine.hmm._solve import solve, solve_from_starts

import reference_hmm as R


def coupled(n=3, D=2, lag=2, context="both", cscale=0.8, seed=0, **kw):
    rng = np.random.default_rng(seed)
    kw.setdefault("progress", False)
    h = mf.ContextHMM(n, D, lag=lag, context=context, **kw)
    h.means_ = 2.0 * rng.normal(size=(n, D))
    A = rng.random((n, n)) + np.eye(n)
    h.transmat_ = A / A.sum(1, keepdims=True)
    sp = rng.random(n) + 0.2
    h.startprob_ = sp / sp.sum()
    if context in ("right", "both"):
        h.right_means_ = cscale * rng.normal(size=(n, D))
    if context in ("left", "both"):
        h.left_means_ = cscale * rng.normal(size=(n, D))
    return h


def oracle_of(h):
    """hmmlearn's GaussianHMM with the same first-order parameters (unit spherical covariance)."""
    o = GaussianHMM(n_components=h.n_states, covariance_type="spherical", init_params="",
                    params="")
    o.startprob_, o.transmat_, o.means_ = h.startprob_, h.transmat_, h.means_
    o.covars_ = np.ones(h.n_states)
    return o


# ------------------------------------------------------------------------------------------
# the estimator contract

def test_hyperparameters_live_in_the_constructor_and_clone_works():
    h = mf.ContextHMM(4, 3, lag=2**62, context="left", max_iter=7, tol=None, bw_max_iter=3,
                      infer_max_iter=9, infer_tol=1e-6, n_threads=1, random_state=5,
                      params="st", init_params="m", warm_start=True, progress=False)
    assert isinstance(h, BaseEstimator) and isinstance(h, PersistMixin)
    p = h.get_params()
    assert p["lag"] == 2**62 and p["tol"] is None and p["init_params"] == "m"
    c = clone(h)
    assert c.get_params() == p and c is not h
    assert c.set_params(lag=3) is c and c.lag == 3
    # nothing is validated at construction; the error comes at use and names the argument
    bad = mf.ContextHMM(2, 1, lag=-1, context="up", max_iter=-3)
    assert bad.lag == -1
    with pytest.raises(ValueError, match="'lag' parameter of ContextHMM must be an int in the range \\[1,"):
        bad.fit(np.zeros((5, 1)))
    # no fitted attribute exists before fit (scikit-learn's rule)
    assert not any(k.endswith("_") for k in vars(mf.ContextHMM()))
    assert not hasattr(mf.ContextHMM, "score_sequences")


def test_fit_returns_self_with_history_and_n_iter():
    h = coupled(seed=1)
    X, _ = h.sample(200, random_state=0)
    m = mf.ContextHMM(3, lag=2, context="both", max_iter=4, bw_max_iter=5, tol=None,
                      random_state=0, progress=False)
    assert m.fit(X) is m
    assert isinstance(m.history_, np.ndarray) and m.history_.dtype == np.float64
    assert m.n_iter_ == len(m.history_) == 9 and m.bw_n_iter_ == 5
    assert m.n_features_in_ == 2 and m.means_.shape == (3, 2)
    # the history's mean-field part is the structured bound at the parameters of each E-step:
    # the final parameters score at least the last entry
    assert m.score(X) >= m.history_[-1] - 1e-8


def test_fit_warns_when_tol_is_not_met_and_not_for_a_fixed_budget():
    h = coupled(seed=2)
    X, _ = h.sample(150, random_state=1)
    kw = dict(n_states=3, lag=2, context="both", max_iter=2, bw_max_iter=3, random_state=0,
              progress=False)
    with pytest.warns(ConvergenceWarning, match="did not meet tol"):
        r = mf.ContextHMM(tol=1e-12, **kw).fit(X)
    assert not r.converged_
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        mf.ContextHMM(tol=None, **kw).fit(X)


def test_init_params_keeps_what_was_set_and_warns_when_it_overwrites():
    h = coupled(seed=3)
    X, _ = h.sample(120, random_state=2)
    m = mf.ContextHMM(3, 2, lag=2, context="both", params="st", init_params="st", max_iter=2,
                      bw_max_iter=2, tol=None, random_state=0, progress=False)
    means = np.array([[5.0, 5.0], [-5.0, 0.0], [0.0, -5.0]])
    right = 0.1 * np.ones((3, 2))
    m.means_, m.right_means_ = means.copy(), right.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        m.fit(X)
    # not initialised (left out of init_params) and not updated (left out of params)
    np.testing.assert_array_equal(m.means_, means)
    np.testing.assert_array_equal(m.right_means_, right)
    # the default init_params overwrites them, with hmmlearn's warning
    d = clone(m).set_params(init_params="stmrl", params="stmrl")
    d.means_ = means.copy()
    with pytest.warns(UserWarning, match="'means_' attribute is set, it will be overwritten"):
        d.fit(X)
    assert not np.allclose(d.means_, means)


def test_baum_welch_warm_up_is_hmmlearns():
    # with the context phase off, fit is Baum-Welch on the first-order model: the same
    # parameters as hmmlearn's GaussianHMM (unit spherical covariance held fixed)
    h = coupled(seed=4, cscale=0.0)
    X = np.concatenate([h.sample(80, random_state=s)[0] for s in range(3)])
    lengths = [80, 80, 80]
    sp0, A0 = np.full(3, 1 / 3), np.array([[0.5, 0.3, 0.2], [0.2, 0.6, 0.2], [0.3, 0.3, 0.4]])
    U0 = h.means_ + 0.3
    m = mf.ContextHMM(3, 2, lag=2, context="both", max_iter=0, bw_max_iter=6, tol=None,
                      init_params="", params="stm", progress=False)
    m.startprob_, m.transmat_, m.means_ = sp0.copy(), A0.copy(), U0.copy()
    m.covars_ = np.ones((3, 2))         # set and not in params: held fixed
    m.fit(X, lengths)
    np.testing.assert_array_equal(m.covars_, np.ones((3, 2)))
    o = GaussianHMM(3, covariance_type="spherical", n_iter=6, tol=0.0, params="stm",
                    init_params="", implementation="scaling")
    o.startprob_, o.transmat_, o.means_, o.covars_ = sp0.copy(), A0.copy(), U0.copy(), np.ones(3)
    o.fit(X, lengths)
    np.testing.assert_allclose(m.transmat_, o.transmat_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.startprob_, o.startprob_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.means_, o.means_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(m.history_, o.monitor_.history, rtol=1e-12)


def test_warm_start_continues_and_cold_start_repeats():
    h = coupled(seed=5)
    X, _ = h.sample(200, random_state=3)
    m = mf.ContextHMM(3, 2, lag=2, context="both", max_iter=3, bw_max_iter=5, tol=None,
                      random_state=0, progress=False)
    m.fit(X)
    first = (m.means_.copy(), m.transmat_.copy(), m.history_.copy())
    with pytest.warns(UserWarning, match="will be overwritten"):   # hmmlearn's warning
        m.fit(X)     # warm_start=False: initialised again, the same run
    np.testing.assert_array_equal(m.means_, first[0])
    np.testing.assert_array_equal(m.history_, first[2])
    m.set_params(warm_start=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)    # nothing is re-initialised
        m.fit(X)
    assert m.bw_n_iter_ == 0 and m.n_iter_ == 3
    assert m.history_[0] >= first[2][-1] - 1e-8 * abs(first[2][-1])
    assert np.all(np.diff(m.history_) >= 0)


# ------------------------------------------------------------------------------------------
# hmmlearn's verbs

def test_score_score_samples_predict_proba_and_infer_agree():
    h = coupled(seed=6)
    X = np.concatenate([h.sample(T, random_state=T)[0] for T in (40, 25, 60)])
    lengths = [40, 25, 60]
    for method in ("structured", "naive"):
        r = h.infer(X, lengths, method=method)
        assert isinstance(r, HMMInferenceResult) and isinstance(r, InferenceResult)
        assert r.bound.shape == (3,) and r.converged.dtype == bool and r.method == method
        assert r.n_iter.shape == (3,) and r.posteriors.shape == (125, 3) and r.tol == h.infer_tol
        np.testing.assert_array_equal(r.lengths, lengths)
        total = h.score(X, lengths, method=method)
        lp, post = h.score_samples(X, lengths, method=method)
        assert total == lp == pytest.approx(r.bound.sum(), rel=1e-14)
        np.testing.assert_array_equal(post, r.posteriors)
        np.testing.assert_array_equal(h.predict_proba(X, lengths, method=method), post)
        np.testing.assert_allclose(post.sum(1), 1.0, atol=1e-12)
    assert h.infer(X, lengths).potentials.shape == (125, 3)
    ex = h.infer(X, lengths, method="exact")
    assert ex.posteriors is None and np.all(ex.converged)
    assert np.all(h.infer(X, lengths).bound <= ex.bound + 1e-9)


def test_decode_with_zero_context_is_hmmlearns_viterbi():
    h = coupled(seed=7, cscale=0.0)
    X = np.concatenate([h.sample(T, random_state=T)[0] for T in (50, 30)])
    lengths = [50, 30]
    o = oracle_of(h)
    lp, path = h.decode(X, lengths)
    lp_o, path_o = o.decode(X, lengths, algorithm="viterbi")
    np.testing.assert_array_equal(path, path_o)
    assert lp == pytest.approx(lp_o, rel=1e-12)
    np.testing.assert_array_equal(h.predict(X, lengths), path)
    # 'map': the argmax of each marginal, which equals hmmlearn's smoothing decoder
    np.testing.assert_array_equal(h.decode(X, lengths, algorithm="map")[1],
                                  o.decode(X, lengths, algorithm="map")[1])


def test_decode_log_prob_is_the_joint_of_the_path_under_the_context_model():
    h = coupled(seed=8, cscale=1.0)
    T = 9
    X, S = h.sample(T, random_state=0)
    p = R.params_of(h)
    for algorithm in ("viterbi", "map"):
        for method in ("structured", "naive"):
            lp, path = h.decode(X, algorithm=algorithm, method=method)
            assert lp == pytest.approx(R.log_prior(p, path) + R.log_emission(p, X, path),
                                       rel=1e-12)
    # Viterbi on the chain Q finds Q's most probable path: check it against enumeration of Q
    r = h.infer(X)
    P = h._params()
    sp, A = P.startprob, P.transmat
    paths = np.array(R.all_paths(3, T))
    logq = (np.log(sp)[paths[:, 0]] + np.log(A)[paths[:, :-1], paths[:, 1:]].sum(1)
            + r.potentials[np.arange(T), paths].sum(1))
    np.testing.assert_array_equal(h.decode(X)[1], paths[int(np.argmax(logq))])
    # and it is a good path: the decoded states match the truth mostly
    assert np.mean(h.predict(X) == S) > 0.5


def test_sample_defaults_and_random_state():
    h = coupled(seed=9, random_state=3)
    X, S = h.sample()
    assert X.shape == (1, 2) and S.shape == (1,)
    a, b = h.sample(20), h.sample(20)
    np.testing.assert_array_equal(a[0], b[0])      # the constructor's seed, each call
    c = h.sample(20, random_state=4)
    assert not np.array_equal(a[0], c[0])
    with pytest.raises(ValueError, match="'n_samples' parameter must be an int in the range \\[1,"):
        h.sample(0)


def test_unconverged_solves_warn():
    h = coupled(seed=10, cscale=1.5)
    X, _ = h.sample(100, random_state=0)
    with pytest.warns(ConvergenceWarning, match=r"1 of 1 solves did not converge.*max_iter"):
        r = h.infer(X, max_iter=1)
    assert not r.converged[0] and r.n_iter[0] == 1
    h.set_params(infer_max_iter=1)
    for call in (lambda: h.score(X), lambda: h.score_samples(X), lambda: h.predict(X),
                 lambda: h.predict_proba(X), lambda: h.decode(X), lambda: h.infer(X)):
        with pytest.warns(ConvergenceWarning, match="infer_max_iter"):
            call()
    h.set_params(infer_max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert h.infer(X).converged[0]


def test_n_features_comes_from_the_data_or_the_means():
    X = np.random.default_rng(0).normal(size=(60, 3))
    m = mf.ContextHMM(2, max_iter=1, bw_max_iter=1, tol=None, progress=False,
                      random_state=0).fit(X)
    assert m.means_.shape == (2, 3) and m.n_features is None
    assert np.isfinite(m.score(X))
    with pytest.raises(ValueError, match="X must have 3 columns"):
        m.score(X[:, :2])
    with pytest.raises(ValueError, match="X has 3 columns but n_features=2"):
        mf.ContextHMM(2, 2, progress=False).fit(X)


# ------------------------------------------------------------------------------------------
# persistence

def test_save_and_load_round_trip_bit_identically(tmp_path):
    h = coupled(seed=11)
    X = np.concatenate([h.sample(T, random_state=T)[0] for T in (60, 40)])
    lengths = [60, 40]
    m = mf.ContextHMM(3, lag=2, context="both", max_iter=3, bw_max_iter=3, tol=None,
                      random_state=np.random.default_rng(1), n_threads=1, progress=False)
    m.fit(X, lengths)
    path = m.save(tmp_path / "hmm")
    back = load(path)
    assert type(back) is mf.ContextHMM
    assert back.get_params().keys() == m.get_params().keys()
    for k in ("startprob_", "transmat_", "means_", "right_means_", "left_means_", "history_"):
        np.testing.assert_array_equal(getattr(back, k), getattr(m, k))
    assert (back.n_iter_, back.bw_n_iter_, back.converged_, back.n_features_in_) == \
        (m.n_iter_, m.bw_n_iter_, m.converged_, m.n_features_in_)
    for method in ("structured", "naive", "exact"):
        assert back.score(X, lengths, method=method) == m.score(X, lengths, method=method)
    np.testing.assert_array_equal(back.score_samples(X, lengths)[1],
                                  m.score_samples(X, lengths)[1])
    np.testing.assert_array_equal(back.infer(X, lengths).bound, m.infer(X, lengths).bound)
    np.testing.assert_array_equal(back.predict(X, lengths), m.predict(X, lengths))
    # a model whose parameters were assigned (never fitted) round-trips as well
    path = h.save(tmp_path / "set")
    assert load(path).score(X, lengths) == h.score(X, lengths)


# ------------------------------------------------------------------------------------------
# extreme data (issue 14): the history never decreases, the numbers stay right

@pytest.mark.parametrize("offset, scale", [(1e8, 1.0), (1e17, 1.0), (0.0, 1e17), (1e17, 1e15)])
def test_fit_on_data_far_from_zero_never_decreases(offset, scale):
    rng = np.random.default_rng(0)
    base = np.concatenate([rng.normal(size=(60, 2)) + 3 * (k % 3) for k in range(4)])
    X = offset + scale * base
    m = mf.ContextHMM(3, 2, lag=2, context="both", max_iter=8, bw_max_iter=8, tol=None,
                      random_state=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m.fit(X)
    assert np.all(np.isfinite(m.history_)) and m.n_iter_ >= 2
    for part in (m.history_[: m.bw_n_iter_], m.history_[m.bw_n_iter_:]):
        assert np.all(np.diff(part) >= 0), np.diff(part)
    # unit-variance data near 1e8 is scored as accurately as the same data near 0: the
    # log-likelihood per sample is that of a Gaussian fit (about -2.8 nats for D = 2); near
    # 1e17 float64 holds two values 16 apart, so the learned variances fall to min_covar,
    # where a density is at most 1 / sqrt(2 pi min_covar) per feature
    if scale == 1.0:
        per_step = m.history_[m.bw_n_iter_ - 1] / len(X)
        if offset == 1e8:
            assert -4.0 < per_step < -2.0
        else:
            np.testing.assert_array_equal(m.covars_, m.min_covar)
            assert per_step <= -np.log(2 * np.pi * m.min_covar) + 1e-9
        ref = mf.ContextHMM(3, 2, lag=2, context="both", max_iter=8, bw_max_iter=8, tol=None,
                            random_state=0, progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            ref.fit(base)
        if offset == 1e8:    # X keeps ~8 significant digits of base
            np.testing.assert_allclose(m.history_[:3], ref.history_[:3], rtol=1e-5)


def test_answers_do_not_depend_on_the_data_origin():
    # translating the data and means_ together leaves the model unchanged; the starting points
    # of structured and naive mean field (the first-order posterior drops the couplings, whose
    # split between tables depends on the origin) are taken with every table centred, so the
    # answers are the same up to rounding.  The kernel fed raw coordinates differs on this instance
    # (by 18 nats for the link start alone: -0.14 at the origin, -18.7 shifted).
    rng = np.random.default_rng(1001)
    h = mf.ContextHMM(3, 2, lag=2, context="both", progress=False)
    h.means_ = 2.0 * rng.normal(size=(3, 2))
    A = rng.random((3, 3)) + 2 * np.eye(3)
    h.transmat_ = A / A.sum(1, keepdims=True)
    h.right_means_, h.left_means_ = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    X, _ = h.sample(40, random_state=1)
    for c in (np.array([1e3, -2e3]), np.array([1e6, 1e6])):
        g = clone(h)
        g.means_ = h.means_ + c
        g.transmat_, g.right_means_, g.left_means_ = h.transmat_, h.right_means_, h.left_means_
        for method in ("structured", "naive", "exact"):
            assert g.score(X + c, method=method) == pytest.approx(h.score(X, method=method),
                                                                   rel=1e-9), (c, method)
        np.testing.assert_allclose(g.predict_proba(X + c), h.predict_proba(X), atol=1e-6)

def _split_pair(table, c, seed=7, lengths=(40, 2, 9)):
    """A model, its twin with c added to ``table`` (right_means_ or left_means_), data from the
    model and the same data with c added to every output whose mean has that table's term."""
    rng = np.random.default_rng(seed)
    h = mf.ContextHMM(3, 2, lag=2, context="both", progress=False)
    h.means_ = 2.0 * rng.normal(size=(3, 2))
    A = rng.random((3, 3)) + 2 * np.eye(3)
    h.transmat_ = A / A.sum(1, keepdims=True)
    h.right_means_, h.left_means_ = 1.5 * rng.normal(size=(3, 2)), 1.5 * rng.normal(size=(3, 2))
    parts = [h.sample(T, random_state=T)[0] for T in lengths]
    parts[0][5, 1] = np.nan
    g = clone(h)
    for name in ("means_", "transmat_", "right_means_", "left_means_"):
        setattr(g, name, getattr(h, name))
    setattr(g, table, getattr(h, table) + c)
    Y = []
    for x in parts:
        y, T = x.copy(), len(x)
        y[np.arange(T) + 2 < T if table == "right_means_" else np.arange(T) >= 2] += c
        Y.append(y)
    return h, g, np.concatenate(parts), np.concatenate(Y), list(lengths)


@pytest.mark.parametrize("table", ["right_means_", "left_means_"])
def test_answers_do_not_depend_on_how_a_constant_is_split_between_tables(table):
    # adding c to a context table and to every output whose mean has that table's term (right:
    # t + lag inside the sequence, left: t - lag inside it) leaves every residual x_t - m_t, and
    # so the model, unchanged; each table is centred on its own, so the answers are the same up
    # to rounding, over several sequences (each with its own ends) and with a missing value
    c = np.array([30.0, -50.0])
    h, g, X, Y, lengths = _split_pair(table, c)
    for method in ("structured", "naive", "exact"):
        assert g.score(Y, lengths, method=method) == pytest.approx(
            h.score(X, lengths, method=method), rel=1e-10), method
    np.testing.assert_allclose(g.predict_proba(Y, lengths), h.predict_proba(X, lengths),
                               atol=1e-8)


@pytest.mark.parametrize("table", ["right_means_", "left_means_"])
def test_fit_does_not_depend_on_how_a_constant_is_split_between_tables(table):
    # fit's first mean-field E-step runs the structured solver's starts: in the coordinates of
    # every table centred, as inference, so the fit of the twin model is the same fit with c on
    # the table (warm_start: both begin at their own parameters)
    # (on this instance the fit's bound depended on the split by 16 nats before the centring)
    c = np.array([30.0, -50.0])
    h, g, X, Y, lengths = _split_pair(table, c, seed=4, lengths=(200, 2, 9))
    for m in (h, g):
        m.set_params(warm_start=True, max_iter=3, tol=None, infer_tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        h.fit(X, lengths)
        g.fit(Y, lengths)
    np.testing.assert_allclose(g.history_, h.history_, rtol=1e-9)
    np.testing.assert_allclose(g.transmat_, h.transmat_, atol=1e-8)
    np.testing.assert_allclose(getattr(g, table) - c, getattr(h, table), atol=1e-7)
    np.testing.assert_allclose(g.means_, h.means_, atol=1e-7)


def test_fit_statistics_of_the_centred_solve_are_those_of_fit_coordinates():
    # the E-step that runs the starts is solved with every table centred and its M-step
    # statistics mapped back (g = g_c + H c): they equal the statistics computed directly in
    # fit's coordinates at the same chain Q (a warm start from its potentials, no sweep)
    h, _, X, _, lengths = _split_pair("right_means_", np.zeros(2))
    Xc, offsets = h._check_X(X, lengths)
    P = h._params()
    Xs = np.ascontiguousarray(Xc - np.nanmean(Xc, axis=0))
    r = solve_from_starts(h._problem(), P, Xs, offsets)
    d = solve(h._problem(max_iter=0), P, Xs, offsets, "structured", want_stats=True,
              init=r.logpot)
    np.testing.assert_allclose(d.bound, r.bound, rtol=1e-11)
    np.testing.assert_allclose(d.H, r.H, rtol=1e-11, atol=1e-9)
    np.testing.assert_allclose(d.g, r.g, rtol=1e-9, atol=1e-8)
    # the centring moved something: the statistics in the centred coordinates differ
    Pc, centre = centred(P, h.lag, h.context, Xs.shape, offsets)
    rc = solve(h._problem(max_iter=0), Pc, np.ascontiguousarray(Xs - centre), offsets,
               "structured", want_stats=True, init=r.logpot)
    assert np.max(np.abs(rc.g - r.g)) > 1.0
