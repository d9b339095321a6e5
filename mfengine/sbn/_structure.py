"""The edges of a DAG in the compressed form every DAG kernel reads."""
import numpy as np

__all__ = ["DagStructure", "ACTIVATIONS"]

#: The unit activations of DAG belief nets.
ACTIVATIONS = ("sigmoid", "noisy_or")


class DagStructure:
    """The sparsity pattern of a DAG in the compressed form every DAG kernel reads.

    Built from a boolean (n_units, n_units) mask of nonzero weights (``mask[i, j]``: an edge
    from j to i, j < i).  All arrays are C-contiguous ``intp``:

    par_ptr (n_units + 1,), par_idx (nnz,)
        The parents of unit i are ``par_idx[par_ptr[i]:par_ptr[i + 1]]``, ascending.  The
        weights of the edges are stored in this same order: ``w[k]`` is the weight of the
        edge ``par_idx[k] -> i``, so a net's weights are one (nnz,) vector, and a batch of nets
        sharing the pattern is an (n_nets, nnz) array.
    ch_ptr (n_units + 1,), ch_idx (nnz,), ch_w (nnz,)
        The children of unit j are ``ch_idx[ch_ptr[j]:ch_ptr[j + 1]]``, ascending; the weight
        of the edge j -> ``ch_idx[k]`` is ``w[ch_w[k]]``.
    """

    def __init__(self, mask):
        mask = np.asarray(mask, dtype=bool)
        n = mask.shape[0]
        rows, cols = np.nonzero(mask)  # row-major: grouped by child i, parents ascending
        self.n_units = n
        self.nnz = rows.size
        self.par_ptr = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(np.bincount(rows, minlength=n), out=self.par_ptr[1:])
        self.par_idx = np.ascontiguousarray(cols, dtype=np.intp)
        order = np.lexsort((rows, cols))  # grouped by parent j, children ascending
        self.ch_ptr = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(np.bincount(cols, minlength=n), out=self.ch_ptr[1:])
        self.ch_idx = np.ascontiguousarray(rows[order], dtype=np.intp)
        self.ch_w = np.ascontiguousarray(order, dtype=np.intp)
        self._rows = rows
        self._cols = cols

    def pack(self, W):
        """The (..., nnz) weight vectors of dense (..., n_units, n_units) matrices ``W``."""
        return np.ascontiguousarray(np.asarray(W, dtype=np.float64)[..., self._rows, self._cols])

    def unpack(self, w):
        """Dense (..., n_units, n_units) matrices from (..., nnz) weight vectors ``w``."""
        w = np.asarray(w, dtype=np.float64)
        out = np.zeros(w.shape[:-1] + (self.n_units, self.n_units))
        out[..., self._rows, self._cols] = w
        return out

    def mask(self):
        """The (n_units, n_units) boolean mask of the edges."""
        m = np.zeros((self.n_units, self.n_units), dtype=bool)
        m[self._rows, self._cols] = True
        return m

    def same_as(self, other):
        return (self.n_units == other.n_units and self.nnz == other.nnz
                and np.array_equal(self.par_idx, other.par_idx)
                and np.array_equal(self.par_ptr, other.par_ptr))
