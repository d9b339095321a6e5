"""The exact bipartite noisy-OR engine against brute-force enumeration over every disease state,
the package's own enumeration (``BeliefNet.exact_log_likelihood``), closed forms of degenerate
cases, and its refusals."""
import numpy as np
import pytest
import scipy.sparse

import mfengine as mf
from mfengine.sbn import _exact_noisy_or
from mfengine.sbn._exact_noisy_or import bipartite_blocks, exact_bipartite


@pytest.fixture(params=["merged", "cliques"])
def tree(request, monkeypatch):
    """Run a test with the engine's default tree (small components as one table, small
    cliques merged) and with the elimination cliques kept apart (only a clique contained in
    its neighbour merged), so that the message passing between tables is exercised."""
    if request.param == "cliques":
        monkeypatch.setattr(_exact_noisy_or, "_MERGE_WIDTH", 0)
    return request.param


# ----------------------------------------------------------------------------- the oracle
def enumerate_exact(h_disease, h_finding, W_fd, e):
    """ln P(e) and P(d_j = 1 | e) for one case by summing the joint over all 2**n_diseases
    disease states: ln P(d) + sum over recorded findings of ln P(f | d), written from the
    model's definition (slow, obviously right)."""
    W = W_fd.toarray() if scipy.sparse.issparse(W_fd) else np.asarray(W_fd, dtype=float)
    nd = h_disease.size
    D = ((np.arange(2**nd)[:, None] >> np.arange(nd)) & 1).astype(float)
    with np.errstate(divide="ignore"):
        log_prior = np.where(D == 1, np.log(-np.expm1(-h_disease)), -h_disease).sum(axis=1)
        z = h_finding + D @ W.T                       # each state's finding activations
        log_on, log_off = np.log(-np.expm1(-z)), -z
    rec = ~np.isnan(e)
    log_joint = log_prior + np.where(e[rec] == 1, log_on[:, rec], log_off[:, rec]).sum(axis=1)
    top = log_joint.max()
    if top == -np.inf:
        return -np.inf, np.full(nd, np.nan)
    weights = np.exp(log_joint - top)
    log_p = top + np.log(weights.sum())
    return log_p, (weights[:, None] * D).sum(axis=0) / weights.sum()


def random_net(rng, nd, nf, density, weight=(0.05, 3.0), prior=(0.01, 0.4), leak=(0.005, 0.3)):
    W = rng.uniform(*weight, (nf, nd)) * (rng.random((nf, nd)) < density)
    hd = -np.log1p(-rng.uniform(*prior, nd))
    hf = rng.uniform(*leak, nf)
    return hd, hf, W


def random_evidence(rng, n_cases, nf, p=(0.4, 0.35, 0.25)):
    return rng.choice([0.0, 1.0, np.nan], size=(n_cases, nf), p=list(p))


def check_against_enumeration(hd, hf, W, E, lp_rtol=0.0, **kw):
    """ln P(e) to 1e-12 (plus ``lp_rtol`` relative, for ln P in the thousands) and every
    marginal to 1e-12, case by case."""
    log_p, marg, info = exact_bipartite(hd, hf, W, E, **kw)
    for i, e in enumerate(E):
        want_lp, want_m = enumerate_exact(hd, hf, W, e)
        np.testing.assert_allclose(log_p[i], want_lp, rtol=lp_rtol, atol=1e-12)
        np.testing.assert_allclose(marg[i], want_m, rtol=0, atol=1e-12)
    return log_p, marg, info


# ----------------------------------------------------------------------------- random nets
@pytest.mark.parametrize("seed", range(12))
def test_random_nets_match_enumeration(seed, tree):
    rng = np.random.default_rng(seed)
    nd = int(rng.integers(8, 15))
    nf = int(rng.integers(10, 31))
    hd, hf, W = random_net(rng, nd, nf, density=rng.uniform(0.08, 0.5))
    E = random_evidence(rng, 4, nf)
    _, _, info = check_against_enumeration(hd, hf, scipy.sparse.csr_matrix(W), E)
    assert np.all(info["n_positive"] == (E == 1).sum(axis=1))
    assert np.all(info["n_negative"] == (E == 0).sum(axis=1))


