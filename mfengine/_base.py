"""What every model family shares: the result base, the convergence warning, persistence.

Every estimator of mfengine (``SigmoidBeliefNet``, ``BeliefNet``, ``NLGBN``, ``ContextHMM``,
``GenerativeClassifier``) is a scikit-learn estimator: hyperparameters are constructor
arguments stored unchanged (so ``get_params``, ``set_params`` and ``clone`` work), fitted
parameters end in ``_``.  This module adds the pieces scikit-learn has no name for:

* :class:`InferenceResult`, the base of every family's answer to ``infer``;
* :class:`ConvergenceWarning` and :func:`warn_unconverged`, so that no solve that stopped
  early returns silently;
* :class:`PersistMixin` (``model.save(path)``) and :func:`load`, a portable, versioned
  ``.npz`` format.
"""
import importlib
import json
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np

try:  # a subclass of scikit-learn's, so that filters on either one catch both
    from sklearn.exceptions import ConvergenceWarning as _SkConvergenceWarning
except ImportError:  # pragma: no cover - scikit-learn is a dependency of the estimator layer
    _SkConvergenceWarning = UserWarning

__all__ = [
    "ConvergenceWarning",
    "InferenceResult",
    "PersistMixin",
    "load",
    "warn_unconverged",
    "FORMAT_VERSION",
]

#: Version of the file format written by ``save``; ``load`` refuses a newer one.
FORMAT_VERSION = 1


class ConvergenceWarning(_SkConvergenceWarning):
    """A mean-field solve or a training run stopped before meeting its tolerance.

    A subclass of scikit-learn's ``ConvergenceWarning``: a filter on either one applies.

    Examples
    --------
    >>> import warnings
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([4, 8, 16], weight_scale=4.0, random_state=0)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = net.infer(net.sample(50, random_state=1), max_iter=1)
    >>> any(issubclass(w.category, mf.ConvergenceWarning) for w in caught)
    True
    """


def warn_unconverged(converged, what, hint, stacklevel=3):
    """Warn (with :class:`ConvergenceWarning`) when some entries of ``converged`` are False.

    Parameters
    ----------
    converged : array_like of bool
        One flag per pattern (or sequence, or net).
    what : str
        The call that solved them, for example ``"infer(method='sjj')"``.
    hint : str
        What to try, for example ``"raise max_iter or loosen tol"``.
    stacklevel : int, default 3
        Passed to ``warnings.warn``.
    """
    converged = np.asarray(converged, dtype=bool)
    bad = int(converged.size - np.count_nonzero(converged))
    if bad:
        warnings.warn(
            f"{what}: {bad} of {converged.size} solves did not converge within the iteration "
            f"budget; {hint}",
            ConvergenceWarning,
            stacklevel=stacklevel,
        )
    return bad


@dataclass(repr=False)
class InferenceResult:
    """The mean-field solution for a batch of patterns (or sequences).

    Every family's ``infer`` returns a subclass of this class, which adds the family's
    variational parameters.

    Parameters
    ----------
    bound : ndarray
        The objective at the solution, per pattern (or sequence), in nats.  A lower bound on
        ln P(x) except for the Plefka methods, whose ``bound`` is -G, an approximation of
        ln P(x) that may lie on either side of it.
    converged : ndarray of bool
        Whether each solve met its tolerance.
    n_iter : ndarray of int
        Sweeps (or iterations) taken per pattern.
    method : str
        The mean-field method that produced the result.
    tol : float, optional
        The tolerance of the solve.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> isinstance(net.infer(net.sample(3, random_state=1)), mf.InferenceResult)
    True
    """

    bound: np.ndarray
    converged: np.ndarray
    n_iter: np.ndarray
    method: str
    tol: float = field(default=None)

    def __repr__(self):
        n = int(np.size(self.bound))
        mean = float(np.mean(self.bound)) if n else float("nan")
        return (
            f"{type(self).__name__}(method={self.method!r}, n={n}, mean_bound={mean:.6g}, "
            f"converged={int(np.count_nonzero(self.converged))}/{np.size(self.converged)})"
        )


