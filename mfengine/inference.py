"""``mfengine.infer``: one entry point for every model family, a thin dispatcher to
``model.infer``.  No model family imports this module."""
__all__ = ["infer", "gradient"]


def _as_model(model):
    """A model object from ``model``: itself, a SigmoidBeliefNet from a pair (weights,
    biases) of array lists, or a BeliefNetBatch from a list of BeliefNet."""
    if hasattr(model, "infer") and callable(model.infer):
        return model
    from mfengine.sbn import BeliefNet, BeliefNetBatch, SigmoidBeliefNet

    if isinstance(model, (tuple, list)) and model and all(isinstance(m, BeliefNet) for m in model):
        return BeliefNetBatch.from_nets(model)
    if (isinstance(model, (tuple, list)) and len(model) == 2
            and all(isinstance(part, (list, tuple)) for part in model)):
        return SigmoidBeliefNet.from_params(model[0], model[1])
    raise TypeError("model must be an mfengine model (SigmoidBeliefNet, BeliefNet, "
                    "BeliefNetBatch, NLGBN, ContextHMM), a list of BeliefNet with one "
                    f"structure, or a pair (weights, biases) of array lists; got "
                    f"{type(model).__name__}")


def infer(model, X, *args, **kwargs):
    """Solve the mean-field problem of ``model`` for every pattern of ``X``.

    The same as ``model.infer(X, ...)``; see each family's ``infer`` for the arguments.
    Safe to call from many Python threads at once (each call owns its state, and the compiled
    loops run without the GIL).

    Parameters
    ----------
    model : estimator, list of BeliefNet, or (weights, biases)
        A model of any family; a list of BeliefNet with one structure (solved as a
        ``BeliefNetBatch``); or plain arrays of a layered sigmoid net: ``weights[l]`` of
        shape (sizes[l+1], sizes[l]) and ``biases[l]`` of shape (sizes[l],), layers top first.
    X : array_like
        The data, as the family's ``infer`` takes it.
    *args, **kwargs
        Passed on to ``model.infer`` (for example ``method``, ``tol``, ``max_iter``,
        ``missing``, ``n_threads``; for ContextHMM ``lengths``).

    Returns
    -------
    result : InferenceResult
        The family's result: per-pattern ``bound`` in nats, ``converged``, ``n_iter``,
        ``method``, and the variational parameters.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> mf.infer(net, net.sample(10, random_state=0)).bound.shape
    (10,)
    """
    return _as_model(model).infer(X, *args, **kwargs)


def gradient(model, X, result=None, missing=None, **infer_kwargs):
    """Gradient of the summed Gaussian-approximated bound of a layered net.

    Parameters
    ----------
    model : SigmoidBeliefNet or (weights, biases)
        The net.
    X : array_like of shape (n_patterns, n_visible)
        Binary data.
    result : BeliefNetResult, optional
        The "gaussian" solution for ``X`` (computed when not given).
    missing : array_like of bool, optional
        Missing visible entries.
    **infer_kwargs
        Passed to ``infer`` when ``result`` is not given.

    Returns
    -------
    grad_weights, grad_biases : list of ndarray
        Shaped like the weights and biases, summed over patterns.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.SigmoidBeliefNet([2, 4, 8], random_state=0)
    >>> gW, gb = mf.gradient(net, net.sample(10, random_state=1))
    >>> [g.shape for g in gW]
    [(4, 2), (8, 4)]
    """
    return _as_model(model).gradient(X, result=result, missing=missing, **infer_kwargs)
