"""The NLGBN solver, arrays in and arrays out: every call into the compiled E-step
(:mod:`mfengine.nlgbn._estep`, over ``csrc/mf_nlgbn_estep.c``).

Each function takes the problem record (:class:`mfengine.nlgbn._problem.Network`, or its
kernel layout ``net.flat()``), data already checked (:mod:`mfengine.nlgbn._checks`) and plain
arrays, and returns arrays; none imports, receives or calls back into the estimator.
"""
import numpy as np

from mfengine.nlgbn._checks import _CODE, _INTP_MAX, _check_data

try:
    from mfengine.nlgbn import _estep
except ImportError as exc:  # pragma: no cover - only on an unbuilt source tree
    raise ImportError(
        "mfengine.nlgbn._estep (the compiled E-step) is missing; build the package with "
        f"'pip install .' ({exc})"
    ) from exc

__all__ = ["HINT", "unit_output", "prior_state", "solve", "infer_posterior", "split_layers",
           "predictive_mean", "warm_estep", "partition_estep", "importance",
           "ancestral_sample", "draw_posterior"]

#: What to try when a per-pattern solve stops on its budget.
HINT = "raise infer_max_iter (or pass max_iter=) or loosen infer_tol (or pass tol=)"


def unit_output(kind, x):
    """The output f(x) of units of type ``kind`` at pre-activations ``x``."""
    if kind == "linear":
        return x
    if kind == "binary":
        return (x >= 0.0).astype(np.float64)
    if kind == "rectified":
        return np.maximum(x, 0.0)
    from scipy.special import ndtr

    return ndtr(x)


def prior_state(net, n):
    """mu at the prior means (a top-down pass with the outputs' means) and log sigma^2 at
    log psi^2, for n patterns of the network ``net``: arrays (n, n_hidden)."""
    mus, lvs = [], []
    M_prev = None
    with np.errstate(over="ignore", invalid="ignore"):
        for l in range(len(net.sizes) - 1):
            mean = net.biases[l].copy()
            if M_prev is not None:
                mean = mean + net.weights[l - 1] @ M_prev
            lv = np.log(net.variances[l])
            if not np.all(np.isfinite(mean)):
                raise ValueError(
                    f"the prior mean of layer {l} overflows: weights_[{l - 1}] or biases_ "
                    "are too large"
                )
            mus.append(mean)
            lvs.append(lv)
            M_prev = np.empty_like(mean)
            kinds = np.array([_CODE[k] for k in net.units[l]])
            for code in np.unique(kinds):
                cols = kinds == code
                M_prev[cols] = _estep.moments(int(code), np.ascontiguousarray(mean[cols]),
                                              np.ascontiguousarray(lv[cols]), 0)["M"]
    mu = np.concatenate(mus)
    lv = np.concatenate(lvs)
    try:
        return np.tile(mu, (n, 1)), np.tile(lv, (n, 1))
    except MemoryError:
        raise MemoryError(f"the posterior of {n} patterns needs {16 * n * mu.size} bytes") from None


def solve(flat, X, mu, lv, tol, max_sweeps, n_threads, want_stats=False, inputs="X", miss=None):
    """The compiled E-step for the network of kernel layout ``flat`` (``Network.flat()``), in
    place on mu and lv.  Returns (bound, n_sweeps, converged, stats); raises ValueError when a
    pattern's bound is not a finite number (``inputs`` names the arguments that may be to
    blame besides the parameters)."""
    n = X.shape[0]
    nblocks = (n + _estep.BLOCK - 1) // _estep.BLOCK
    bound = np.empty(n)
    n_sweeps = np.zeros(n, dtype=np.intp)
    converged = np.zeros(n, dtype=np.uint8)
    try:
        stats = np.zeros((nblocks if want_stats else 0, flat["stat_size"]))
    except MemoryError:
        raise MemoryError(f"the E-step's statistics need {8 * nblocks * flat['stat_size']} "
                          "bytes; fit on fewer patterns at a time") from None
    H = mu.shape[1]
    _estep.estep(
        X, mu, lv, flat["sizes"], flat["offset"], flat["woff"], flat["types"],
        flat["WT"], flat["bias"], flat["prec"], flat["acoef"], flat["soff"],
        float(tol), float(tol) / (10.0 * max(H, 1)), int(max_sweeps),
        bound, n_sweeps, converged, stats, int(n_threads), miss,
    )
    bad = ~np.isfinite(bound)
    if np.any(bad):
        raise ValueError(
            f"the bound is not a finite number for {int(bad.sum())} of {n} patterns (first: "
            f"row {int(np.flatnonzero(bad)[0])} of X): {inputs} or the model's parameters "
            "(weights_, biases_, variances_) are too extreme for float64"
        )
    return bound, n_sweeps, converged.astype(bool), stats