# ---------------------------------------------------------------------------- persistence
def _encode(prefix, value, arrays):
    """A JSON-able description of ``value``; arrays go to ``arrays`` under keys from ``prefix``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return {"__float__": repr(float(value))}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(f"cannot save {prefix}: an object array")
        arrays[prefix] = value
        return {"__array__": prefix}
    if type(value).__module__.startswith("scipy.sparse"):   # a sparse matrix, as CSR arrays
        csr = value.tocsr()
        return {"__csr__": [_encode(f"{prefix}.{k}", getattr(csr, k), arrays)
                            for k in ("data", "indices", "indptr")], "shape": list(csr.shape)}
    if isinstance(value, np.random.Generator):
        return {"__rng__": value.bit_generator.state}
    if isinstance(value, (list, tuple)):
        items = [_encode(f"{prefix}.{k}", v, arrays) for k, v in enumerate(value)]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {"__dict__": {str(k): _encode(f"{prefix}.{k}", v, arrays) for k, v in value.items()}}
    raise TypeError(f"cannot save {prefix} of type {type(value).__name__}")


def _decode(desc, arrays):
    if isinstance(desc, list):
        return [_decode(d, arrays) for d in desc]
    if isinstance(desc, dict):
        if "__array__" in desc:
            return arrays[desc["__array__"]]
        if "__float__" in desc:
            return float(desc["__float__"])
        if "__tuple__" in desc:
            return tuple(_decode(d, arrays) for d in desc["__tuple__"])
        if "__dict__" in desc:
            return {k: _decode(v, arrays) for k, v in desc["__dict__"].items()}
        if "__csr__" in desc:
            import scipy.sparse

            data, indices, indptr = (_decode(d, arrays) for d in desc["__csr__"])
            return scipy.sparse.csr_matrix((data, indices, indptr), shape=tuple(desc["shape"]))
        if "__rng__" in desc:
            rng = np.random.default_rng()
            rng.bit_generator.state = desc["__rng__"]
            return rng
    return desc


def _fitted_state(model):
    """The model's fitted attributes: public names ending in one underscore."""
    return {k: v for k, v in vars(model).items()
            if k.endswith("_") and not k.startswith("_") and not k.endswith("__")}


@dataclass(repr=False)
class LogLikelihoodEstimate:
    """A sampled estimate of ln P(x) per pattern, with its standard error.

    Returned by ``log_likelihood(X, ...)`` of the latent-variable families; their
    ``score_samples(X, method="importance", ...)`` returns ``estimate`` alone.

    Parameters
    ----------
    estimate : ndarray of shape (n_patterns,)
        The estimate of ln P(x) per pattern, in nats: the log of the average importance weight.
    stderr : ndarray of shape (n_patterns,)
        Its standard error (delta method on the log of the mean weight).
    bound : ndarray of shape (n_patterns,)
        The mean-field objective of the proposal, for comparison (nan where none is computed).
    n_samples : int
        Samples drawn per pattern.
    ess : ndarray of shape (n_patterns,)
        Effective sample size of the weights per pattern, (sum w)^2 / sum w^2.
    method : str
        ``"importance"`` or ``"ais"``.

    Examples
    --------
    >>> import numpy as np
    >>> import mfengine as mf
    >>> est = mf.LogLikelihoodEstimate(np.array([-3.0]), np.array([0.01]), np.array([-3.2]),
    ...                                100, np.array([80.0]), "importance")
    >>> est
    LogLikelihoodEstimate(method='importance', n=1, n_samples=100, mean=-3, mean_stderr=0.01)
    """

    estimate: np.ndarray
    stderr: np.ndarray
    bound: np.ndarray
    n_samples: int
    ess: np.ndarray
    method: str = "importance"

    def __repr__(self):
        n = int(np.size(self.estimate))
        mean = float(np.mean(self.estimate)) if n else float("nan")
        se = float(np.sqrt(np.sum(np.square(self.stderr)))) / n if n else float("nan")
        return (f"{type(self).__name__}(method={self.method!r}, n={n}, "
                f"n_samples={self.n_samples}, mean={mean:.6g}, mean_stderr={se:.3g})")


