"""Nonlinear Gaussian belief networks (Frey & Hinton): the model and variational EM.

Unit i has a Gaussian pre-activation ``x_i ~ N(b_i + sum_j w_ij f_j(x_j), psi_i^2)`` whose
parents j are the units of the layer above; its output f_i(x_i) is linear, binary (step),
rectified or sigmoidal (the cumulative Gaussian Phi).  Layers are listed top first; the last
layer is visible (linear) and the data are its pre-activations.

Inference uses the factorised Gaussian q(x_i) = N(mu_i, sigma_i^2) over hidden units and the
bound F of Frey & Hinton (eqs. 8 and 11); learning is variational EM: the compiled E-step
(``_estep``) raises F over every pattern's (mu, log sigma^2) by coordinate ascent and
accumulates the sufficient statistics of eq. 13; the M-step solves one linear system per layer
for the incoming weights and biases (eq. 14, by SVD) and then sets the model variances (eq. 15).
"""
import numbers
from dataclasses import dataclass

import numpy as np

from mfengine._progress import progress_bar
from mfengine._validation import (
    as_float_matrix,
    check_random_state,
    check_sizes,
    effective_n_threads,
    sizes_from_biases,
)

try:
    from mfengine.nlgbn import _estep
except ImportError as exc:  # pragma: no cover - only on an unbuilt source tree
    raise ImportError(
        "mfengine.nlgbn._estep (the compiled E-step) is missing; build the package with "
        f"'pip install .' ({exc})"
    ) from exc

__all__ = ["NLGBN", "NLGBNInference", "UNIT_TYPES"]

#: The unit types, in the order of their codes in the compiled kernel.
UNIT_TYPES = ("linear", "binary", "rectified", "sigmoidal")
_CODE = {name: code for code, name in enumerate(UNIT_TYPES)}

#: Smallest model variance of a hidden unit after an M-step.
MIN_HIDDEN_VARIANCE = 1e-6


def _unit_output(kind, x):
    if kind == "linear":
        return x
    if kind == "binary":
        return (x >= 0.0).astype(np.float64)
    if kind == "rectified":
        return np.maximum(x, 0.0)
    from scipy.special import ndtr

    return ndtr(x)


@dataclass
class NLGBNInference:
    """The variational posterior for a batch of patterns.

    Attributes
    ----------
    mu, sigma : list of ndarray
        One (n_patterns, sizes[l]) array per layer of the means and standard deviations of the
        Gaussian q over the units' pre-activations; in the visible layer mu is the data and
        sigma is 0.
    bound : ndarray (n_patterns,)
        The bound F (nats) at the solution.
    n_sweeps : ndarray of int (n_patterns,)
        Sweeps over the hidden units taken per pattern.
    """

    mu: list
    sigma: list
    bound: np.ndarray
    n_sweeps: np.ndarray

    def __repr__(self):
        n = self.bound.shape[0]
        return (
            f"NLGBNInference(n_patterns={n}, "
            f"mean_bound={self.bound.mean() if n else float('nan'):.6g})"
        )


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
        np.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    return float(value)


