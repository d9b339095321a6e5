"""The edges of a DAG in the compressed form every DAG kernel reads."""
import numpy as np

__all__ = ["DagStructure", "ACTIVATIONS"]


def _is_sparse(x):
    """Whether ``x`` is a scipy.sparse matrix or array (without importing SciPy for dense)."""
    return type(x).__module__.startswith("scipy.sparse")

#: The unit activations of DAG belief nets.
ACTIVATIONS = ("sigmoid", "noisy_or")


class DagStructure:
    """The sparsity pattern of a DAG in the compressed form every DAG kernel reads.

    Built from a boolean (n_units, n_units) mask of nonzero weights (``mask[i, j]``: an edge
    from j to i, j < i), or from a scipy.sparse matrix whose nonzero entries are the edges
    (then nothing of size n_units**2 is allocated).  All arrays are C-contiguous ``intp``:

    par_ptr (n_units + 1,), par_idx (nnz,)
        The parents of unit i are ``par_idx[par_ptr[i]:par_ptr[i + 1]]``, ascending.  The
        weights of the edges are stored in this same order: ``w[k]`` is the weight of the
        edge ``par_idx[k] -> i``, so a net's weights are one (nnz,) vector, and a batch of nets
        sharing the pattern is an (n_nets, nnz) array.
    ch_ptr (n_units + 1,), ch_idx (nnz,), ch_w (nnz,)
        The children of unit j are ``ch_idx[ch_ptr[j]:ch_ptr[j + 1]]``, ascending; the weight
        of the edge j -> ``ch_idx[k]`` is ``w[ch_w[k]]``.

    The arrays a constructor builds are read-only: consistent by construction, they are not
    checked again on every solve (``sealed``).  An array replaced by assignment is checked in
    full before use.
    """

    def __init__(self, mask):
        if _is_sparse(mask):
            self._from_sparse(mask)
            return
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
        self._rows = np.ascontiguousarray(rows, dtype=np.intp)
        self._cols = np.ascontiguousarray(cols, dtype=np.intp)
        self._seal()

    @classmethod
    def layered(cls, sizes):
        """Every edge from each layer to the next of a layered net (units numbered layer by
        layer, top first), built in O(n_units + n_weights) time and memory: unit i of layer
        l + 1 has every unit of layer l as a parent, and the edge weights in parent order are
        the layers' (sizes[l + 1], sizes[l]) weight matrices raveled and concatenated."""
        sizes = [int(k) for k in sizes]
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp)
        n, pairs = int(off[-1]), range(len(sizes) - 1)
        s = cls.__new__(cls)
        s.n_units = n
        s.nnz = sum(sizes[l] * sizes[l + 1] for l in pairs)
        fan_in, fan_out = np.zeros(n, np.intp), np.zeros(n, np.intp)
        for l in pairs:
            fan_in[off[l + 1]:off[l + 2]] = sizes[l]
            fan_out[off[l]:off[l + 1]] = sizes[l + 1]
        s.par_ptr, s.ch_ptr = np.zeros(n + 1, np.intp), np.zeros(n + 1, np.intp)
        np.cumsum(fan_in, out=s.par_ptr[1:])
        np.cumsum(fan_out, out=s.ch_ptr[1:])

        def cat(parts):
            return np.ascontiguousarray(np.concatenate([np.zeros(0, np.intp)] + parts),
                                        dtype=np.intp)

        top = [np.arange(off[l], off[l + 1], dtype=np.intp) for l in range(len(sizes))]
        s._cols = s.par_idx = cat([np.tile(top[l], sizes[l + 1]) for l in pairs])
        s._rows = cat([np.repeat(top[l + 1], sizes[l]) for l in pairs])
        s.ch_idx = cat([np.tile(top[l + 1], sizes[l]) for l in pairs])
        base = np.concatenate([[0], np.cumsum([sizes[l] * sizes[l + 1] for l in pairs])])
        s.ch_w = cat([(base[l] + np.arange(sizes[l + 1], dtype=np.intp)[None, :] * sizes[l]
                       + np.arange(sizes[l], dtype=np.intp)[:, None]).ravel() for l in pairs])
        s._seal()
        return s

    def _from_sparse(self, W):
        """The structure of a scipy.sparse matrix in O(n_units + nnz) time and memory: its
        canonical CSR form gives the parent lists, and a CSR -> CSC conversion (a stable
        counting sort, in SciPy's compiled code) of the edge numbers gives the child lists and
        each child entry's edge (no sort, nothing of size n_units**2)."""
        import scipy.sparse

        from mfengine._validation import check_sparse

        n = W.shape[0]
        csr = check_sparse(W, "W")
        if not csr.has_canonical_format:      # duplicate entries (COO input) are one edge
            csr = csr.copy()
            csr.sum_duplicates()
        keep = np.asarray(csr.data != 0)
        counts = np.diff(csr.indptr)
        if keep.all():
            cols = np.array(csr.indices, dtype=np.intp)
            rows = np.repeat(np.arange(n, dtype=np.intp), counts)
        else:
            rows = np.repeat(np.arange(n, dtype=np.intp), counts)[keep]
            cols = np.array(csr.indices[keep], dtype=np.intp)
            counts = np.bincount(rows, minlength=n)
        nnz = cols.size
        self.n_units = n
        self.nnz = nnz
        self.par_ptr = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(counts, out=self.par_ptr[1:])
        self.par_idx = cols
        ids = scipy.sparse.csr_matrix((np.arange(nnz, dtype=np.int64), cols, self.par_ptr),
                                      shape=(n, n)).tocsc()
        self.ch_ptr = np.ascontiguousarray(ids.indptr, dtype=np.intp)
        self.ch_idx = np.ascontiguousarray(ids.indices, dtype=np.intp)
        self.ch_w = np.ascontiguousarray(ids.data, dtype=np.intp)
        self._rows = rows
        self._cols = cols
        self._seal()

    #: The index arrays every DAG kernel reads (their consistency: ``sjj.check_structure``).
    ARRAYS = ("par_ptr", "par_idx", "ch_ptr", "ch_idx", "ch_w")

    def _seal(self):
        """Make the arrays this constructor built read-only and remember them: they are
        consistent by construction, so the kernels' callers need not check them again
        (``sealed``) until one is replaced."""
        for name in self.ARRAYS + ("_rows", "_cols"):
            getattr(self, name).flags.writeable = False
        self._sealed_as = (self.n_units, self.nnz) + tuple(id(getattr(self, k))
                                                         for k in self.ARRAYS)

    def sealed(self):
        """The five index arrays when they are still the read-only ones a constructor
        built (and ``n_units``, ``nnz`` still theirs), else None."""
        arrays = tuple(getattr(self, k, None) for k in self.ARRAYS)
        if getattr(self, "_sealed_as", None) != (getattr(self, "n_units", None),
                                                 getattr(self, "nnz", None)) + tuple(
                                                     map(id, arrays)):
            return None
        if any(a.flags.writeable for a in arrays):
            return None
        return arrays

    def pack(self, W):
        """The (..., nnz) weight vectors of dense (..., n_units, n_units) matrices ``W``, the
        (nnz,) vector of one scipy.sparse matrix, or the (n_nets, nnz) vectors of a list of
        them (a sparse batch)."""
        if isinstance(W, list):
            return np.stack([self.pack(w) for w in W])
        if _is_sparse(W):
            csr = W.tocsr()
            if self._same_pattern(csr):
                return np.array(csr.data, dtype=np.float64)      # a copy, as below
            # another stored pattern (explicit zeros, other entries): each edge's entry by
            # binary search over W's sorted entry keys, 0 where W stores none
            if not csr.has_canonical_format:
                csr = csr.copy()
                csr.sum_duplicates()
            keys = (np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
                    * self.n_units + csr.indices)
            out = np.zeros(self.nnz)
            if keys.size and self.nnz:
                edges = self._edge_keys()
                pos = np.minimum(np.searchsorted(keys, edges), keys.size - 1)
                hit = keys[pos] == edges
                out[hit] = np.asarray(csr.data, dtype=np.float64)[pos[hit]]
            return out
        return np.ascontiguousarray(np.asarray(W, dtype=np.float64)[..., self._rows, self._cols])

    def unpack(self, w, sparse=False):
        """Dense (..., n_units, n_units) matrices from (..., nnz) weight vectors ``w``; with
        ``sparse`` a CSR matrix from one (nnz,) vector (no O(n_units**2) memory)."""
        w = np.asarray(w, dtype=np.float64)
        if sparse:
            import scipy.sparse

            out = scipy.sparse.csr_matrix((w, (self._rows, self._cols)),
                                          shape=(self.n_units, self.n_units))
            out.sort_indices()
            return out
        out = np.zeros(w.shape[:-1] + (self.n_units, self.n_units))
        out[..., self._rows, self._cols] = w
        return out

    def _same_pattern(self, csr):
        """Whether the CSR matrix ``csr`` stores exactly the edges, in the edges' order (then
        its ``data`` is the packed weight vector)."""
        return bool(csr.has_sorted_indices and csr.indptr.shape == self.par_ptr.shape
                    and csr.indices.shape == self.par_idx.shape
                    and np.array_equal(csr.indptr, self.par_ptr)
                    and np.array_equal(csr.indices, self.par_idx))

    def _edge_keys(self):
        """row * n_units + col of every edge, ascending (the edges are stored row-major)."""
        keys = getattr(self, "_keys", None)
        if keys is None:
            keys = self._rows.astype(np.int64) * self.n_units + self._cols
            self._keys = keys
        return keys

    def covers(self, W):
        """Whether every nonzero weight of ``W`` (dense, batched, or scipy.sparse) lies on an
        edge.  O(nnz) for a CSR matrix with the structure's own pattern (the common case: the
        net's weights as built), O(nnz log nnz) otherwise; nothing of size n_units**2 for
        sparse input (a list of scipy.sparse matrices: a sparse batch)."""
        if isinstance(W, list):
            return all(self.covers(w) for w in W)
        if _is_sparse(W):
            if self._same_pattern(W.tocsr()):
                return True
            coo = W.tocoo()
            nz = coo.data != 0
            keys = coo.row[nz].astype(np.int64) * self.n_units + coo.col[nz]
        else:
            W = np.asarray(W)
            off = W != 0.0
            if W.ndim == 3:
                off = np.any(off, axis=0)
            r, c = np.nonzero(off)
            keys = r.astype(np.int64) * self.n_units + c
        edges = self._edge_keys()
        if keys.size == 0:
            return True
        if edges.size == 0:
            return False
        pos = np.minimum(np.searchsorted(edges, keys), edges.size - 1)
        return bool(np.all(edges[pos] == keys))

    def same_as(self, other):
        return (self.n_units == other.n_units and self.nnz == other.nnz
                and np.array_equal(self.par_idx, other.par_idx)
                and np.array_equal(self.par_ptr, other.par_ptr))
