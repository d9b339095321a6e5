"""Checks of the belief nets' hyperparameters, made when they are used (in fit and infer,
not in the constructor, as scikit-learn does), and the learning-rate schedule."""
import numbers

import numpy as np
from sklearn.utils import check_scalar

__all__ = ["check_flag", "check_int", "check_tol", "check_callback", "schedule", "stop"]


def check_flag(value, name):
    """``value`` as a bool, refusing anything but True and False."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_int(value, name, low, high=2**31 - 1):
    """``value`` as an int in [low, high] (scikit-learn's ``check_scalar``)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, not a bool: got {value!r}")
    return int(check_scalar(value, name, numbers.Integral, min_val=low, max_val=high))


def check_tol(value, name, allow_none=False):
    """``value`` as a positive finite float (or None when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, not a bool: got {value!r}")
    value = check_scalar(value, name, numbers.Real, min_val=0.0, include_boundaries="neither")
    if not np.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def check_callback(callback):
    """``callback`` if it is None or callable."""
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable (epoch, model, mean_bound) or None, got {callback!r}")
    return callback


def stop(history, tol):
    """Whether the last epoch's objective changed by less than ``tol`` from the one before."""
    return tol is not None and len(history) >= 2 and abs(history[-1] - history[-2]) < tol


def schedule(max_iter, learning_rate, default):
    """One learning rate per epoch: ``learning_rate`` repeated, or the given sequence, or
    ``default`` (a rate, or a pair (first half, second half))."""
    max_iter = check_int(max_iter, "max_iter", 1, 10**9)
    if learning_rate is None:
        if isinstance(default, tuple):
            half = (max_iter + 1) // 2
            rates = [default[0]] * half + [default[1]] * (max_iter - half)
        else:
            rates = [default] * max_iter
    elif isinstance(learning_rate, numbers.Real) and not isinstance(learning_rate, (bool, np.bool_)):
        rates = [float(learning_rate)] * max_iter
    elif isinstance(learning_rate, (str, bytes)) or not hasattr(learning_rate, "__len__"):
        raise TypeError(f"learning_rate must be a number or a sequence of numbers, got {learning_rate!r}")
    else:
        if not all(isinstance(r, numbers.Real) and not isinstance(r, (bool, np.bool_)) for r in learning_rate):
            raise TypeError(f"learning_rate must be a number or a sequence of numbers, got {learning_rate!r}")
        rates = [float(r) for r in learning_rate]
        if len(rates) != max_iter:
            raise ValueError(f"learning_rate holds {len(rates)} per-epoch rates but max_iter={max_iter}")
    if any(not (0 <= r < np.inf) for r in rates):
        raise ValueError(f"learning_rate must be finite and non-negative, got {learning_rate!r}")
    return rates
