"""The verbs every belief net shares, written once for the layered and the DAG nets.

``BeliefNetModel`` is the base of :class:`~mfengine.sbn.layered.SigmoidBeliefNet` and of
:class:`~mfengine.sbn.dag.BeliefNet` / :class:`~mfengine.sbn.batch.BeliefNetBatch`.  Its verbs
(``score_samples``, ``score``, ``log_likelihood``, ``posterior_marginals``, ``impute``,
``sample_posterior``) are built on four hooks each net provides:

``_solve(X, missing, method=None, ..., keep="all")``
    The checked, reported mean-field solve of ``infer``, in the net's own layout (the layered
    net: one array per layer; the DAG nets: one array over every unit);
``_flat_means(result)``
    That result's means of every unit as one (n_items, n_units) array, in unit order;
``_dag_problem(X, missing)``
    The data's checked ``(DagNets, Items, V, miss)`` (:mod:`mfengine.sbn._problem`) for the
    DAG kernels (the sampler of ``log_likelihood``);
``_draw_states(result, rng, n_samples)``
    Draws from the factorised posterior of ``result``, in the net's layout.
"""

import numpy as np
from sklearn.base import BaseEstimator, DensityMixin

from mfengine._base import PersistMixin, PosteriorMarginalsEstimate, warn_low_marginals_ess
from mfengine._validation import check_flag, check_int, check_random_state
from mfengine.sbn._solve import SAMPLED_METHODS, check_sampling_args, importance

__all__ = ["BeliefNetModel"]