def test_random_nets_cover_every_shape(tree):
    """Across many small random cases the engine meets singletons, private parents, shared
    parents and several components in one case; all agree with enumeration."""
    rng = np.random.default_rng(100)
    seen = set()
    for _ in range(40):
        nd = int(rng.integers(8, 13))
        nf = int(rng.integers(10, 25))
        hd, hf, W = random_net(rng, nd, nf, density=rng.uniform(0.1, 0.35))
        E = random_evidence(rng, 2, nf)
        _, _, info = check_against_enumeration(hd, hf, W, E)
        seen.update(f"comp{min(c, 3)}" for c in info["n_components"])
        seen.update(f"width{min(w, 5)}" for w in info["width"])
    assert {"comp1", "comp2", "comp3", "width0", "width1", "width3", "width5"} <= seen


def test_dense_weights_sparse_weights_and_read_only_inputs_agree():
    rng = np.random.default_rng(7)
    hd, hf, W = random_net(rng, 10, 20, 0.3)
    E = random_evidence(rng, 5, 20)
    a = exact_bipartite(hd, hf, W, E)
    for arr in (hd, hf, W, E):
        arr.setflags(write=False)
    for Wx in (W, scipy.sparse.csr_matrix(W), scipy.sparse.csc_matrix(W),
               scipy.sparse.coo_array(W)):
        b = exact_bipartite(hd, hf, Wx, E)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_duplicate_entries_add_and_explicit_zeros_are_no_edge():
    rng = np.random.default_rng(17)
    hd, hf, W = random_net(rng, 8, 12, 0.4)
    E = random_evidence(rng, 4, 12)
    r, c = np.nonzero(W)
    half = W[r, c] / 2
    # every weight in two halves, plus explicit zeros on every absent edge
    zr, zc = np.nonzero(W == 0)
    coo = scipy.sparse.coo_matrix((np.r_[half, half, np.zeros(zr.size)],
                                   (np.r_[r, r, zr], np.r_[c, c, zc])), shape=W.shape)
    a = exact_bipartite(hd, hf, W, E)
    b = exact_bipartite(hd, hf, coo, E)
    np.testing.assert_allclose(b[0], a[0], rtol=1e-14)
    np.testing.assert_allclose(b[1], a[1], atol=1e-15)
    np.testing.assert_array_equal(b[2]["width"], a[2]["width"])


def test_cases_in_blocks_and_no_cases(monkeypatch):
    """The negative findings are absorbed a block of cases at a time: blocks of 3 give the
    answers of one block; no case gives empty answers."""
    rng = np.random.default_rng(18)
    hd, hf, W = random_net(rng, 9, 15, 0.3)
    E = random_evidence(rng, 11, 15)
    a = exact_bipartite(hd, hf, W, E)
    monkeypatch.setattr(_exact_noisy_or, "_BLOCK", 3)
    b = exact_bipartite(hd, hf, W, E)
    np.testing.assert_allclose(b[0], a[0], rtol=1e-14)
    np.testing.assert_allclose(b[1], a[1], atol=1e-15)
    log_p, marg, info = exact_bipartite(hd, hf, W, np.zeros((0, 15)))
    assert log_p.shape == (0,) and marg.shape == (0, 9) and info["width"].shape == (0,)


def test_missing_mask_equals_nan():
    rng = np.random.default_rng(3)
    hd, hf, W = random_net(rng, 9, 25, 0.3)
    E = random_evidence(rng, 6, 25)
    mask = np.isnan(E)
    filled = np.where(mask, rng.integers(0, 2, E.shape), E)     # anything where masked
    a = exact_bipartite(hd, hf, W, E)
    b = exact_bipartite(hd, hf, W, filled, missing=mask)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    # a (n_findings,) mask applies to every case
    col = mask[0]
    c = exact_bipartite(hd, hf, W, filled, missing=col)
    d = exact_bipartite(hd, hf, W, np.where(col, np.nan, filled))
    np.testing.assert_array_equal(c[0], d[0])
    np.testing.assert_array_equal(c[1], d[1])