class NLGBN:
    """A layered nonlinear Gaussian belief network (Frey & Hinton).

    Parameters
    ----------
    sizes : sequence of int
        Units per layer, top layer first; the last entry is the number of visible units.  At
        least two layers.
    units : None, str or sequence
        Unit types among ``"linear"``, ``"binary"``, ``"rectified"`` and ``"sigmoidal"``.  A
        sequence of one entry per layer, each a type name (the whole layer) or a sequence of
        ``sizes[l]`` names (one per unit); a single name applies to every hidden layer.  The
        visible layer is linear (the data are its pre-activations).  Default: rectified hidden
        units.
    weight_scale : float, default 1.0
        Initial weights are drawn from N(0, weight_scale**2 / fan_in); biases start at 0 and
        model variances at 1.
    random_state : None, int or numpy.random.Generator
        Seed of the initial weights.

    Attributes
    ----------
    sizes : tuple of int
    units : tuple of tuple of str
        The type of every unit, layer by layer.
    weights : list of ndarray
        ``weights[l]`` has shape ``(sizes[l+1], sizes[l])``: from layer l to layer l+1.
    biases, variances : list of ndarray
        ``biases[l]`` and ``variances[l]`` (the model noise variances psi^2) have shape
        ``(sizes[l],)``.

    Examples
    --------
    >>> import mfengine as mf
    >>> X = mf.datasets.make_continuous_bars(200, random_state=0)
    >>> g = mf.NLGBN([1, 16, 36], units=["binary", "rectified", "linear"], random_state=0)
    >>> history = g.fit(X, n_iter=5, progress=False)
    >>> g.score_samples(X).shape
    (200,)
    """

    def __init__(self, sizes, units=None, weight_scale=1.0, random_state=None):
        sizes = self._check_sizes(sizes)
        if not (
            isinstance(weight_scale, numbers.Real)
            and not isinstance(weight_scale, bool)
            and np.isfinite(weight_scale)
            and weight_scale >= 0
        ):
            raise ValueError(f"weight_scale must be a finite non-negative number, got {weight_scale!r}")
        units = self._check_units(units, sizes)
        rng = check_random_state(random_state)
        weights = [
            rng.normal(0.0, weight_scale / np.sqrt(sizes[l]), size=(sizes[l + 1], sizes[l]))
            for l in range(len(sizes) - 1)
        ]
        biases = [np.zeros(n) for n in sizes]
        variances = [np.ones(n) for n in sizes]
        self._set(units, weights, biases, variances)

    # ------------------------------------------------------------------ construction
    _check_sizes = staticmethod(check_sizes)

    @staticmethod
    def _check_units(units, sizes):
        L = len(sizes)
        if units is None:
            units = ["rectified"] * (L - 1) + ["linear"]
        elif isinstance(units, str):
            units = [units] * (L - 1) + ["linear"]
        if not hasattr(units, "__len__") or len(units) != L:
            raise ValueError(f"units must give one entry per layer ({L} layers), got {units!r}")
        out = []
        for l, spec in enumerate(units):
            names = [spec] * sizes[l] if isinstance(spec, str) else list(spec)
            if len(names) != sizes[l]:
                raise ValueError(
                    f"units[{l}] must be a type name or {sizes[l]} type names, got {spec!r}"
                )
            for name in names:
                if name not in _CODE:
                    raise ValueError(
                        f"units[{l}] contains unknown unit type {name!r}; choose from {UNIT_TYPES}"
                    )
            out.append(tuple(names))
        if any(name != "linear" for name in out[-1]):
            raise ValueError(
                "units of the visible (last) layer must be 'linear': the data are the visible "
                "units' pre-activations"
            )
        return tuple(out)

    @classmethod
    def from_params(cls, weights, biases, variances, units=None):
        """Build a network from its parameters (the arrays are copied).

        Parameters
        ----------
        weights : list of ndarray
            ``weights[l]`` of shape (sizes[l+1], sizes[l]).
        biases, variances : list of ndarray
            One (sizes[l],) array per layer; variances must be positive.
        units : None, str or sequence
            As in the constructor.
        """
        weights, biases, variances = list(weights), list(biases), list(variances)
        if len(weights) < 1 or len(biases) != len(weights) + 1 or len(variances) != len(biases):
            raise ValueError(
                "need one weight matrix between adjacent layers and one bias and one variance "
                f"vector per layer; got {len(weights)} weight matrices, {len(biases)} bias "
                f"vectors and {len(variances)} variance vectors"
            )
        sizes = sizes_from_biases(biases)
        W, B, V = [], [], []
        for l, w in enumerate(weights):
            w = np.array(w, dtype=np.float64, order="C")
            if w.shape != (sizes[l + 1], sizes[l]):
                raise ValueError(
                    f"weights[{l}] must have shape {(sizes[l + 1], sizes[l])} to match biases, got {w.shape}"
                )
            if not np.all(np.isfinite(w)):
                raise ValueError(f"weights[{l}] contains NaN or infinite values")
            W.append(w)
        for l, (b, v) in enumerate(zip(biases, variances)):
            b = np.array(b, dtype=np.float64)
            v = np.array(v, dtype=np.float64)
            if not np.all(np.isfinite(b)):
                raise ValueError(f"biases[{l}] contains NaN or infinite values")
            if v.shape != (sizes[l],):
                raise ValueError(f"variances[{l}] must have shape {(sizes[l],)}, got {v.shape}")
            if not np.all(np.isfinite(v)) or np.any(v <= 0):
                raise ValueError(f"variances[{l}] must be finite and positive")
            B.append(b)
            V.append(v)
        net = cls.__new__(cls)
        net._set(cls._check_units(units, sizes), W, B, V)
        return net

    def _set(self, units, weights, biases, variances):
        self.units = units
        self.weights = weights
        self.biases = biases
        self.variances = variances

    @property
    def sizes(self):
        return tuple(b.shape[0] for b in self.biases)

    def copy(self):
        """A deep copy of the network."""
        return type(self).from_params(self.weights, self.biases, self.variances, self.units)

    def __repr__(self):
        kinds = [names[0] if len(set(names)) == 1 else "mixed" for names in self.units]
        return f"NLGBN(sizes={list(self.sizes)}, units={kinds})"

    # ------------------------------------------------------------------ kernel plumbing
    def _flat(self):
        """The kernel's view of the parameters (see _estep's module docstring)."""
        sizes = np.array(self.sizes, dtype=np.intp)
        L = len(sizes)
        offset = np.zeros(L + 1, dtype=np.intp)
        offset[1:] = np.cumsum(sizes)
        U = int(offset[-1])
        woff = np.zeros(max(L - 1, 1), dtype=np.intp)
        for l in range(1, L - 1):
            woff[l] = woff[l - 1] + sizes[l - 1] * sizes[l]
        WT = np.concatenate([np.ascontiguousarray(w.T).ravel() for w in self.weights])
        bias = np.concatenate(self.biases)
        for l, v in enumerate(self.variances):
            if not np.all(np.isfinite(v)) or np.any(v <= 0):
                raise ValueError(f"variances[{l}] must be finite and positive")
        prec = 1.0 / np.concatenate(self.variances)
        acoef = np.zeros(U)
        for l, w in enumerate(self.weights):
            pc = prec[offset[l + 1]:offset[l + 2]]
            acoef[offset[l]:offset[l + 1]] = 0.5 * ((w * w) * pc[:, None]).sum(axis=0)
        types = np.array([_CODE[name] for names in self.units for name in names], dtype=np.int8)
        soff = np.zeros(max(L - 1, 1), dtype=np.intp)
        base = 4 * U
        for l in range(L - 1):
            soff[l] = base
            base += (sizes[l] + 1) ** 2 + sizes[l + 1] * (sizes[l] + 1)
        for name, arr in (("weights", WT), ("biases", bias)):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"the network's {name} contain NaN or infinite values")
        return dict(sizes=sizes, offset=offset, woff=woff, types=types, WT=WT, bias=bias,
                    prec=prec, acoef=acoef, soff=soff, stat_size=base)

    def _initial_state(self, n):
        """mu at the prior means (a top-down pass with the outputs' means) and log sigma^2 at
        log psi^2, for n patterns: arrays (n, n_hidden)."""
        mus, lvs = [], []
        M_prev = None
        for l in range(len(self.sizes) - 1):
            mean = self.biases[l].copy()
            if M_prev is not None:
                mean = mean + self.weights[l - 1] @ M_prev
            lv = np.log(self.variances[l])
            mus.append(mean)
            lvs.append(lv)
            M_prev = np.array([
                _estep.moments(_CODE[k], np.array([m]), np.array([s]), 0)["M"][0]
                for k, m, s in zip(self.units[l], mean, lv)
            ])
        mu = np.ascontiguousarray(np.broadcast_to(np.concatenate(mus), (n, len(np.concatenate(mus)))))
        lv = np.ascontiguousarray(np.broadcast_to(np.concatenate(lvs), mu.shape))
        return mu.copy(), lv.copy()

    def _estep(self, X, mu, logvar, tol, max_sweeps, n_threads, want_stats=False, flat=None):
        flat = self._flat() if flat is None else flat
        n = X.shape[0]
        H = mu.shape[1]
        bound = np.empty(n)
        n_sweeps = np.zeros(n, dtype=np.intp)
        nblocks = (n + _estep.BLOCK - 1) // _estep.BLOCK
        stats = np.zeros((nblocks if want_stats else 0, flat["stat_size"]))
        status = _estep.estep(
            X, mu, logvar, flat["sizes"], flat["offset"], flat["woff"], flat["types"],
            flat["WT"], flat["bias"], flat["prec"], flat["acoef"], flat["soff"],
            float(tol), float(tol) / (10.0 * max(H, 1)), int(max_sweeps),
            bound, n_sweeps, stats, effective_n_threads(n_threads),
        )
        if status != 0:
            raise FloatingPointError(
                "the E-step met a non-finite number (the parameters or the data are too extreme)"
            )
        return bound, n_sweeps, stats

    def _check_X(self, X):
        X = as_float_matrix(X, "X", n_cols=self.sizes[-1])
        return X

    # ------------------------------------------------------------------ public API
    def sample(self, n, random_state=None, return_all=False):
        """Draw n patterns by ancestral sampling.

        Parameters
        ----------
        n : int
        random_state : None, int or numpy.random.Generator
        return_all : bool, default False
            Also return every layer's pre-activations.

        Returns
        -------
        X : ndarray (n, sizes[-1])
            Visible vectors.  With ``return_all``, a list of (n, sizes[l]) pre-activation
            arrays, one per layer (the last is X).
        """
        n = _check_int(n, "n", 0)
        rng = check_random_state(random_state)
        layers = []
        out_prev = None
        for l, size in enumerate(self.sizes):
            mean = np.broadcast_to(self.biases[l], (n, size))
            if out_prev is not None:
                mean = mean + out_prev @ self.weights[l - 1].T
            x = mean + np.sqrt(self.variances[l]) * rng.standard_normal((n, size))
            layers.append(x)
            out_prev = np.empty_like(x)
            for kind in set(self.units[l]):
                cols = np.array([k == kind for k in self.units[l]])
                out_prev[:, cols] = _unit_output(kind, x[:, cols])
        return layers if return_all else layers[-1]

    def infer(self, X, tol=1e-6, max_sweeps=1000, n_threads=None):
        """Maximise the bound over the variational posterior of each pattern.

        Parameters
        ----------
        X : array-like (n_patterns, sizes[-1])
        tol : float, default 1e-6
            A pattern stops when a sweep over its hidden units raises its bound by less than
            ``tol`` nats.
        max_sweeps : int, default 1000
        n_threads : None or int
            OpenMP threads (default: OMP_NUM_THREADS or every core).

        Returns
        -------
        NLGBNInference
            Means and standard deviations of q per layer, the bound per pattern and the
            sweep counts.
        """
        X = self._check_X(X)
        tol = _check_positive(tol, "tol")
        max_sweeps = _check_int(max_sweeps, "max_sweeps", 0)
        mu, lv = self._initial_state(X.shape[0])
        bound, sweeps, _ = self._estep(X, mu, lv, tol, max_sweeps, n_threads)
        offs = np.cumsum((0,) + self.sizes[:-1])
        mus = [mu[:, offs[l]:offs[l] + s] for l, s in enumerate(self.sizes[:-1])] + [X]
        sig = np.sqrt(np.exp(lv))
        sigmas = [sig[:, offs[l]:offs[l] + s] for l, s in enumerate(self.sizes[:-1])]
        sigmas.append(np.zeros_like(X))
        return NLGBNInference(mu=mus, sigma=sigmas, bound=bound, n_sweeps=sweeps)

    def score_samples(self, X, tol=1e-6, max_sweeps=1000, n_threads=None):
        """The variational lower bound on ``log p(x)`` of each pattern, in nats.

        Parameters as in :meth:`infer`.

        Returns
        -------
        ndarray (n_patterns,)
        """
        return self.infer(X, tol=tol, max_sweeps=max_sweeps, n_threads=n_threads).bound

    def bound_at(self, X, mu, sigma, n_threads=None):
        """The bound F (eq. 11) of each pattern at a given variational posterior.

        Parameters
        ----------
        X : array-like (n_patterns, sizes[-1])
        mu, sigma : array-like (n_patterns, n_hidden)
            Means and standard deviations of q over the hidden units, layers concatenated top
            first.

        Returns
        -------
        ndarray (n_patterns,)
        """
        X = self._check_X(X)
        H = sum(self.sizes[:-1])
        mu = as_float_matrix(mu, "mu", n_cols=H).copy()
        sigma = as_float_matrix(sigma, "sigma", n_cols=H)
        if mu.shape[0] != X.shape[0] or sigma.shape[0] != X.shape[0]:
            raise ValueError("mu and sigma must have one row per pattern of X")
        if np.any(sigma <= 0):
            raise ValueError("sigma must be positive")
        lv = np.ascontiguousarray(2.0 * np.log(sigma))
        return self._estep(X, mu, lv, 1.0, 0, n_threads)[0]

    def fit(self, X, n_iter=100, tol=1e-5, max_sweeps=50, min_variance=0.01, progress=True,
            n_threads=None):
        """Variational EM (Frey & Hinton, section 2.3).

        Each iteration is an M-step followed by an E-step warm-started from the previous
        E-step's posterior for the same pattern (the first E-step starts at the prior means).

        Parameters
        ----------
        X : array-like (n_patterns, sizes[-1])
        n_iter : int, default 100
            EM iterations.
        tol : float, default 1e-5
            E-step stopping tolerance per pattern, nats per sweep.
        max_sweeps : int, default 50
            Largest number of sweeps per pattern and E-step (a partial E-step still raises the
            bound, so EM still climbs).
        min_variance : float, default 0.01
            Visible model variances are kept at or above this (Frey & Hinton, section 4).
        progress : bool, default True
            Show a progress bar.
        n_threads : None or int

        Returns
        -------
        history : ndarray (n_iter + 1,)
            The mean bound per pattern (nats) after the first E-step and after every
            iteration; it never decreases.
        """
        X = self._check_X(X)
        if X.shape[0] == 0:
            raise ValueError("X must hold at least one pattern")
        n_iter = _check_int(n_iter, "n_iter", 0)
        tol = _check_positive(tol, "tol")
        max_sweeps = _check_int(max_sweeps, "max_sweeps", 1)
        min_variance = _check_positive(min_variance, "min_variance")
        mu, lv = self._initial_state(X.shape[0])
        bound, _, stats = self._estep(X, mu, lv, tol, max_sweeps, n_threads, want_stats=True)
        history = [bound.mean()]
        with progress_bar(total=n_iter, desc="NLGBN EM", disable=not progress) as bar:
            for _ in range(n_iter):
                self._m_step(stats.sum(axis=0) / X.shape[0], min_variance)
                bound, _, stats = self._estep(X, mu, lv, tol, max_sweeps, n_threads,
                                              want_stats=True)
                history.append(bound.mean())
                bar.update(1)
                bar.set_postfix(bound=f"{history[-1]:.3f}")
        self.last_posterior_ = (mu, lv)
        return np.array(history)

    def _m_step(self, st, min_variance):
        """Weights and biases by eq. 14 (one SVD least-squares solve per layer, shared by its
        units), then the model variances by eq. 15 with the mean squared error evaluated at the
        new weights; ``st`` holds the sufficient statistics averaged over patterns."""
        sizes = self.sizes
        U = sum(sizes)
        offset = np.concatenate([[0], np.cumsum(sizes)])
        mean_mu, mean_mu2 = st[:U], st[U:2 * U]
        mean_s2, mean_v = st[2 * U:3 * U], st[3 * U:4 * U]
        flat_soff = self._flat()["soff"]
        L = len(sizes)
        new_b = [None] * L
        new_w = [None] * (L - 1)
        new_v = [None] * L
        sl = slice(offset[0], offset[1])
        new_b[0] = mean_mu[sl].copy()
        new_v[0] = mean_mu2[sl] - mean_mu[sl] ** 2 + mean_s2[sl]
        for l in range(L - 1):
            P, C = sizes[l], sizes[l + 1]
            base = flat_soff[l]
            AA = st[base:base + (P + 1) ** 2].reshape(P + 1, P + 1)
            AA = 0.5 * (AA + AA.T)
            CC = st[base + (P + 1) ** 2:base + (P + 1) ** 2 + C * (P + 1)].reshape(C, P + 1)
            bvec = np.concatenate([[0.0], mean_v[offset[l]:offset[l + 1]]])
            K = AA + np.diag(bvec)
            Wt = np.linalg.lstsq(K, CC.T, rcond=None)[0]          # (P + 1, C)
            new_b[l + 1] = Wt[0].copy()
            new_w[l] = np.ascontiguousarray(Wt[1:].T)
            cs = slice(offset[l + 1], offset[l + 2])
            # E[(mu_i - n_i)^2] at the new weights, + sum_k w_ik^2 E[v_k] + E[sigma_i^2]
            mse = mean_mu2[cs] - 2.0 * np.einsum("kc,ck->c", Wt, CC) + np.einsum("kc,kj,jc->c", Wt, AA, Wt)
            new_v[l + 1] = mse + (Wt * Wt * bvec[:, None]).sum(axis=0) + mean_s2[cs]
        for l in range(L):
            floor = min_variance if l == L - 1 else MIN_HIDDEN_VARIANCE
            new_v[l] = np.maximum(new_v[l], floor)
        for l in range(L):
            if not (np.all(np.isfinite(new_b[l])) and np.all(np.isfinite(new_v[l]))):
                raise FloatingPointError("the M-step produced non-finite parameters")
        self.weights = new_w
        self.biases = new_b
        self.variances = new_v
