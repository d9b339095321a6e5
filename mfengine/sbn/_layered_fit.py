"""Learning of the layered sigmoid net (``SigmoidBeliefNet.fit``, ``partial_fit`` and the
data-parallel fit of a dask array): the compiled epochs of the Gaussian method, and the DAG
methods' loop (:mod:`mfengine.sbn._learn`) on the net's own DAG form.  A mixin of
:class:`~mfengine.sbn.layered.SigmoidBeliefNet`, kept apart from its inference verbs."""
import copy

import numpy as np

from mfengine._base import warn_unconverged
from mfengine._validation import (as_float_matrix, check_callback, check_flag, check_int,
                                  check_random_state, check_tol, check_value, Options)
from mfengine.sbn._checks import check_layered_data
from mfengine.sbn._learn import fit_items, schedule, stop
from mfengine.sbn._solve import DAG_METHODS, METHODS, check_solve_args, inner_tol_for

__all__ = ["LayeredLearning"]

# The paper's schedule (Saul & Jordan, section 3): 0.02 for the first half of the epochs
# (four of eight), then 0.005.
PAPER_RATES = (0.02, 0.005)


class LayeredLearning:
    """``fit``, ``partial_fit`` and the data-parallel fit of a layered sigmoid net."""

    def fit(self, X, y=None, missing=None):
        """Learn the weights and biases by gradient ascent on the mean-field objective.

        Each step solves the mean-field equations for ``batch_size`` patterns, then moves the
        parameters along the exact gradient of the objective at those solutions, scaled by
        ``learning_rate / batch_size``.  With "gaussian" each epoch runs compiled, without the
        GIL; the DAG methods train ``to_dag()`` (see ``BeliefNet.fit``) and copy the result
        back.

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary training data.
        y : None
            Ignored.
        missing : array_like of bool, optional
            Missing visible entries: marginalised ("gaussian" leaves their terms out of the
            bound, the DAG methods sum them out exactly).

        Returns
        -------
        self : SigmoidBeliefNet
            The fitted net; ``history_`` holds the mean bound of each epoch.

        Warns
        -----
        ConvergenceWarning
            When ``tol`` is given and the last epoch still gained more than ``tol``.
        """
        method = check_value(self.method, "method", [Options(*METHODS)], "SigmoidBeliefNet")
        warm = check_flag(self.warm_start, "warm_start")
        check_callback(self.callback)
        drawn = not warm or "weights_" not in vars(self)
        if drawn:
            n_visible = as_float_matrix(X, "X", allow_nan=True).shape[1]
            self._init_params(n_visible)
        self._check_params()
        V, miss = self._check_data(X, missing, min_rows=1)
        self.n_features_in_ = V.shape[1]
        if method in DAG_METHODS:
            if drawn:
                from mfengine.sbn.sjj import MAX_NET_SCALE
                with np.errstate(over="ignore"):
                    total = sum(float(np.abs(W).sum()) for W in self.weights_)
                if not total <= MAX_NET_SCALE:   # the DAG kernels' range (sjj.MAX_NET_SCALE)
                    raise ValueError(
                        f"weight_scale={self.weight_scale!r} draws starting weights too large to "
                        f"evaluate in double precision (sum of |weights_| = {total:.3g}, above "
                        f"{MAX_NET_SCALE:.3g}): lower it")
            try:
                self._fit_dag(V, miss)
                return self
            except OverflowError as exc:
                if not drawn:
                    raise
                raise OverflowError(f"{exc} (the starting weights were drawn with "
                                    f"weight_scale={self.weight_scale!r}: lower it)") from exc
        n = V.shape[0]
        rates, batch_size, tol, itol, imax, progress, rng = self._fit_settings()
        from mfengine._progress import progress_bar
        from mfengine.sbn import _gaussian

        if check_flag(self.init_visible_biases, "init_visible_biases"):
            self._init_visible_biases(V, miss)
        Vk = np.where(np.isfinite(V), V, 0.0) if miss is not None else V
        state = np.full((n, sum(self._sizes())), 0.5)
        history = []
        batches_per_epoch = (n + batch_size - 1) // batch_size
        bar = progress_bar(total=len(rates) * batches_per_epoch, desc="fit", disable=not progress,
                           unit="batch")
        try:
            for epoch, lr in enumerate(rates):
                self._check_params()   # a callback may have replaced a parameter
                if not warm:
                    state[:, : self.n_hidden] = 0.5
                order = rng.permutation(n).astype(np.intp)
                total = _gaussian.fit_epoch(self.weights_, self.biases_, Vk, miss, order,
                                            float(lr), batch_size, itol, inner_tol_for(itol),
                                            imax, state, bar.update)
                history.append(total / n)
                bar.set_postfix(bound=f"{history[-1]:.3f}")
                if self.callback is not None:
                    self.callback(epoch, self, history[-1])
                if stop(history, tol):
                    break
        finally:
            bar.close()
        self._check_params()
        return self._finish_fit(history, tol, len(rates))

    def _fit_settings(self):
        """fit's schedule and solve settings, validated: (rates, batch_size, tol, infer_tol,
        infer_max_iter, progress, random generator)."""
        return (schedule(self.max_iter, self.learning_rate, PAPER_RATES),
                check_int(self.batch_size, "batch_size", 1, 2**31 - 1),
                check_tol(self.tol, "tol", allow_none=True),
                check_tol(self.infer_tol, "infer_tol"),
                check_int(self.infer_max_iter, "infer_max_iter", 1, 2**31 - 1),
                check_flag(self.progress, "progress"),
                check_random_state(self.random_state))

    def _init_visible_biases(self, V, miss):
        """The paper's first pass: visible biases at the logits of the pixel means."""
        n = V.shape[0]
        if miss is None:
            p = V.mean(axis=0)
        else:
            obs = 1.0 - miss
            p = (np.where(obs > 0, V, 0.0)).sum(axis=0) / np.maximum(obs.sum(axis=0), 1.0)
        p = np.clip(p, 1.0 / (n + 2), 1.0 - 1.0 / (n + 2))
        self.biases_[-1] = np.log(p) - np.log1p(-p)

    def partial_fit(self, X, y=None, missing=None):
        """One pass of the training rule over ``X`` (scikit-learn's out-of-core convention).

        The patterns of ``X`` are visited in the order given, ``batch_size`` at a time, each
        step exactly as in ``fit``: solve the mean field (from 0.5), move the parameters along
        the gradient at the solutions.  The first call (a net without parameters) draws them
        from ``random_state`` and, with "gaussian" and ``init_visible_biases``, sets the
        visible biases from this first chunk's pixel means; later calls continue from the
        current parameters whatever ``warm_start`` says.  Each call uses the first rate of the
        schedule (``learning_rate``, or 0.02 for "gaussian" and 0.1 for the DAG methods by
        default); change ``learning_rate`` between calls to follow a schedule.

        ``fit`` with a constant rate (or with ``max_iter=1``) is ``partial_fit`` over each
        epoch's shuffled data: ``fit`` equals one ``partial_fit(X[order])`` per epoch, with
        ``order`` the epoch's permutation drawn from ``random_state`` (with the DAG methods,
        for the first epoch only: ``fit`` then warm-starts each pattern's solve from its
        previous solution, which a chunk of data does not have).

        Parameters
        ----------
        X : array_like of shape (n_patterns, n_visible)
            Binary training data (one chunk).
        y : None
            Ignored.
        missing : array_like of bool, optional
            Missing visible entries: marginalised ("gaussian" leaves their terms out of the
            bound, the DAG methods sum them out exactly).

        Returns
        -------
        self : SigmoidBeliefNet
            ``history_`` gains this pass's mean bound per pattern, and ``n_iter_`` counts the
            passes since the parameters were drawn.

        Examples
        --------
        >>> import mfengine as mf
        >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0, progress=False)
        >>> X = net.sample(200, random_state=1)
        >>> for chunk in (X[:100], X[100:]):
        ...     _ = net.partial_fit(chunk)
        >>> net.n_iter_, net.history_.shape
        (2, (2,))
        """
        method = check_value(self.method, "method", [Options(*METHODS)], "SigmoidBeliefNet")
        first = "weights_" not in vars(self) or "biases_" not in vars(self)
        if first:
            self._init_params(as_float_matrix(X, "X", allow_nan=True).shape[1])
        self._check_params()
        V, miss = self._check_data(X, missing, min_rows=1)
        rate = schedule(self.max_iter, self.learning_rate,
                        0.1 if method in DAG_METHODS else PAPER_RATES)[0]
        history = [] if first or "history_" not in vars(self) else list(self.history_)
        if method in DAG_METHODS:
            _, history_pass = self._fit_dag(V, miss, [rate], partial=True)
            history.append(float(history_pass[-1]))
        else:
            batch_size = check_int(self.batch_size, "batch_size", 1, 2**31 - 1)
            itol = check_tol(self.infer_tol, "infer_tol")
            imax = check_int(self.infer_max_iter, "infer_max_iter", 1, 2**31 - 1)
            from mfengine.sbn import _gaussian

            if first and check_flag(self.init_visible_biases, "init_visible_biases"):
                self._init_visible_biases(V, miss)
            Vk = np.where(np.isfinite(V), V, 0.0) if miss is not None else V
            n = V.shape[0]
            state = np.full((n, sum(self._sizes())), 0.5)
            total = _gaussian.fit_epoch(self.weights_, self.biases_, Vk, miss,
                                        np.arange(n, dtype=np.intp), float(rate), batch_size,
                                        itol, inner_tol_for(itol), imax, state)
            history.append(total / n)
        self._check_params()
        self.n_features_in_ = V.shape[1]
        self.history_ = np.asarray(history, dtype=np.float64)
        self.n_iter_ = len(history)
        return self

    def _set_packed(self, w, h):
        """Weights and biases from the DAG form's packed vectors (``_dag_structure()``'s
        edge order: the layers' weight matrices raveled and concatenated)."""
        sizes = self._sizes()
        off = np.concatenate([[0], np.cumsum([a * b for a, b in zip(sizes[:-1], sizes[1:])])])
        self.weights_ = [np.ascontiguousarray(w[off[l]:off[l + 1]].reshape(sizes[l + 1], sizes[l]))
                         for l in range(len(sizes) - 1)]
        boff = np.concatenate([[0], np.cumsum(sizes)])
        self.biases_ = [h[boff[l]:boff[l + 1]].copy() for l in range(len(sizes))]

    def _finish_fit(self, history, tol, budget):
        self.history_ = np.asarray(history, dtype=np.float64)
        self.n_iter_ = len(history)
        if tol is not None and not stop(history, tol):
            warn_unconverged([False], f"{type(self).__name__}.fit",
                             f"the mean bound still rose by more than tol={tol} in the last of "
                             f"{budget} epochs; raise max_iter or loosen tol")
        return self

    def _fit_dag(self, V, miss, rates=None, partial=False):
        """Train the DAG form of the net (every inter-layer weight an edge) with its DAG
        method on checked data; the weights and biases are set from the result.  Returns
        ``(converged, history)``; ``fit`` sets ``history_`` from it, ``partial_fit`` adds."""
        from mfengine._validation import effective_n_threads

        method = self.method
        _, itol, imax, _ = check_solve_args(method, self.infer_tol, self.infer_max_iter, None,
                                            names=("infer_tol", "infer_max_iter"))
        if rates is None:
            rates = schedule(self.max_iter, self.learning_rate, 0.1)
        batch_size = check_int(self.batch_size, "batch_size", 1, 2**31 - 1)
        tol = None if partial else check_tol(self.tol, "tol", allow_none=True)
        progress = check_flag(self.progress, "progress")
        callback = None if partial else check_callback(self.callback)
        nets = self._net().dag(self._dag_structure())
        items = nets.items(V, miss)
        def after_epoch(epoch, w, h, value):
            self._set_packed(w[0], h[0])
            callback(epoch, self, value)
            # edits the callback made to weights_/biases_ reach the net being trained
            net = self._net()
            return net.packed_weights()[None], np.concatenate(net.biases)[None]

        on_epoch = None if callback is None else after_epoch
        w, h, history, converged = fit_items(
            nets, items, method, itol, imax, rates, batch_size, tol, progress,
            None if partial else check_random_state(self.random_state), partial,
            effective_n_threads(self.n_threads), f"fit ({method})", on_epoch)
        self._set_packed(w[0], h[0])
        self._check_params()
        warn_unconverged(converged, f"SigmoidBeliefNet.fit(method={method!r}): the mean-field "
                         "solves", "raise infer_max_iter or loosen infer_tol")
        if not partial:
            self.history_ = np.asarray(history, dtype=np.float64)
            self.n_iter_ = len(history)
            if tol is not None and not stop(history, tol):
                warn_unconverged([False], "SigmoidBeliefNet.fit",
                                 f"the mean objective still changed by more than tol={tol} in "
                                 f"the last of {len(rates)} epochs; raise max_iter or loosen tol")
        return converged, history

    # --- dask hooks
    # The data-parallel fit of mfengine._dask: it hands over a Partitions object (the row
    # blocks of a dask array) and imports nothing from this module.
    def _dask_fit(self, parts, y=None):
        """``fit`` on a dask array: the steps of the compiled epoch loop, each mini-batch's
        patterns solved where their blocks are (:meth:`_dask_batch_gradient`), their summed
        gradients added on the client.  ``parts``: a ``mfengine._dask.Partitions``."""
        from mfengine._progress import progress_bar

        method = check_value(self.method, "method", [Options(*METHODS)], "SigmoidBeliefNet")
        warm = check_flag(self.warm_start, "warm_start")
        if check_callback(self.callback) is not None:
            raise ValueError("SigmoidBeliefNet.fit on a dask array does not take a callback")
        n_rows, n_cols = parts.shape
        if not warm or "weights_" not in vars(self):
            self._init_params(n_cols)
        self._check_params()
        if n_cols != self.biases_[-1].shape[0]:
            raise ValueError(f"X must have {self.biases_[-1].shape[0]} columns (the visible "
                             f"units), got {n_cols}")
        if n_rows < 1:
            raise ValueError("X has no patterns: fit needs at least one")
        if method in DAG_METHODS:      # the DAG form, trained data-parallel
            self._dask_fit_dag(parts)
            self.n_features_in_ = n_cols
            return self
        sums = parts.map(LayeredLearning._dask_check_rows, self)
        n = int(sum(s[1] for s in sums))
        self.n_features_in_ = n_cols
        rates, batch_size, tol, itol, imax, progress, rng = self._fit_settings()
        batch_size = min(batch_size, max(n, 1))
        if check_flag(self.init_visible_biases, "init_visible_biases"):
            p = np.sum([s[0] for s in sums], axis=0) / n
            p = np.clip(p, 1.0 / (n + 2), 1.0 - 1.0 / (n + 2))
            self.biases_[-1] = np.log(p) - np.log1p(-p)
        history, converged, states = [], [], None
        n_batches = (n + batch_size - 1) // batch_size
        bar = progress_bar(total=len(rates) * n_batches, desc="fit (dask)", disable=not progress,
                           unit="batch")
        try:
            for lr in rates:
                if not warm:
                    states = None
                order = rng.permutation(n).astype(np.intp)
                total = 0.0
                for a in range(0, n, batch_size):
                    plan = parts.split(order[a:a + batch_size])
                    size = sum(len(p) for p in plan if p is not False)
                    shared = (copy.deepcopy(self), itol, imax, warm)
                    outs, states = parts.step(LayeredLearning._dask_batch_gradient, shared,
                                              plan, states)
                    step = float(lr) / size
                    gW = [sum(o[0][l] for _, o in outs) for l in range(len(self.weights_))]
                    gb = [sum(o[1][l] for _, o in outs) for l in range(len(self.biases_))]
                    for l, g in enumerate(gW):
                        self.weights_[l] += step * g
                    for l, g in enumerate(gb):
                        self.biases_[l] += step * g
                    total += sum(o[2] for _, o in outs)
                    converged.extend(o[3] for _, o in outs)
                    self._check_params()
                    bar.update(1)
                history.append(total / n)
                bar.set_postfix(bound=f"{history[-1]:.3f}")
                if stop(history, tol):
                    break
        finally:
            bar.close()
        return self._finish_fit(history, tol, len(rates))

    def _dask_fit_dag(self, parts):
        """The DAG form trained data-parallel (``_learn.fit_partitions``)."""
        import functools

        from mfengine.sbn._learn import check_partition, fit_partitions

        method = self.method
        _, itol, imax, _ = check_solve_args(method, self.infer_tol, self.infer_max_iter, None,
                                            names=("infer_tol", "infer_max_iter"))
        rates = schedule(self.max_iter, self.learning_rate, 0.1)
        batch_size = check_int(self.batch_size, "batch_size", 1, 2**31 - 1)
        tol = check_tol(self.tol, "tol", allow_none=True)
        progress = check_flag(self.progress, "progress")
        if int(parts.offsets[-1]) == 0:
            raise ValueError("X has no patterns: fit needs at least one")
        check = functools.partial(check_layered_data, n_visible=self.n_visible)
        parts.map(check_partition, check)
        nets = self._net().dag(self._dag_structure())
        w, h, history, converged = fit_partitions(
            nets, parts, check, method, itol, imax, rates, batch_size, tol, progress,
            check_random_state(self.random_state), f"fit ({method}, dask)")
        self._set_packed(w[0], h[0])
        self._check_params()
        warn_unconverged(converged, f"SigmoidBeliefNet.fit(method={method!r}): the mean-field "
                         "solves", "raise infer_max_iter or loosen infer_tol")
        return self._finish_fit(history, tol, len(rates))

    @staticmethod
    def _dask_check_rows(block, net):
        """Validate a block where it is; returns its column sums and row count."""
        V, _ = net._check_data(np.asarray(block))
        return V.sum(axis=0), V.shape[0]

    @staticmethod
    def _dask_batch_gradient(block, state, shared, local):
        """One partition's part of one mini-batch (run where the block is): solve its
        patterns ``local`` (block rows) and sum their gradients at the solutions; the
        solutions stay there as warm starts when ``warm_start``."""
        net, itol, imax, warm = shared
        V, _ = net._check_data(np.asarray(block)[local])
        H = net.n_hidden
        init = None if state is None else state[local]
        r = net._infer(V, None, method="gaussian", tol=itol, max_iter=imax, init_mu=init,
                       progress=False)
        gW, gb = net._gradient_from_solution(V, None, r.mu, r.xi)
        if warm:
            if state is None:
                state = np.full((np.shape(block)[0], H), 0.5)
            else:
                state = state.copy()
            state[local] = np.concatenate(r.mu[:-1], axis=1)
        return (gW, gb, float(r.bound.sum()), r.converged), state