def test_agrees_with_the_package_enumeration():
    """ln P(e) against ``BeliefNet.exact_log_likelihood`` (its own enumeration) on diagnosis
    nets from the package's generator, with unrecorded findings."""
    for seed in range(3):
        net = mf.datasets.make_diagnosis_net(12, 40, 4, random_state=seed)
        b = bipartite_blocks(net.W, net.h, net.visible, net.activation)
        X = net.sample(6, random_state=seed + 10)
        missing = np.random.default_rng(seed).random(X.shape) < 0.3
        log_p, _, _ = exact_bipartite(b.h_disease, b.h_finding, b.W_fd, X, missing=missing)
        want = net.exact_log_likelihood(X, missing)
        np.testing.assert_allclose(log_p, want, rtol=0, atol=1e-12)


def test_agrees_with_the_package_enumeration_on_a_dense_net():
    rng = np.random.default_rng(11)
    nd, nf = 10, 18
    hd, hf, Wfd = random_net(rng, nd, nf, 0.4)
    n = nd + nf
    W = np.zeros((n, n))
    W[nd:, :nd] = Wfd
    net = mf.BeliefNet(W, np.concatenate([hd, hf]), np.arange(nd, n), activation="noisy_or")
    E = random_evidence(rng, 8, nf)
    log_p, _, _ = exact_bipartite(hd, hf, Wfd, E)
    want = net.exact_log_likelihood(np.nan_to_num(E), np.isnan(E))
    np.testing.assert_allclose(log_p, want, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- degenerate
def test_no_positive_findings_closed_form():
    rng = np.random.default_rng(5)
    hd, hf, W = random_net(rng, 30, 60, 0.2)
    E = random_evidence(rng, 4, 60, p=(0.6, 0.0, 0.4))
    log_p, marg, info = exact_bipartite(hd, hf, W, E)
    for i, e in enumerate(E):
        neg = e == 0
        s = W[neg].sum(axis=0)
        p1 = 1 - np.exp(-hd)
        z = (1 - p1) + p1 * np.exp(-s)                 # each disease's changed normaliser
        np.testing.assert_allclose(log_p[i], -hf[neg].sum() + np.log(z).sum(), rtol=1e-14)
        np.testing.assert_allclose(marg[i], p1 * np.exp(-s) / z, rtol=1e-13)
    assert np.all(info["width"] == 0) and np.all(info["n_components"] == 0)


def test_all_findings_unrecorded_give_the_prior():
    rng = np.random.default_rng(6)
    hd, hf, W = random_net(rng, 25, 40, 0.3)
    log_p, marg, _ = exact_bipartite(hd, hf, W, np.full((2, 40), np.nan))
    np.testing.assert_array_equal(log_p, 0.0)
    np.testing.assert_allclose(marg, np.broadcast_to(1 - np.exp(-hd), marg.shape), rtol=1e-14)
    log_p, marg, _ = exact_bipartite(hd, hf, W, np.zeros((1, 40)), missing=np.ones(40, bool))
    assert log_p[0] == 0.0


def test_every_disease_private():
    """Findings with disjoint parent sets: every positive is its own component, no table."""
    rng = np.random.default_rng(8)
    nd, nf = 12, 6
    W = np.zeros((nf, nd))
    for f in range(nf):
        W[f, 2 * f : 2 * f + 2] = rng.uniform(0.1, 3.0, 2)
    hd = -np.log1p(-rng.uniform(0.01, 0.5, nd))
    hf = rng.uniform(0.005, 0.1, nf)
    E = np.array([[1, 1, 1, 1, 1, 1], [1, 0, 1, np.nan, 0, 1], [0, 1, np.nan, 1, 1, 0.0]])
    _, _, info = check_against_enumeration(hd, hf, W, E)
    np.testing.assert_array_equal(info["n_components"], (E == 1).sum(axis=1))
    np.testing.assert_array_equal(info["n_shared"], 0)
    np.testing.assert_array_equal(info["width"], 0)


def test_one_giant_shared_component(tree):
    """Every finding has every disease as a parent: one component, one table over all of them."""
    rng = np.random.default_rng(9)
    nd, nf = 13, 15
    hd, hf, W = random_net(rng, nd, nf, 1.0)
    E = np.ones((2, nf))
    E[1, ::3] = 0.0
    _, _, info = check_against_enumeration(hd, hf, W, E)
    np.testing.assert_array_equal(info["n_components"], 1)
    np.testing.assert_array_equal(info["width"], nd)
    np.testing.assert_array_equal(info["n_shared"], nd)


def test_chain_of_findings_keeps_the_width_small(tree):
    """Findings f_k with parents {d_k, d_k+1}: a chain, whose elimination cliques are over two
    diseases (by default merged into tables as large as the merging allows)."""
    rng = np.random.default_rng(12)
    nd = 14
    W = np.zeros((nd - 1, nd))
    for k in range(nd - 1):
        W[k, k : k + 2] = rng.uniform(0.2, 2.0, 2)
    hd = -np.log1p(-rng.uniform(0.05, 0.5, nd))
    hf = rng.uniform(0.005, 0.05, nd - 1)
    _, _, info = check_against_enumeration(hd, hf, W, np.ones((1, nd - 1)))
    assert info["width"][0] == (2 if tree == "cliques" else _exact_noisy_or._MERGE_WIDTH)
    assert info["n_shared"][0] == nd - 2
    # with max_width 2 the default tree must keep the cliques apart too
    _, _, info = check_against_enumeration(hd, hf, W, np.ones((1, nd - 1)), max_width=2)
    assert info["width"][0] == 2


def test_positive_finding_with_no_parents():
    rng = np.random.default_rng(10)
    hd, hf, W = random_net(rng, 9, 12, 0.3)
    W[[2, 5]] = 0.0                                        # findings 2 and 5: leak only
    E = random_evidence(rng, 3, 12)
    E[:, [2, 5]] = 1.0
    log_p, _, _ = check_against_enumeration(hd, hf, W, E)
    E2 = E.copy()
    E2[:, 5] = np.nan
    log_p2, _, _ = exact_bipartite(hd, hf, W, E2)
    np.testing.assert_allclose(log_p - log_p2, np.log(-np.expm1(-hf[5])), rtol=1e-13)


def test_evidence_of_probability_zero(tree):
    """A positive finding with no leak whose only parent can never be present."""
    hd = np.array([0.0, 0.3, 0.2])
    hf = np.array([0.0, 0.1, 0.1])
    W = np.array([[1.0, 0, 0], [0, 1.0, 1.0], [0, 0.5, 0.7]])
    log_p, marg, _ = exact_bipartite(hd, hf, W, np.array([[1.0, 1, 1], [0.0, 1, 1]]))
    assert log_p[0] == -np.inf and np.all(np.isnan(marg[0]))
    want_lp, want_m = enumerate_exact(hd, hf, W, np.array([0.0, 1, 1]))
    np.testing.assert_allclose(log_p[1], want_lp, rtol=1e-14)
    np.testing.assert_allclose(marg[1], want_m, atol=1e-14)
    assert marg[1, 0] == 0.0


def test_many_positives_with_tiny_probabilities_do_not_underflow(tree):
    """24 positives, leaks below 1e-35, priors below 1e-200 and strong links: P(e) far below the
    smallest double, posteriors tiny and large; still to full precision in log space."""
    rng = np.random.default_rng(13)
    nd, nf = 14, 24
    hd, hf, W = random_net(rng, nd, nf, 0.25, weight=(2.0, 30.0), prior=(1e-250, 1e-200),
                           leak=(1e-40, 1e-35))
    W[np.arange(nf), rng.integers(0, nd, nf)] = 5.0         # every finding has a parent
    E = np.ones((2, nf))
    E[1, :4] = 0.0
    log_p, marg, _ = check_against_enumeration(hd, hf, W, E, lp_rtol=1e-14)
    assert np.all(log_p < -745)                             # exp(log_p) underflows
    assert np.all(np.isfinite(marg)) and marg.max() > 0.5 and 0 < marg.min() < 1e-100
    for i, e in enumerate(E):                               # the tiny ones to relative precision
        np.testing.assert_allclose(marg[i], enumerate_exact(hd, hf, W, e)[1], rtol=1e-10)


def test_components_are_independent():
    """Two disjoint random sub-nets side by side: ln P(e) adds, the marginals are each one's."""
    rng = np.random.default_rng(14)
    hd1, hf1, W1 = random_net(rng, 7, 12, 0.4)
    hd2, hf2, W2 = random_net(rng, 6, 10, 0.5)
    W = scipy.sparse.block_diag([W1, W2]).tocsr()
    E1, E2 = random_evidence(rng, 3, 12), random_evidence(rng, 3, 10)
    a = exact_bipartite(hd1, hf1, W1, E1)
    b = exact_bipartite(hd2, hf2, W2, E2)
    c = exact_bipartite(np.r_[hd1, hd2], np.r_[hf1, hf2], W, np.hstack([E1, E2]))
    np.testing.assert_allclose(c[0], a[0] + b[0], rtol=1e-14)
    np.testing.assert_allclose(c[1], np.hstack([a[1], b[1]]), atol=1e-15)


# ----------------------------------------------------------------------------- width limit
def test_intractable_case_is_refused_with_the_size(tree):
    rng = np.random.default_rng(15)
    nd, nf = 12, 5
    hd, hf, W = random_net(rng, nd, nf, 1.0)
    E = np.array([[0.0, np.nan, 0, 0, 0], [1, 1, 1, 0, np.nan]])
    exact_bipartite(hd, hf, W, E, max_width=12)
    msg = r"case 1: exact inference needs a table over 12 diseases \(2\*\*12 entries\); " \
          r"max_width is 11"
    with pytest.raises(ValueError, match=msg):
        exact_bipartite(hd, hf, W, E, max_width=11)


def test_width_is_checked_before_any_table_is_allocated():
    """A table over 64 diseases (2**64 entries) could never be allocated: the refusal must
    come first, as a ValueError, at once."""
    nd, nf = 64, 3
    W = np.full((nf, nd), 0.5)
    with pytest.raises(ValueError, match="table over 64 diseases"):
        exact_bipartite(np.full(nd, 0.01), np.full(nf, 0.01), W, np.ones((1, nf)), max_width=60)


# ----------------------------------------------------------------------------- refusals
def _good():
    rng = np.random.default_rng(0)
    hd, hf, W = random_net(rng, 5, 7, 0.5)
    return dict(h_disease=hd, h_finding=hf, W_fd=W, evidence=random_evidence(rng, 2, 7))


@pytest.mark.parametrize("change, exc, match", [
    (dict(h_disease=-np.ones(5)), ValueError, "h_disease must be non-negative"),
    (dict(h_disease=np.full(5, np.nan)), ValueError, "h_disease contains NaN"),
    (dict(h_disease=np.ones((5, 1))), ValueError, r"h_disease must have shape"),
    (dict(h_disease=np.array(["a"] * 5)), TypeError, "h_disease must be a numeric"),
    (dict(h_finding=np.full(7, -0.1)), ValueError, "h_finding must be non-negative"),
    (dict(h_finding=np.ones(6)), ValueError, r"W_fd must have shape \(6, 5\)"),
    (dict(W_fd=-np.ones((7, 5))), ValueError, "W_fd must be non-negative"),
    (dict(W_fd=np.full((7, 5), np.inf)), ValueError, "W_fd contains NaN or infinite"),
    (dict(W_fd=np.ones((7, 4))), ValueError, r"W_fd must have shape \(7, 5\)"),
    (dict(evidence=np.full((2, 7), 0.5)), ValueError, "evidence must hold 0, 1 or NaN"),
    (dict(evidence=np.full((2, 7), np.inf)), ValueError, "evidence contains infinite"),
    (dict(evidence=np.ones(7)), ValueError, "evidence must be a 2-D array"),
    (dict(evidence=np.ones((2, 6))), ValueError, "evidence must have 7 columns"),
    (dict(missing=np.ones((2, 6), bool)), ValueError, "missing must have shape"),
    (dict(missing=np.full((2, 7), 0.5)), TypeError, "missing must be a boolean mask"),
    (dict(max_width=-1), ValueError, "max_width must be an integer"),
    (dict(max_width=2.5), ValueError, "max_width must be an integer"),
    (dict(max_width=True), ValueError, "max_width must be an integer"),
])
def test_bad_input_is_refused_naming_the_argument(change, exc, match):
    kw = {**_good(), **change}
    args = [kw.pop(k) for k in ("h_disease", "h_finding", "W_fd", "evidence")]
    with pytest.raises(exc, match=match):
        exact_bipartite(*args, **kw)


def test_blocks_of_a_diagnosis_net():
    net = mf.datasets.make_diagnosis_net(20, 50, 3, random_state=0)
    b = bipartite_blocks(net.W, net.h, net.visible, net.activation)
    np.testing.assert_array_equal(b.diseases, np.arange(20))
    np.testing.assert_array_equal(b.findings, np.arange(20, 70))
    np.testing.assert_array_equal(b.h_disease, net.h[:20])
    np.testing.assert_array_equal(b.h_finding, net.h[20:])
    np.testing.assert_array_equal(b.W_fd.toarray(), net.W[20:, :20].toarray())
    # indices for visible, and dense weights, give the same blocks
    b2 = bipartite_blocks(net.W.toarray(), net.h, np.arange(20, 70))
    np.testing.assert_array_equal(b2.W_fd.toarray(), b.W_fd.toarray())


def _tiny():
    W = np.zeros((5, 5))
    W[3, 0], W[3, 1], W[4, 1], W[4, 2] = 0.5, 1.0, 0.7, 0.2
    return W, np.full(5, 0.1), np.array([False, False, False, True, True])


@pytest.mark.parametrize("edit, match", [
    (lambda W, h, v: (W, h, v, "sigmoid"), "activation must be 'noisy_or'.*'sigmoid'"),
    (lambda W, h, v: (W.__setitem__((4, 3), 0.3) or W, h, v, "noisy_or"),
     "W: visible unit 4 .* has a visible parent \\(unit 3\\)"),
    (lambda W, h, v: (W.__setitem__((2, 0), 0.3) or W, h, v, "noisy_or"),
     "W: hidden unit 2 .* has a parent \\(unit 0\\)"),
    (lambda W, h, v: (W.__setitem__((0, 3), 0.3) or W, h, v, "noisy_or"),
     "W: hidden unit 0 .* has a parent \\(unit 3\\)"),
    (lambda W, h, v: (W.__setitem__((3, 0), -0.5) or W, h, v, "noisy_or"),
     "W must be non-negative"),
    (lambda W, h, v: (W, -h, v, "noisy_or"), "h must be non-negative"),
    (lambda W, h, v: (W, h[:4], v, "noisy_or"), r"h must have shape \(5,\)"),
    (lambda W, h, v: (W[:4], h, v, "noisy_or"), "W must be square"),
    (lambda W, h, v: (W, h, v[:4], "noisy_or"), "visible must be a boolean mask of shape"),
    (lambda W, h, v: (W, h, np.array([4, 3]), "noisy_or"), "strictly increasing"),
])
def test_blocks_refuse_what_is_not_bipartite_noisy_or(edit, match):
    W, h, v = _tiny()
    bipartite_blocks(W, h, v)
    with pytest.raises(ValueError, match=match):
        bipartite_blocks(*edit(W.copy(), h.copy(), v.copy()))


def test_examples_in_the_docstrings_run():
    import doctest

    result = doctest.testmod(_exact_noisy_or, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0