class PersistMixin:
    """``save(path)``: the model in a portable, versioned ``.npz`` file, read by ``mf.load``.

    The file holds the constructor parameters and the fitted attributes (names ending in
    ``_``) as plain arrays and JSON, a format version and the package version; nothing is
    pickled, so a file is safe to load from an untrusted source.
    """

    def save(self, path):
        """Write the model to ``path`` (a ``.npz`` file; the suffix is added if missing).

        Parameters
        ----------
        path : str or path-like
            Where to write.

        Returns
        -------
        path : str
            The file written.
        """
        from mfengine import __version__

        arrays = {}
        header = {
            "format_version": FORMAT_VERSION,
            "mfengine_version": __version__,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "params": _encode("params", self.get_params(deep=False), arrays),
            "state": _encode("state", _fitted_state(self), arrays),
        }
        arrays = {f"a{k}": v for k, v in enumerate(arrays.values())} | {"_keys": np.array(list(arrays))}
        path = str(path)
        if not path.endswith(".npz"):
            path += ".npz"
        np.savez(path, _header=np.array(json.dumps(header)), **arrays)
        return path


def load(path):
    """Read a model written by ``model.save(path)``.

    Parameters
    ----------
    path : str or path-like
        A ``.npz`` file written by ``save``.

    Returns
    -------
    model : estimator
        A model of the saved class, with the saved parameters and fitted attributes; it gives
        bit-identical scores.

    Raises
    ------
    ValueError
        If the file is not an mfengine model file, or was written in a newer format.

    Examples
    --------
    >>> import os, tempfile
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> X = net.sample(5, random_state=1)
    >>> path = net.save(os.path.join(tempfile.mkdtemp(), "net"))
    >>> bool((mf.load(path).score_samples(X) == net.score_samples(X)).all())
    True
    """
    with np.load(str(path), allow_pickle=False) as data:
        if "_header" not in data.files:
            raise ValueError(f"{path!s} is not an mfengine model file (no header)")
        try:
            header = json.loads(str(data["_header"]))
            keys = [str(k) for k in data["_keys"]] if "_keys" in data.files else []
            arrays = {k: np.array(data[f"a{i}"]) for i, k in enumerate(keys)}
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{path!s} is not a readable mfengine model file: {exc}") from exc
    if not isinstance(header, dict):
        raise ValueError(f"{path!s} is not an mfengine model file (its header is not a record)")
    for key, arr in arrays.items():     # NaN is never a valid parameter: the file is damaged
        if arr.dtype.kind == "f" and np.isnan(arr).any():
            raise ValueError(f"the file {path!s} is damaged: its entry {key} holds NaN")
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{path!s} was written in mfengine file format {version!r} (by mfengine "
            f"{header.get('mfengine_version')}); this mfengine reads formats up to "
            f"{FORMAT_VERSION}: upgrade mfengine to load it"
        )
    module, _, qualname = str(header.get("class", "")).partition(":")
    if not module.startswith("mfengine."):
        raise ValueError(f"{path!s} names class {header.get('class')!r}, not an mfengine model")
    try:
        cls = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{path!s} names class {header.get('class')!r}, which this mfengine "
                         "does not have") from exc
    if not (isinstance(cls, type) and issubclass(cls, PersistMixin)):
        raise ValueError(f"{path!s} names {header.get('class')!r}, not an mfengine model class")
    try:
        params = _decode(header["params"], arrays)
        state = _decode(header["state"], arrays)
        model = cls(**params)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path!s} is not a readable mfengine model file (its parameters or "
                         f"fitted state are incomplete or not {qualname}'s: {exc})") from exc
    if not isinstance(state, dict):
        raise ValueError(f"{path!s} is not a readable mfengine model file (no fitted state)")
    for k, v in state.items():
        setattr(model, k, v)
    return model
