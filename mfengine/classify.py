"""Generative classification with one sigmoid belief net per class (Saul & Jordan, sec. 3).

Each class gets its own layered sigmoid belief network trained by mean-field learning; a
pattern is labelled by the class whose net gives it the largest mean-field bound (an
approximation to ln P(x | class)) plus the log prior of the class.  Missing pixels are
marginalised exactly inside the bound, so the same nets classify incomplete images.
"""
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from mfengine._base import ConvergenceWarning, PersistMixin, warn_unconverged
from mfengine._validation import (BOOLEAN, LEARNING_RATE, N_THREADS, POSITIVE_TOL, RANDOM_STATE,
                                  Interval, Satisfies, check_flag, check_int, check_random_state,
                                  check_real, effective_n_threads)
from mfengine.mixture._checks import (MAX_ITER_LIMIT, MAX_SIZE, binary_input_tags,
                                      check_binary_values, check_class_log_prior, check_targets,
                                      validate_array, validate_binary)
from mfengine.mixture._classifier import _GenerativeClassifierMixin

__all__ = ["GenerativeClassifier", "default_schedule"]


class GenerativeClassifier(PersistMixin, _GenerativeClassifierMixin, BaseEstimator):
    """Classify binary patterns with one ``SigmoidBeliefNet`` per class.

    Each net has layer sizes ``hidden + (n_features,)`` and is trained by ``SigmoidBeliefNet.fit``
    on its class's patterns.  A pattern's score for class c is the mean-field bound of net c
    (Saul & Jordan eq. 6, in nats) plus ln P(c); ``predict`` takes the argmax and
    ``predict_proba`` normalises the exponentiated scores (so the probabilities are those of an
    approximate likelihood, not exact posteriors).  Missing pixels are marginalised inside the
    bound: every scoring method takes a ``missing`` mask.

    Parameters
    ----------
    hidden : tuple of int, default=(8, 24)
        Hidden layer sizes, top layer first.
    max_iter : int, default=20
        Epochs (passes over each class's training data).
    learning_rate : float or sequence of float, default=None
        One rate for all epochs, or one per epoch (then its length must equal ``max_iter``).
        ``None`` uses the tuned schedule (``default_schedule``): 0.1 for the first half of the
        epochs, then 0.02.
    batch_size : int, default=1
        Patterns per gradient step (1: the paper's on-line rule).  The step is
        ``learning_rate / batch_size`` times the summed gradient.
    weight_scale : float, default=1.0
        Initial weights ~ N(0, weight_scale**2 / fan_in).
    tol : float, default=None
        Stop training a class's net once its mean bound rises by less than ``tol`` nats from
        one epoch to the next (a ``ConvergenceWarning`` when that does not happen within
        ``max_iter`` epochs).  None: run all ``max_iter`` epochs.
    infer_tol : float, default=1e-4
        Tolerance (nats per pattern and sweep) of every mean-field solve, in training and in
        scoring.
    infer_max_iter : int, default=200
        Most sweeps of one pattern's mean-field solve.
    warm_start : bool, default=False
        False: ``fit`` trains fresh nets.  True: ``fit`` continues training the current nets
        (the classes and the number of pixels must be those of the previous fit).
    n_threads : int, default=None
        Threads (default: OMP_NUM_THREADS or all cores).  Training runs the class nets in
        parallel, one thread each; scoring splits the patterns among OpenMP threads.  The
        result does not depend on it.
    random_state : None, int or numpy.random.Generator, default=None
        Seeds the initial weights and the visiting order of every class's net.
    progress : bool, default=True
        Show a progress bar over classes and epochs on fits that take longer than two
        seconds (needs tqdm).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Sorted class labels.
    net_weights_ : list of list of ndarray
        ``net_weights_[c][l]``: the weights from layer l to layer l+1 of the net of class
        ``classes_[c]`` (its ``weights_``).
    net_biases_ : list of list of ndarray
        ``net_biases_[c][l]``: the biases of layer l of that net (its ``biases_``).
    nets_ : list of SigmoidBeliefNet
        One trained net per class, in the order of ``classes_``: copies built on each access
        from ``net_weights_`` and ``net_biases_``.
    class_log_prior_ : ndarray of shape (n_classes,)
        Log class frequencies in the training data.  It may be replaced after ``fit`` (for
        example by other priors); it must then hold no NaN or +inf.
    history_ : list of ndarray
        ``history_[c]``: the mean bound per training pattern (nats) in each epoch of the net
        of class ``classes_[c]``.
    n_iter_ : ndarray of shape (n_classes,)
        Epochs run per class (``max_iter`` unless ``tol`` stopped a net early).
    n_features_in_ : int
        Number of pixels seen in ``fit``.

    See Also
    --------
    mfengine.SigmoidBeliefNet : The per-class model.
    mfengine.MixtureClassifier : The same scheme with Bernoulli mixtures.

    Notes
    -----
    The defaults were chosen by 3-fold stratified cross-validation inside the training split of
    ``mfengine.datasets.load_binary_digits()`` (about 84 training images per class per fold;
    its test split was never used).  Mean validation errors, 3 seeds x 3 folds: 20 epochs at
    0.1 then 0.02 3.9% (the default); 30 epochs of that 3.9%, with a 4x12x36 net 3.7% (twice
    the time), with weight_scale=0.5 4.0%, with a 12x36 net and 40 epochs 4.3%; 20 epochs at a
    constant 0.05 4.3%, at 0.05 then 0.01 5.0%.  One seed x 3 folds: the paper's recipe
    (8 epochs, 0.02 then 0.005) 8.4%, 16 epochs of it 6.9%; rates of 0.2 4.4-5.3%;
    mini-batches of 10 at 0.5 then 0.1 4.0-4.6%; a training tolerance of 1e-3 or 1e-5
    instead of 1e-4 made no difference.  The paper's recipe was written for 6000 images per
    class and underfits here.

    Examples
    --------
    >>> import numpy as np
    >>> from mfengine import GenerativeClassifier
    >>> rng = np.random.default_rng(0)
    >>> y = np.repeat([0, 1], 30)
    >>> X = (rng.random((60, 6)) < np.where(y[:, None] == 1, 0.8, 0.2)).astype(float)
    >>> clf = GenerativeClassifier(hidden=(2,), max_iter=4, random_state=0).fit(X, y)
    >>> clf.predict(np.array([[0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])).tolist()
    [0, 1]
    >>> clf.predict_proba(X).shape
    (60, 2)
    """

    _parameter_constraints = {
        "hidden": [Satisfies(lambda v: GenerativeClassifier._hidden_sizes_of(v) is not None,
                             "an int or a sequence of hidden layer sizes (ints in [1, 2**31))")],
        "max_iter": [Interval(numbers.Integral, 1, MAX_ITER_LIMIT)],
        "learning_rate": [LEARNING_RATE],
        "batch_size": [Interval(numbers.Integral, 1, 2**31 - 1)],
        "weight_scale": [Interval(numbers.Real, 0, None)],
        "tol": [None, POSITIVE_TOL],
        "infer_tol": [POSITIVE_TOL],
        "infer_max_iter": [Interval(numbers.Integral, 1, 2**31 - 1)],
        "warm_start": [BOOLEAN],
        "n_threads": [N_THREADS],
        "random_state": [RANDOM_STATE],
        "progress": [BOOLEAN],
    }
    _saved_state = {"n_features_in_": "count", "classes_": "labels",
                    "net_weights_": "nested arrays", "net_biases_": "nested arrays",
                    "class_log_prior_": "vector", "history_": "vectors", "n_iter_": "counts"}
    _saved_together = (("classes_", "net_weights_", "net_biases_", "class_log_prior_",
                        "n_features_in_"),)

    def __init__(self, hidden=(8, 24), max_iter=20, learning_rate=None, batch_size=1,
                 weight_scale=1.0, tol=None, infer_tol=1e-4, infer_max_iter=200,
                 warm_start=False, n_threads=None, random_state=None, progress=True):
        self.hidden = hidden
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.weight_scale = weight_scale
        self.tol = tol
        self.infer_tol = infer_tol
        self.infer_max_iter = infer_max_iter
        self.warm_start = warm_start
        self.n_threads = n_threads
        self.random_state = random_state
        self.progress = progress

    def __sklearn_tags__(self):
        return binary_input_tags(super().__sklearn_tags__())

    # ------------------------------------------------------------------ helpers
    def _check_fitted(self):
        """``mf.load``: one net per class, each as every call checks it, and the priors."""
        if "classes_" in vars(self):
            n_classes = len(self.classes_)
            for name in ("net_weights_", "net_biases_"):
                if len(getattr(self, name)) != n_classes:
                    raise ValueError(f"{name} must hold one entry per class of classes_ "
                                     f"({n_classes}), got {len(getattr(self, name))}")
            for c in range(n_classes):
                self._net(c)
            check_class_log_prior(self)

    def _hidden_sizes(self):
        return self._hidden_sizes_of(self.hidden)

    @staticmethod
    def _hidden_sizes_of(hidden):
        """``hidden`` (an int or a sequence of sizes) as a tuple of ints, or an error."""
        if isinstance(hidden, numbers.Integral) and not isinstance(hidden, bool):
            hidden = (hidden,)
        if isinstance(hidden, (str, bytes)):
            raise TypeError(f"hidden must be a sequence of layer sizes, got {hidden!r}")
        try:
            hidden = tuple(hidden)
        except TypeError:
            raise TypeError(f"hidden must be a sequence of layer sizes, got {hidden!r}") from None
        if len(hidden) == 0:
            raise ValueError("hidden needs at least one hidden layer")
        for h in hidden:
            if not isinstance(h, numbers.Integral) or isinstance(h, bool) or not 1 <= h < 2**31:
                raise ValueError(
                    f"hidden layer sizes must be positive integers below 2**31, got {hidden!r}"
                )
        return tuple(int(h) for h in hidden)

    def _rates(self):
        epochs = check_int(self.max_iter, "max_iter", 1, MAX_ITER_LIMIT)
        lr = self.learning_rate
        if lr is None:
            return default_schedule(epochs)
        if isinstance(lr, (str, bytes)):
            raise TypeError(f"learning_rate must be a number or a sequence of numbers, got {lr!r}")
        if isinstance(lr, numbers.Real) and not isinstance(lr, bool):
            rates = [lr] * epochs
        else:
            try:
                rates = list(lr)
            except TypeError:
                raise TypeError(
                    f"learning_rate must be a number or a sequence of numbers, got {lr!r}"
                ) from None
            if len(rates) != epochs:
                raise ValueError(
                    f"learning_rate has {len(rates)} per-epoch rates but max_iter={epochs}"
                )
        return [check_real(r, "learning_rate", 0.0) for r in rates]

    # ------------------------------------------------------------------ the nets
    def _net(self, c, **params):
        """A copy of the net of class ``classes_[c]``, with the classifier's solve settings."""
        from mfengine.sbn import SigmoidBeliefNet

        params = dict(dict(infer_tol=self.infer_tol, infer_max_iter=self.infer_max_iter,
                           n_threads=self.n_threads, progress=False), **params)
        try:
            return SigmoidBeliefNet.from_params(self.net_weights_[c], self.net_biases_[c], **params)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"net_weights_[{c}] / net_biases_[{c}] (the net of class "
                            f"{self.classes_[c]!r}): {exc}") from exc

    def _train_net(self, c, X, sizes, rates, rng, callback, warm):
        """Train the net of class c on its patterns X; returns (weights, biases, history)."""
        from mfengine.sbn import SigmoidBeliefNet

        params = dict(learning_rate=rates, max_iter=len(rates), batch_size=self.batch_size,
                      tol=self.tol, infer_tol=self.infer_tol,
                      infer_max_iter=self.infer_max_iter, random_state=rng, progress=False,
                      callback=callback)
        if warm:
            net = self._net(c, warm_start=True, **params)
        else:
            net = SigmoidBeliefNet(list(sizes), weight_scale=self.weight_scale, **params)
        net.fit(X)
        return net.weights_, net.biases_, np.asarray(net.history_, dtype=np.float64)

    # ------------------------------------------------------------------ API
    def fit(self, X, y):
        """Train one sigmoid belief net per class.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary (0/1) patterns.
        y : array-like of shape (n_samples,)
            Class labels (any sortable type; at least two classes; continuous targets are
            refused).

        Returns
        -------
        GenerativeClassifier
            The fitted classifier.

        Raises
        ------
        ValueError
            If X is not binary, y is not a vector of class labels with at least two classes,
            a hyperparameter is out of range, or training a net gave a non-finite bound.
        TypeError
            If X is sparse or not numeric, or a hyperparameter has the wrong type.
        """
        from mfengine._progress import progress_bar

        hidden, rates, warm = self._fit_settings()
        check_flag(self.progress, "progress")
        previous = (np.asarray(self.classes_), self.n_features_in_) if warm else None
        X, y = validate_array(self, X, y=y, reset=True)
        classes, y_idx, counts = check_targets(y)
        X, _ = check_binary_values(X)
        if warm and (previous[1] != X.shape[1] or not np.array_equal(previous[0], classes)):
            self.classes_, self.n_features_in_ = previous
            raise ValueError(
                f"warm_start=True continues the nets of classes {previous[0].tolist()} (classes_) on "
                f"{previous[1]} pixels, but X, y hold classes {classes.tolist()} on "
                f"{X.shape[1]} pixels; set warm_start=False to train afresh"
            )
        n_classes = classes.shape[0]
        rngs = [np.random.default_rng(s)
                for s in np.random.SeedSequence(
                    check_random_state(self.random_state).integers(0, 2**63 - 1)
                ).spawn(n_classes)]
        sizes = hidden + (X.shape[1],)
        bar = progress_bar(total=n_classes * len(rates), desc="GenerativeClassifier.fit",
                           disable=not self.progress, unit="epoch")

        def tick(epoch, net, bound):
            bar.update(1)

        def train(c):
            try:
                return self._train_net(c, X[y_idx == c], sizes, rates, rngs[c], tick, warm)
            except (FloatingPointError, ValueError) as exc:
                # X and the hyperparameters were checked above: what is left is a net whose
                # parameters left the range the solver accepts
                hint = ("check net_weights_ and net_biases_, which warm_start=True continues"
                        if warm else
                        f"try a smaller weight_scale (now {self.weight_scale!r}) or learning_rate")
                raise ValueError(
                    f"training the net of class {classes[c].tolist()!r} failed: {exc}; {hint}"
                ) from exc
            except MemoryError as exc:
                raise MemoryError(
                    f"training the net of class {classes[c].tolist()!r}: not enough memory for layer "
                    f"sizes {list(sizes)} (hidden={self.hidden!r} + one unit per pixel): {exc}"
                ) from exc

        # The nets are independent and each epoch runs compiled without the GIL: train them
        # from a pool of threads.  Every net has its own random stream, so the result does not
        # depend on the number of threads.
        n_workers = min(effective_n_threads(self.n_threads), n_classes)
        try:
            if n_workers > 1:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=n_workers) as pool:
                    fits = list(pool.map(train, range(n_classes)))
            else:
                fits = [train(c) for c in range(n_classes)]
        finally:
            bar.close()
        return self._set_fitted(classes, counts, fits, rates)

    def _set_fitted(self, classes, counts, fits, rates):
        """The fitted attributes from the trained nets ``fits`` (weights, biases, history per
        class), after checking that every net's bound stayed finite; returns self."""
        history = [f[2] for f in fits]
        bad = np.array([not np.all(np.isfinite(h)) for h in history])
        if np.any(bad):
            raise ValueError(
                f"training the nets of classes {classes[bad].tolist()[:10]} gave a non-finite "
                f"mean-field bound (weight_scale={self.weight_scale!r}, learning rates "
                f"{rates[:3]}...): use a smaller weight_scale or learning_rate"
            )
        self.classes_ = classes
        self.net_weights_ = [f[0] for f in fits]
        self.net_biases_ = [f[1] for f in fits]
        self.class_log_prior_ = np.log(counts / counts.sum())
        self.history_ = history
        self.n_iter_ = np.array([h.shape[0] for h in history])
        return self

    @property
    def nets_(self):
        """One trained ``SigmoidBeliefNet`` per class, in the order of ``classes_``.

        Built on each access from ``net_weights_`` and ``net_biases_``.

        Returns
        -------
        list of SigmoidBeliefNet
            The class nets.
        """
        check_is_fitted(self)
        return [self._net(c) for c in range(len(self.classes_))]

    def class_bounds(self, X, missing=None):
        """Each class net's mean-field bound on ln P(x | class).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary patterns; entries under ``missing`` may hold NaN or any finite value.
        missing : array-like of bool, shape (n_samples, n_features) or (n_features,), optional
            Pixels to marginalise (a 1-D mask applies to every pattern).

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            The bound per pattern and class, in nats.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the classifier is not fitted.
        ValueError
            If X or ``missing`` is malformed, a net's parameters were set to invalid values,
            or a net gives a non-finite bound.

        Warns
        -----
        ConvergenceWarning
            Once, when some of the per-pattern solves did not meet ``infer_tol`` within
            ``infer_max_iter`` sweeps.
        """
        check_is_fitted(self)
        X, obs = validate_binary(self, X, reset=False, missing=missing)
        miss = None if obs is None else obs == 0.0
        classes = np.asarray(self.classes_) if self.classes_ is not None else None
        if classes is None or classes.ndim != 1 or classes.size < 2:
            raise ValueError(f"classes_ must be a 1-D array of at least two classes, got "
                             f"{self.classes_!r}")
        n_classes = classes.size
        for name in ("net_weights_", "net_biases_"):
            if len(getattr(self, name)) != n_classes:
                raise ValueError(f"{name} must hold one entry per class of classes_ "
                                 f"({n_classes}), got {len(getattr(self, name))}")
        out = np.empty((X.shape[0], n_classes))
        converged = np.empty((X.shape[0], n_classes), dtype=bool)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # one warning for all classes
            for c in range(n_classes):
                try:
                    r = self._net(c).infer(X, miss)
                except ValueError as exc:
                    raise ValueError(f"net_weights_[{c}] / net_biases_[{c}] (the net of class "
                                     f"{self.classes_[c]!r}): {exc}") from exc
                out[:, c], converged[:, c] = r.bound, r.converged
        bad = ~np.all(np.isfinite(out), axis=0)
        if np.any(bad):
            raise ValueError(
                f"the nets of classes {self.classes_[bad].tolist()[:10]} give non-finite bounds; "
                f"their parameters (net_weights_, net_biases_) are out of range"
            )
        warn_unconverged(converged, "GenerativeClassifier.class_bounds",
                         f"raise infer_max_iter (now {self.infer_max_iter!r}) or loosen "
                         f"infer_tol (now {self.infer_tol!r})")
        return out

    def _joint(self, X, missing):
        bounds = self.class_bounds(X, missing=missing)
        return bounds + check_class_log_prior(self)


    def _fit_settings(self):
        """The checked training settings of fit and of its data-parallel form: the hidden
        layer sizes, the per-epoch learning rates, and whether to continue the current nets."""
        hidden = self._hidden_sizes()
        rates = self._rates()
        check_int(self.batch_size, "batch_size", 1, MAX_SIZE)
        check_real(self.weight_scale, "weight_scale", 0.0)
        check_real(self.tol, "tol", 0.0, closed='neither', allow_none=True)
        check_real(self.infer_tol, "infer_tol", 0.0, closed='neither')
        check_int(self.infer_max_iter, "infer_max_iter", 1, MAX_SIZE)
        warm = check_flag(self.warm_start, "warm_start") and hasattr(self, "net_weights_")
        return hidden, rates, warm

    # --- dask hooks
    def _dask_fit(self, parts, y=None):
        """``fit``, data-parallel (the hook of mfengine._dask): the net of each class is
        trained (``_train_net``) on a lazy selection of the rows (``parts.take``), which sends
        each net's ``fit`` to the net's own ``_dask_fit``; the labels, one per pattern, are
        read on the client.  Classes are trained one after another, each over the whole
        cluster; the nets equal those of the in-memory fit (same per-class seeds)."""
        hidden, rates, warm = self._fit_settings()
        n_rows, n_cols = parts.shape
        if y is None:
            raise ValueError("y must hold one class label per pattern of X, got None")
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != n_rows:
            raise ValueError(f"y must be a 1-D array of {n_rows} labels (one per pattern of X), "
                             f"got shape {y.shape}")
        classes, y_idx, counts = check_targets(y)
        parts.map(_check_binary_block)
        if warm and (self.n_features_in_ != n_cols
                     or not np.array_equal(np.asarray(self.classes_), classes)):
            raise ValueError("warm_start=True continues nets of other classes or pixels than X, y "
                             "hold; set warm_start=False to train afresh")
        n_classes = classes.shape[0]
        rngs = [np.random.default_rng(s)
                for s in np.random.SeedSequence(
                    check_random_state(self.random_state).integers(0, 2**63 - 1)).spawn(n_classes)]
        sizes = hidden + (n_cols,)
        fits = []
        for c in range(n_classes):
            try:
                fits.append(self._train_net(c, parts.take(np.flatnonzero(y_idx == c)), sizes,
                                             rates, rngs[c], None, warm))
            except (FloatingPointError, ValueError) as exc:
                raise ValueError(
                    f"training the net of class {classes[c].tolist()!r} failed: {exc}") from exc
        self._set_fitted(classes, counts, fits, rates)
        self.n_features_in_ = n_cols
        return self


def _check_binary_block(block):
    """Refuse a block of the classifier's patterns that is not binary (where it is)."""
    check_binary_values(np.asarray(block, dtype=np.float64))


def default_schedule(max_iter):
    """The default per-epoch learning rates of ``GenerativeClassifier``.

    Parameters
    ----------
    max_iter : int
        Number of epochs.

    Returns
    -------
    list of float
        0.1 for the first half of the epochs (rounded up), then 0.02 (chosen by
        cross-validation on the bundled digits' training split).

    Examples
    --------
    >>> from mfengine.classify import default_schedule
    >>> default_schedule(4)
    [0.1, 0.1, 0.02, 0.02]
    """
    max_iter = check_int(max_iter, "max_iter", 1, MAX_ITER_LIMIT)
    first = (max_iter + 1) // 2
    return [0.1] * first + [0.02] * (max_iter - first)
