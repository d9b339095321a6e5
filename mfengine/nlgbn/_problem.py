"""The problem record of an NLGBN: its checked parameters and the compiled kernel's flat
layout of them (:class:`Network`), plain arrays built once per call by the estimator."""
import numpy as np

from mfengine._validation import as_array
from mfengine.nlgbn._checks import _CODE, _TINY, _check_units, _param_array, _param_list

__all__ = ["Network"]


class Network:
    """The validated parameters of a network (float64 copies) and the kernel's view of them.

    Built from the estimator's ``weights_``, ``biases_``, ``variances_`` and ``units_`` (each
    checked, so that a value a user assigned after construction is refused here with the
    attribute's name) once per call; the solver (:mod:`mfengine.nlgbn._solve`) and the M-step
    (:mod:`mfengine.nlgbn._learn`) read it and never the estimator.

    Attributes
    ----------
    sizes : tuple of int
        Units per layer, top first.
    weights, biases, variances : list of ndarray
        ``weights[l]`` of shape (sizes[l+1], sizes[l]); one (sizes[l],) bias and variance
        vector per layer.
    units : tuple of tuple of str
        The type name of every unit, layer by layer.
    """

    def __init__(self, weights, biases, variances, units):
        biases = _param_list(biases, "biases_", None)
        if len(biases) < 2:
            raise ValueError(f"biases_ must hold one vector per layer (at least two), got {len(biases)}")
        B = []
        for l, b in enumerate(biases):
            b = as_array(b, f"biases_[{l}]") if not isinstance(b, np.ndarray) else b
            if getattr(b, "ndim", None) != 1:
                raise ValueError(f"biases_[{l}] must be 1-D, got shape {np.shape(b)}")
            B.append(_param_array(b, f"biases_[{l}]", None))
        if isinstance(units, tuple) and all(isinstance(u, tuple) for u in units):
            # units_ holds one name per unit: the layer sizes the biases must have
            want = tuple(len(u) for u in units)
            if len(B) != len(want):
                raise ValueError(f"biases_ and units_ disagree: units_ has {len(want)} layers, "
                                 f"biases_ holds {len(B)} vectors (one per layer)")
            for l, (b, n) in enumerate(zip(B, want)):
                if b.shape != (n,):
                    raise ValueError(f"biases_[{l}] has shape {b.shape} but units_[{l}] names "
                                     f"{n} units")
        sizes = tuple(b.shape[0] for b in B)
        if any(n < 1 for n in sizes):
            raise ValueError(f"every layer needs at least one unit; biases_ gives sizes {sizes}")
        L = len(sizes)
        W = [_param_array(w, f"weights_[{l}]", (sizes[l + 1], sizes[l]))
             for l, w in enumerate(_param_list(weights, "weights_", L - 1))]
        V = [_param_array(v, f"variances_[{l}]", (sizes[l],))
             for l, v in enumerate(_param_list(variances, "variances_", L))]
        for l, v in enumerate(V):
            if np.any(v < _TINY):
                raise ValueError(f"variances_[{l}] must be positive (at least {_TINY:g}), "
                                 f"found {v[v < _TINY][0]!r}")
        if not isinstance(units, tuple) or len(units) != L or not all(isinstance(u, tuple) for u in units):
            raise ValueError(f"units_ must be a tuple of {L} tuples of unit type names (one per "
                             f"layer), got {units!r}")
        self.units = _check_units(units, sizes, name="units_")
        self.sizes, self.weights, self.biases, self.variances = sizes, W, B, V

    def flat(self):
        """The kernel's arrays (see csrc/mf_nlgbn.h for their layout)."""
        sizes = np.array(self.sizes, dtype=np.intp)
        L = len(sizes)
        offset = np.zeros(L + 1, dtype=np.intp)
        offset[1:] = np.cumsum(sizes)
        U = int(offset[-1])
        woff = np.zeros(L - 1, dtype=np.intp)
        for l in range(1, L - 1):
            woff[l] = woff[l - 1] + sizes[l - 1] * sizes[l]
        WT = np.concatenate([np.ascontiguousarray(w.T).ravel() for w in self.weights])
        bias = np.concatenate(self.biases)
        prec = 1.0 / np.concatenate(self.variances)
        acoef = np.zeros(U)
        with np.errstate(over="ignore", invalid="ignore"):
            for l, w in enumerate(self.weights):
                pc = prec[offset[l + 1]:offset[l + 2]]
                acoef[offset[l]:offset[l + 1]] = 0.5 * ((w * w) * pc[:, None]).sum(axis=0)
                if not np.all(np.isfinite(acoef[offset[l]:offset[l + 1]])):
                    raise ValueError(
                        f"weights_[{l}] are too large for variances_[{l + 1}]: "
                        "sum of weight**2 / variance overflows float64"
                    )
        types = np.array([_CODE[name] for names in self.units for name in names], dtype=np.int8)
        soff = np.zeros(L - 1, dtype=np.intp)
        base = 4 * U
        for l in range(L - 1):
            soff[l] = base
            base += (sizes[l] + 1) ** 2 + sizes[l + 1] * (sizes[l] + 1)
        return dict(sizes=sizes, offset=offset, woff=woff, types=types, WT=WT, bias=bias,
                    prec=prec, acoef=acoef, soff=soff, stat_size=int(base))