def infer_posterior(net, X, miss, tol, max_iter, n_threads):
    """Each pattern's E-step from the prior means: ``(mu, lv, bound, n_sweeps, converged)``,
    mu and lv (n_patterns, n_hidden) the solution's means and log variances."""
    mu, lv = prior_state(net, X.shape[0])
    bound, sweeps, conv, _ = solve(net.flat(), X, mu, lv, tol, max_iter, n_threads, miss=miss)
    return mu, lv, bound, sweeps, conv


def split_layers(net, X, miss, mu, lv):
    """``NLGBN.infer``'s answer laid out per layer, top first: the means and the standard
    deviations of q, the visible layer's a copy of X with the predictive means at its missing
    entries (and standard deviations 0)."""
    offs = np.concatenate([[0], np.cumsum(net.sizes[:-1])])
    L = len(net.sizes)
    if miss is not None:
        X = np.where(miss.astype(bool), predictive_mean(net, mu, lv), X)
    # the visible layer's copy of the data: never the caller's array itself
    means = [mu[:, offs[l]:offs[l + 1]] for l in range(L - 1)] + [np.array(X)]
    sig = np.exp(0.5 * lv)
    sigmas = [sig[:, offs[l]:offs[l + 1]] for l in range(L - 1)] + [np.zeros_like(X)]
    return means, sigmas


def predictive_mean(net, mu, lv):
    """E_q[b + W f(h)] of the visible layer: the posterior predictive mean, (n, n_visible)."""
    L = len(net.sizes)
    lo = sum(net.sizes[:L - 2])
    m, s = mu[:, lo:lo + net.sizes[L - 2]], lv[:, lo:lo + net.sizes[L - 2]]
    M = np.empty_like(m)
    kinds = np.array([_CODE[k] for k in net.units[L - 2]])
    for code in np.unique(kinds):
        cols = kinds == code
        M[:, cols] = _estep.moments(int(code), np.ascontiguousarray(m[:, cols]).ravel(),
                                    np.ascontiguousarray(s[:, cols]).ravel(),
                                    0)["M"].reshape(m.shape[0], -1)
    return net.biases[-1] + M @ net.weights[-1].T


def warm_estep(net, X, miss, state, tol, max_sweeps, n_threads):
    """One E-step of EM with statistics, warm-started from ``state`` = (mu, lv), which it
    leaves unchanged (None: the prior means).  Returns ``(bound, converged, stats, (mu, lv))``
    with the new posteriors."""
    mu, lv = prior_state(net, X.shape[0]) if state is None else (state[0].copy(), state[1].copy())
    bound, _, conv, stats = solve(net.flat(), X, mu, lv, tol, max_sweeps, n_threads,
                                  want_stats=True, miss=miss)
    return bound, conv, stats, (mu, lv)


def partition_estep(block, state, shared, _):
    """One partition's E-step of a data-parallel fit (run where the block is, by
    ``mfengine._dask.Partitions.step``; NaN entries are missing), warm-started from its
    previous posteriors (the state, kept there).  ``shared``: ``(net, settings)``, the
    network and the solve's ``tol``, ``max_sweeps`` and ``n_threads``.  Returns the block's
    summed bound, summed statistics and convergence flags, and its new posteriors."""
    net, settings = shared
    Xb, miss = _check_data(np.asarray(block), None, net.sizes[-1])
    bound, conv, stats, state = warm_estep(net, Xb, miss, state, **settings)
    return (float(bound.sum()), stats.sum(axis=0), conv), state


