"""The NLGBN solver, arrays in and arrays out: every call into the compiled E-step
(:mod:`mfengine.nlgbn._estep`, over ``csrc/mf_nlgbn_estep.c``).

Each function takes the problem record (:class:`mfengine.nlgbn._problem.Network`, or its
kernel layout ``net.flat()``), data already checked (:mod:`mfengine.nlgbn._checks`) and plain
arrays, and returns arrays; none imports, receives or calls back into the estimator.
"""
import numpy as np

from mfengine.nlgbn._checks import _CODE

try:
    from mfengine.nlgbn import _estep
except ImportError as exc:  # pragma: no cover - only on an unbuilt source tree
    raise ImportError(
        "mfengine.nlgbn._estep (the compiled E-step) is missing; build the package with "
        f"'pip install .' ({exc})"
    ) from exc

__all__ = ["prior_state"]


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
