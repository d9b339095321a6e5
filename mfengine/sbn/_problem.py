"""The problem records of the belief-net kernels: plain, checked arrays.

An estimator checks its parameters and its data once per call and builds these records;
everything below it (:mod:`mfengine.sbn._solve`, :mod:`mfengine.sbn._learn`, the compiled
kernels) reads the records and never the estimator.

``LayeredNet``
    A layered sigmoid net as the Gaussian kernel reads it: one weight matrix per pair of
    layers and one bias vector per layer (float64, C-contiguous).
``DagNets``
    One or many nets over one DAG as the DAG kernels (sjj, Plefka, sampling, importance)
    read them: the edges (a :class:`~mfengine.sbn._structure.DagStructure`), the packed
    weights ``w`` (n_nets, nnz), the biases ``h`` (n_nets, n_units), the visible units and the
    activation.
``Items``
    What one call solves: each item's clamped values (NaN at its free units), the net each
    item belongs to, and the leading shape of the answer.
"""
from dataclasses import dataclass

import numpy as np

from mfengine.sbn._structure import DagStructure

__all__ = ["LayeredNet", "DagNets", "Items"]


@dataclass(frozen=True, eq=False)
class LayeredNet:
    """A layered net's checked parameters, top layer first.

    Parameters
    ----------
    weights : list of ndarray
        ``weights[l]`` of shape (sizes[l + 1], sizes[l]), float64.
    biases : list of ndarray
        ``biases[l]`` of shape (sizes[l],), float64.
    """

    weights: list
    biases: list

    @property
    def sizes(self):
        """Units per layer, top first."""
        return tuple(b.shape[0] for b in self.biases)

    @property
    def n_visible(self):
        """Units of the last layer."""
        return self.biases[-1].shape[0]

    @property
    def n_hidden(self):
        """Units of every layer but the last."""
        return sum(b.shape[0] for b in self.biases[:-1])

    def packed_weights(self):
        """The weights in the parent order of ``DagStructure.layered(sizes)``: (n_weights,)."""
        return np.concatenate([np.ravel(W) for W in self.weights] + [np.zeros(0)])

    def dag(self, structure):
        """The same net as a ``DagNets`` record over ``structure`` (the layered structure
        of its sizes, ``DagStructure.layered``): every inter-layer weight is an edge."""
        visible = np.zeros(structure.n_units, dtype=bool)
        visible[structure.n_units - self.n_visible:] = True
        return DagNets(structure, self.packed_weights()[None], np.concatenate(self.biases)[None],
                       visible, "sigmoid", batch=False)


@dataclass(frozen=True, eq=False)
class Items:
    """The items of one call.

    Parameters
    ----------
    clamp : ndarray of shape (n_items, n_units)
        Each clamped unit's value (0 or 1), NaN at the free units (hidden, or visible and
        missing).
    net_of : ndarray of shape (n_items,)
        The net each item belongs to (intp).
    shape : tuple
        The leading shape of the answers: (n_patterns,) for one net, (n_nets,) or
        (n_nets, m) for a batch.
    """

    clamp: np.ndarray
    net_of: np.ndarray
    shape: tuple

    @property
    def n(self):
        """Number of items."""
        return self.clamp.shape[0]


@dataclass(frozen=True, eq=False)
class DagNets:
    """Nets over one DAG, checked, as the DAG kernels read them.

    Parameters
    ----------
    structure : DagStructure
        The edges.
    w : ndarray of shape (n_nets, nnz)
        The weights of every edge, per net, in edge order.
    h : ndarray of shape (n_nets, n_units)
        The biases.
    visible : ndarray of bool of shape (n_units,)
        The visible units (the data's columns, in unit order).
    activation : {"sigmoid", "noisy_or"}
        The units' activation.
    batch : bool
        Whether the data come net by net (a batch: ``X`` of shape (n_nets, n_visible) or
        (n_nets, m, n_visible)) or are patterns of the first net (``X`` (n, n_visible)).
    """

    structure: DagStructure
    w: np.ndarray
    h: np.ndarray
    visible: np.ndarray
    activation: str
    batch: bool = False

    @property
    def n_units(self):
        return self.structure.n_units

    @property
    def n_nets(self):
        return self.w.shape[0]

    @property
    def noisy_or(self):
        return self.activation == "noisy_or"

    def items(self, V, miss=None):
        """The items of checked data ``V`` (missing entries marked by ``miss``, which may
        hold anything there): (n, n_visible) for one net, (n_nets, n_visible) or
        (n_nets, m, n_visible) for a batch."""
        if miss is not None:
            V = np.where(miss, np.nan, V)
        if not self.batch:
            clamp = np.full((V.shape[0], self.n_units), np.nan)
            clamp[:, self.visible] = V
            return Items(clamp, np.zeros(V.shape[0], dtype=np.intp), (V.shape[0],))
        squeeze = V.ndim == 2
        V3 = V[:, None, :] if squeeze else V
        k, m = V3.shape[:2]
        clamp = np.full((k * m, self.n_units), np.nan)
        clamp[:, self.visible] = V3.reshape(k * m, V3.shape[2])
        return Items(clamp, np.repeat(np.arange(k, dtype=np.intp), m),
                     (k,) if squeeze else (k, m))

    def hidden_init(self, init_mu, n):
        """``init_mu`` (n, n_hidden), the hidden units' starting means, as the kernels take
        them: (n, n_units) with 0.5 at the visible units; None stays None."""
        if init_mu is None:
            return None
        from mfengine._validation import as_array

        hid = ~self.visible
        init_mu = as_array(init_mu, "init_mu", np.float64)
        if init_mu.shape != (n, int(hid.sum())):
            raise ValueError(f"init_mu must have shape {(n, int(hid.sum()))} (the hidden units "
                             f"in order), got {init_mu.shape}")
        if not np.all((init_mu >= 0.0) & (init_mu <= 1.0)):
            raise ValueError("init_mu must lie in [0, 1] (and contain no NaN)")
        mu0 = np.full((n, self.n_units), 0.5)
        mu0[:, hid] = init_mu
        return mu0