def importance(net, X, miss, mu, lv, n_samples, seed, n_threads, marginals=False):
    """The compiled importance sampler of ln p(x), its proposal built on the mean-field
    posteriors (mu, lv): ``(estimate, stderr, ess)`` per pattern, and with ``marginals`` also
    every unit's sampled posterior ``(mean, mean_se, sd)``, each (n, n_units) in unit order."""
    f = net.flat()
    n = X.shape[0]
    est, se, ess = np.empty(n), np.empty(n), np.empty(n)
    extra = ()
    if marginals:
        try:
            extra = tuple(np.empty((n, sum(net.sizes))) for _ in range(3))
        except MemoryError:
            raise MemoryError(f"the marginals of {n} patterns need "
                              f"{24 * n * sum(net.sizes)} bytes") from None
    n_bad = _estep.importance(X, miss, mu, lv, f["sizes"], f["offset"], f["woff"], f["types"],
                              f["WT"], f["bias"], f["prec"], f["acoef"], f["soff"],
                              n_samples, seed, est, se, ess, n_threads, *extra)
    if n_bad:
        raise ValueError(f"the importance weights are not finite numbers for {n_bad} of {n} "
                         "patterns: X or the model's parameters are too extreme for float64")
    return (est, se, ess) + extra


def ancestral_sample(net, n_samples, rng, return_all):
    """Ancestral sampling: the visible vectors (n_samples, sizes[-1]), or with ``return_all``
    every layer's pre-activations, top first."""
    need = 8 * n_samples * (sum(net.sizes) if return_all else 2 * max(net.sizes))
    if n_samples * max(net.sizes) > _INTP_MAX // 16:
        raise ValueError(f"n_samples={n_samples} is too large: {need} bytes of samples")
    layers = []
    out_prev = None
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            for l, size in enumerate(net.sizes):
                mean = np.broadcast_to(net.biases[l], (n_samples, size))
                if out_prev is not None:
                    mean = mean + out_prev @ net.weights[l - 1].T
                x = mean + np.sqrt(net.variances[l]) * rng.standard_normal((n_samples, size))
                if not np.all(np.isfinite(x)):
                    raise ValueError(
                        f"sampling layer {l} overflows float64: the model's weights_, "
                        "biases_ or variances_ are too large"
                    )
                layers.append(x if return_all or l == len(net.sizes) - 1 else None)
                out_prev = np.empty_like(x)
                kinds = np.array(net.units[l])
                for kind in set(net.units[l]):
                    cols = kinds == kind
                    out_prev[:, cols] = unit_output(kind, x[:, cols])
    except MemoryError:
        raise MemoryError(f"n_samples={n_samples} needs about {need} bytes") from None
    return layers if return_all else layers[-1]


def draw_posterior(net, means, sigmas, miss, n_samples, rng):
    """Draws from the factorised Gaussian posterior laid out per layer (``split_layers``): one
    (n_samples, n_patterns, sizes[l]) array per layer; the visible layer repeats the data,
    with draws from N(b + W f(h), psi**2) at the missing entries ``miss``."""
    drawn = [m[None] + s[None] * rng.standard_normal((n_samples,) + m.shape)
             for m, s in zip(means[:-1], sigmas[:-1])]
    vis = np.repeat(means[-1][None], n_samples, axis=0)
    if miss is not None:
        f = np.empty_like(drawn[-1])
        for kind in set(net.units[-2]):
            cols = np.array(net.units[-2]) == kind
            f[..., cols] = unit_output(kind, drawn[-1][..., cols])
        draw = (net.biases[-1] + f @ net.weights[-1].T
                + np.sqrt(net.variances[-1]) * rng.standard_normal(vis.shape))
        vis = np.where(miss.astype(bool)[None], draw, vis)
    return drawn + [vis]