class BeliefNetModel(PersistMixin, DensityMixin, BaseEstimator):
    """The verbs of every belief net of binary units (see the module docstring)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True     # binary data: 0 and 1
        return tags

    def _visible_mask(self):
        """The visible units among all units, in unit order (boolean mask)."""
        raise NotImplementedError

    def sample_posterior(self, X, n_samples=1, missing=None, *, method=None, random_state=None):
        """Draw unit states from the mean-field posterior of each pattern.

        Q is factorised: each free unit is on with probability its mean; visible units keep
        their data, and a missing visible entry is drawn like a hidden unit (from its
        predictive probability).

        Parameters
        ----------
        X : array_like
            Binary data (see ``infer``).
        n_samples : int, default=1
            Draws per pattern.
        missing : array_like of bool, optional
            Missing visible entries (drawn, not kept).
        method : str, optional
            The mean-field method; default the net's ``method``.
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the draws.

        Returns
        -------
        states : list of ndarray, or ndarray
            The states 0.0/1.0: for a ``SigmoidBeliefNet`` one (n_samples, n_patterns,
            sizes[l]) array per layer, top first; for a ``BeliefNet`` (or batch) one array of
            shape (n_samples,) + ``infer(X).mu.shape`` over every unit.
        """
        n_samples = check_int(n_samples, "n_samples", 0, 2**31 - 1)
        rng = check_random_state(random_state)
        if isinstance(method, str) and method in ("exact", "hybrid"):
            raise ValueError(f"method={method!r} gives posterior marginals, not a factorised "
                             "posterior to draw from; use a mean-field method")
        r = self._solve(X, missing, method=method, keep="mu")
        return self._draw_states(r, rng, n_samples)

    def score_samples(self, X, missing=None, *, method=None, n_samples=1000, random_state=None):
        """The mean-field objective of each pattern, or a sampled estimate of ln P(x), in nats.

        Parameters
        ----------
        X : array_like
            Binary data (see ``infer``).
        missing : array_like of bool, optional
            Missing visible entries, marginalised (see ``infer``).
        method : str, optional
            None: the net's ``method``.  A mean-field method ("gaussian" for a
            ``SigmoidBeliefNet``, "sjj", "plefka11", "plefka12", "plefka22"): its objective
            at the solution ("sjj": a lower bound on ln P(x); the Plefka methods: -G, an
            approximation that is not a bound).  "exact" (a ``BeliefNet``): ln P(x) itself
            (see ``infer``).  "importance" or "ais": the sampled estimate of ln P(x)
            (``log_likelihood(X, ...).estimate``).
        n_samples : int, default=1000
            Samples (or annealing chains) per pattern ("importance", "ais" only).
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the samples ("importance", "ais" only).

        Returns
        -------
        score : ndarray
            Per pattern (a batch: per net, or per net and pattern), in nats.
        """
        if isinstance(method, str) and method in SAMPLED_METHODS:
            return self.log_likelihood(X, n_samples, method, random_state,
                                       missing=missing).estimate
        return self._solve(X, missing, method=method, keep="bound").bound

    def score(self, X, y=None, missing=None):
        """The mean of ``score_samples(X)``, in nats per pattern.

        Parameters
        ----------
        X : array_like
            Binary data.
        y : None
            Ignored.
        missing : array_like of bool, optional
            Missing visible entries, marginalised.

        Returns
        -------
        score : float
            The mean objective per pattern, in nats.
        """
        b = self.score_samples(X, missing)
        if b.size == 0:
            raise ValueError("X has no patterns: the mean bound of no pattern is undefined")
        return float(np.mean(b))

    def log_likelihood(self, X, n_samples=1000, method="importance", random_state=None, *,
                       missing=None, n_steps=100, n_threads=None, progress=None):
        """An importance-sampled estimate of ln P(x) per pattern, with its standard error.

        The proposal is the net's mean-field posterior (its ``method``), clipped away from 0
        and 1 and mixed with the prior (80% / 20%, drawn by ancestral sampling with the data
        clamped), so that every importance weight is at most 5 and their variance is finite.
        The estimate is the log of the mean weight, capped at 0 as ln P(x) is: consistent,
        and biased low by about ``stderr**2 / 2``.  Compiled and parallel over patterns;
        each pattern draws from its own stream, so the answer does not depend on
        ``n_threads``.

        Parameters
        ----------
        X : array_like
            Binary data (see ``infer``).
        n_samples : int, default=1000
            Samples per pattern (at least 2); with "ais", annealing chains per pattern.
        method : {"importance", "ais"}, default="importance"
            "importance": importance sampling from the proposal above.  "ais": annealed
            importance sampling (Neal 2001): each chain starts from the clipped mean-field
            posterior and moves to the posterior through ``n_steps`` intermediate
            distributions q^(1 - b) P(h, x)^b (b = (t / n_steps)^2), one Gibbs sweep over the
            hidden (and missing) units at each; dearer by about ``n_steps`` sweeps per chain,
            and far better when the posterior is too sharp for one proposal (nets with
            hundreds of visible units).
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the samples.
        missing : array_like of bool, optional
            Missing visible entries, drawn like hidden units (so marginalised).
        n_steps : int, default=100
            Temperatures of each annealing chain ("ais" only).
        n_threads : int, optional
            OpenMP threads over patterns; default the net's ``n_threads``.
        progress : bool, optional
            Default: the net's ``progress``.

        Returns
        -------
        result : mfengine.LogLikelihoodEstimate
            ``estimate``, ``stderr``, ``ess`` and the mean-field ``bound`` per pattern (shaped
            like ``score_samples(X)``), and ``n_samples``.

        Raises
        ------
        ValueError
            For an unknown ``method`` or ``n_samples`` below 2.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> net = mf.SigmoidBeliefNet([3, 6, 10], weight_scale=2.0, random_state=0)
        >>> X = net.sample(5, random_state=1)
        >>> est = net.log_likelihood(X, n_samples=2000, random_state=0)
        >>> bool(np.all(np.abs(est.estimate - net.exact_log_likelihood(X)) < 5 * est.stderr + 1e-9))
        True
        """
        method, n_samples, n_steps, seed = check_sampling_args(method, n_samples, random_state,
                                                               n_steps)
        progress = check_flag(self.progress if progress is None else progress, "progress")
        n_threads = self.n_threads if n_threads is None else n_threads
        r = self._solve(X, missing, n_threads=n_threads, progress=progress, keep="mu")
        nets, items, _, _ = self._dag_problem(X, missing)
        return importance(nets, items, self._flat_means(r), r.bound, n_samples, seed, n_threads,
                          progress, method, n_steps)

    def posterior_marginals(self, X, missing=None, *, n_samples=1000, random_state=None,
                            n_threads=None, progress=None):
        """Importance-sampled posterior marginals P(unit = 1 | x), with standard errors.

        Self-normalised importance sampling with the proposal of ``log_likelihood`` (the
        net's mean-field posterior, clipped and mixed with the prior): each marginal is
        sum_s w_s x_s / sum_s w_s over the samples' weights w_s, consistent as ``n_samples``
        grows, with the delta-method standard error sqrt(sum_s w_s^2 (x_s - mean)^2) /
        sum_s w_s (and the estimate's rounding bound, (n_samples + 16) ulps of it, added in
        quadrature: see :class:`mfengine.PosteriorMarginalsEstimate`).  Rao-Blackwellised: x_s is the unit's probability of a 1 given sample s's
        other units (its own factor and its children's), not the sampled 0 or 1, so that
        states one flip away from those drawn count too.  Where the mean-field posterior is
        confident and wrong the weights degenerate: ``ess`` then falls towards 1 and the
        standard errors may understate the error (a warning says so below an ess of 10).
        A posterior concentrated on a few states also gives a small ``ess``; its marginals
        are then near 0 or 1 and their errors small.  Compiled and
        parallel over patterns; the answer does not depend on ``n_threads``.

        Parameters
        ----------
        X : array_like
            Binary data (see ``infer``).
        missing : array_like of bool, optional
            Missing visible entries, drawn like hidden units (so marginalised); their
            marginals are estimated too.
        n_samples : int, default=1000
            Samples per pattern (at least 2).
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the samples.
        n_threads : int, optional
            OpenMP threads over patterns; default the net's ``n_threads``.
        progress : bool, optional
            Default: the net's ``progress``.

        Returns
        -------
        result : mfengine.PosteriorMarginalsEstimate
            ``mean`` and ``stderr`` of shape ``score_samples(X).shape + (n_units,)``, every
            unit in unit order (an observed unit reads its value, with standard error 0),
            ``ess`` per pattern, ``n_samples``, and ``log_likelihood``: the
            ``LogLikelihoodEstimate`` of ln P(x) from the same samples.

        Raises
        ------
        ValueError
            For ``n_samples`` below 2 or malformed data, naming the argument.

        Warns
        -----
        RuntimeWarning
            When some pattern's effective sample size is below 10.

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> net = mf.SigmoidBeliefNet([3, 6, 10], weight_scale=2.0, random_state=0)
        >>> X = net.sample(5, random_state=1)
        >>> est = net.posterior_marginals(X, n_samples=4000, random_state=0)
        >>> exact = net.to_dag().infer(X, method="exact").mu
        >>> est.mean.shape, bool(np.all(np.abs(est.mean - exact) <= 5 * est.stderr + 1e-9))
        ((5, 19), True)
        """
        _, n_samples, _, seed = check_sampling_args("importance", n_samples, random_state)
        progress = check_flag(self.progress if progress is None else progress, "progress")
        n_threads = self.n_threads if n_threads is None else n_threads
        r = self._solve(X, missing, n_threads=n_threads, progress=progress, keep="mu")
        nets, items, _, _ = self._dag_problem(X, missing)
        est, pred, pred_se = importance(nets, items, self._flat_means(r), r.bound, n_samples,
                                        seed, n_threads, progress, predict=True,
                                        predict_stderr=True, rao_blackwell=True)
        warn_low_marginals_ess(est.ess, n_samples)
        shape = np.shape(est.estimate) + (pred.shape[-1],)
        return PosteriorMarginalsEstimate(mean=pred.reshape(shape),
                                          stderr=pred_se.reshape(shape), ess=est.ess,
                                          n_samples=n_samples, log_likelihood=est)

    def impute(self, X, missing, *, method=None, n_samples=1000, random_state=None):
        """Fill in missing entries with their posterior predictive probability of a 1.

        Each missing entry is replaced by its unit's mean in the mean-field solve, or with
        ``method="importance"`` by an importance-sampled estimate of the exact probability.
        A missing visible unit with no observed descendant (every missing pixel of a layered
        net, a missing finding of a diagnosis net) sums out of the solve: its mean is the
        predictive one from its parents' solved means, sigmoid(h + W mu), or for noisy-OR
        1 - e^{-h} prod (1 - mu + mu e^{-W}); with "gaussian" it is the unit's ``xi``, the
        Gaussian method's predictive.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary data; entries where ``missing`` is True may hold NaN or any finite value.
        missing : array_like of bool, shape (n_patterns, n_visible) or (n_visible,)
            The entries to fill in.
        method : str, optional
            Default: the net's ``method``.  "importance": P(x_j = 1 | observed) estimated by
            self-normalised importance sampling with the proposal of ``log_likelihood``
            (built from the net's ``method``): E[f(z_j) | observed] when no observed unit
            lies below unit j, else E[S_j | observed]; consistent as ``n_samples`` grows.
        n_samples : int, default=1000
            Samples per pattern ("importance" only).
        random_state : None, int or numpy.random.Generator, default=None
            Seed of the samples ("importance" only).

        Returns
        -------
        X_filled : ndarray of shape (n_patterns, n_visible)
            ``X`` as float64, the observed entries unchanged and the missing ones in [0, 1].

        Examples
        --------
        >>> import numpy as np
        >>> import mfengine as mf
        >>> net = mf.SigmoidBeliefNet([3, 6, 10], random_state=0)
        >>> X = net.sample(4, random_state=1)
        >>> miss = np.zeros(X.shape, dtype=bool); miss[:, :5] = True
        >>> filled = net.impute(X, miss)
        >>> bool(np.all((filled[miss] >= 0) & (filled[miss] <= 1)))
        True
        """
        if missing is None:
            raise ValueError("missing must mark the entries to impute (a boolean mask), got None")
        visible = self._visible_mask()
        if isinstance(method, str) and method == "importance":
            _, n_samples, _, seed = check_sampling_args(method, n_samples, random_state)
            r = self._solve(X, missing, keep="mu")
            nets, items, V, miss = self._dag_problem(X, missing)
            _, pred = importance(nets, items, self._flat_means(r), r.bound, n_samples, seed,
                                 self.n_threads, check_flag(self.progress, "progress"),
                                 predict=True)
            return np.where(miss.astype(bool), pred[:, visible], V)
        r = self._solve(X, missing, method=method, keep="mu")
        _, _, V, miss = self._dag_problem(X, missing, items=False)
        out = np.where(miss.astype(bool), self._flat_means(r)[:, visible], V)
        if not np.all(np.isfinite(out)):     # the junction tree leaves them out
            raise ValueError(f"method={r.method!r} on a diagnosis net gives the diseases' "
                             "posteriors only, not the unrecorded findings'; impute with "
                             "method='importance'")
        return out
