"""Damaged, foreign and crafted model files, for the fuzz profiles and the persistence tests.

A fuzz case of the ``load`` family starts from a model file written by ``save`` (one base
file per kind of model, built once per child process: ``fresh_copy(kind)``), damages a copy
of it with ONE of the edits below, and calls ``mf.load`` on it, then scores data with the
loaded model.  Every edit is a call of a function of this module, so that a case prints as a
one-line reproducer.

    truncate(p, frac)                 cut the file at a fraction of its length
    flip_bit(p, frac, bit)            flip one bit at a fraction of its length
    foreign(p, what)                  replace the file by something else: a .npy array, a zip
                                      of other things, a pickle, random bytes, an empty file
    replace_array(p, key, hostile)    replace one stored array (by its name in _keys) by a
                                      hostile value: huge or negative indices, NaN, inf, wrong
                                      dtypes, mismatched shapes
    edit_header(p, op, section, key)  add, remove or rename a key of the header (top level,
                                      params or state), or set it to a hostile JSON value
    edit_keys(p, op)                  drop, repeat or reorder the names of the arrays

Every edit leaves a file that ``load`` must refuse with a ValueError naming the file, or (a
few crafted values that are still valid: a weight of 0.5, two arrays of one shape swapped)
load to a model that scores finite numbers.
"""
import json
import os
import pickle
import shutil
import tempfile
import zipfile

import numpy as np

#: The kinds of base model: name -> source that builds ``m`` (saved) and ``X`` (data it scores).
MODELS = {
    "sbn": "m = mf.SigmoidBeliefNet([2, 3, 4], random_state=0, progress=False)\n"
           "X = m.sample(6, random_state=1)",
    "sbn-fitted": "m = mf.SigmoidBeliefNet([2, 4], max_iter=2, random_state=0, progress=False)\n"
                  "X = m.sample(6, random_state=1)\nm.fit(X)",
    "sbn-unfitted": "m = mf.SigmoidBeliefNet([2, 4], random_state=0, progress=False)\n"
                    "X = np.zeros((3, 4))",
    "dag": "m = mf.BeliefNet(np.tril(np.full((5, 5), 0.5), -1), np.zeros(5), [3, 4], "
           "progress=False)\nX = m.sample(4, random_state=0)\nm.score_samples(X)",
    "dag-sparse-fitted": "import scipy.sparse\n"
                         "m = mf.BeliefNet(scipy.sparse.csr_matrix(np.tril(np.full((5, 5), 0.5), -1)), "
                         "np.full(5, 0.1), [3, 4], max_iter=2, batch_size=4, random_state=0, "
                         "progress=False)\nX = m.sample(8, random_state=0)\nm.fit(X)",
    "dag-noisy-or": "import scipy.sparse\n"
                    "m = mf.datasets.make_diagnosis_net(6, 10, 2, random_state=0)\n"
                    "m.set_params(progress=False)\nX = m.sample(4, random_state=0)\nm.score_samples(X)",
    "batch": "m = mf.BeliefNetBatch(np.stack([np.tril(np.full((4, 4), s), -1) for s in (0.5, 1.0)]), "
             "np.zeros((2, 4)), [2, 3], progress=False)\nX = np.array([[0.0, 1.0], [1.0, 1.0]])\n"
             "m.score_samples(X)",
    "batch-sparse": "import scipy.sparse\n"
                    "m = mf.BeliefNetBatch([scipy.sparse.csr_matrix(np.tril(np.full((4, 4), s), -1)) "
                    "for s in (0.5, 1.0)], np.zeros((2, 4)), [2, 3], progress=False)\n"
                    "X = np.array([[0.0, 1.0], [1.0, 1.0]])\nm.score_samples(X)",
    "nlgbn": "m = mf.NLGBN([1, 3, 4], units=['binary', 'rectified', 'linear'], max_iter=2, "
             "random_state=0, progress=False)\nX = m.sample(10, random_state=1)\nm.partial_fit(X)",
    "hmm": "m = mf.ContextHMM(n_states=2, n_features=1, lag=1, context='both', max_iter=2, "
           "bw_max_iter=2, random_state=0, progress=False)\n"
           "X = np.random.default_rng(0).normal(size=(30, 1))\nm.fit(X)",
    "classifier": "Xc = (np.random.default_rng(0).random((16, 4)) < 0.5).astype(float)\n"
                  "m = mf.GenerativeClassifier(hidden=(2,), max_iter=1, random_state=0, "
                  "progress=False).fit(Xc, np.repeat([0, 1], 8))\nX = Xc[:4]",
    "mixture": "X = (np.random.default_rng(0).random((16, 4)) < 0.5).astype(float)\n"
               "m = mf.BernoulliMixture(2, max_iter=5, random_state=0).fit(X)",
    "mixture-classifier": "Xc = (np.random.default_rng(0).random((16, 4)) < 0.5).astype(float)\n"
                          "m = mf.MixtureClassifier(2, max_iter=5, random_state=0)"
                          ".fit(Xc, np.repeat(['a', 'b'], 8))\nX = Xc[:4]",
}

#: What a loaded model of each kind computes for the check (the answer must be finite).
SCORE = {kind: "m.score_samples(X)" for kind in MODELS}
SCORE.update({"hmm": "m.score(X)", "classifier": "m.predict_proba(X)",
              "mixture-classifier": "m.predict_proba(X)"})

#: Hostile replacements of one stored array, as source (``a`` is the array replaced).
HOSTILE_ARRAYS = {
    "nan": "np.full(a.shape, np.nan)",
    "inf": "np.full(a.shape, np.inf)",
    "huge": "np.full(a.shape, 1e300)",
    "int max": "np.full(a.shape, np.iinfo(np.int64).max, dtype=np.int64)",
    "minus one": "np.full(a.shape, -1, dtype=a.dtype if a.dtype.kind in 'iuf' else np.int64)",
    "uint max": "np.full(a.shape, np.iinfo(np.uint64).max, dtype=np.uint64)",
    "int32 max": "np.full(a.shape, 2**31 - 1, dtype=np.int32)",
    "complex": "np.zeros(a.shape, dtype=complex)",
    "text": "np.full(a.shape, 'x')",
    "bytes": "np.full(a.shape, b'x')",
    "bool": "np.ones(a.shape, dtype=bool)",
    "float16": "np.zeros(a.shape, dtype=np.float16)",
    "empty": "np.zeros((0,))",
    "scalar": "np.array(0.5)",
    "extra dim": "a[None]",
    "one longer": "np.concatenate([a.ravel(), a.ravel()[:1]]) if a.size else np.zeros(1)",
    "one shorter": "a.ravel()[:-1]",
    "transposed": "a.T.copy() if a.ndim == 2 else a[::-1].copy()",
    "big shape": "np.zeros((7, 9))",
    "valid half": "np.full(a.shape, 0.5)",
    "zeros": "np.zeros_like(a)",
    "record": "np.zeros(a.shape, dtype=[('x', float)])",
    "object": "np.array([None] * max(a.size, 1), dtype=object)",
}

#: Hostile JSON values for a header field.
HOSTILE_JSON = {
    "null": None, "int": 3, "huge int": 2**70, "negative": -1, "float": 0.5, "string": "abc",
    "list": [1, 2], "empty dict": {}, "nested": [[[[[[[[[[[[1]]]]]]]]]]]],
    "array tag": {"__array__": "nope"}, "float tag": {"__float__": "nan"},
    "bad float tag": {"__float__": "x" * 100}, "tuple tag": {"__tuple__": 3},
    "dict tag": {"__dict__": [1]}, "rng tag": {"__rng__": {"bit_generator": "PCG64", "state": 1}},
    "csr tag": {"__csr__": [], "shape": [2, 2]}, "unknown tag": {"__pickle__": "x"},
    "two tags": {"__array__": "a", "__float__": "1"},
}

_BASES = {}


def base_file(kind):
    """The path of a model file of ``kind`` (built once per process), its data, its score."""
    import mfengine as mf

    if kind not in _BASES:
        ns = {"np": np, "mf": mf}
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(MODELS[kind], ns)
        path = ns["m"].save(os.path.join(tempfile.mkdtemp(prefix="mf-base-"), kind))
        _BASES[kind] = (path, ns["X"])
    return _BASES[kind]


def fresh_copy(kind):
    """A copy of the base file of ``kind`` in a new directory: ``(path, X)``."""
    path, X = base_file(kind)
    dest = os.path.join(tempfile.mkdtemp(prefix="mf-case-"), "m.npz")
    shutil.copyfile(path, dest)
    return dest, X


def score(kind, model, X):
    """What the check reads of a loaded model."""
    return eval(SCORE[kind], {"m": model, "X": X, "np": np})


# ------------------------------------------------------------------------------ edits
def truncate(p, frac):
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(int(size * frac))


def flip_bit(p, frac, bit):
    with open(p, "r+b") as f:
        data = bytearray(f.read())
        k = min(int(len(data) * frac), len(data) - 1)
        data[k] ^= 1 << bit
        f.seek(0)
        f.write(data)


def foreign(p, what):
    if what == "npy":
        with open(p, "wb") as f:
            np.save(f, np.arange(5.0))
    elif what == "zip":
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("readme.txt", "not a model")
    elif what == "npz":
        np.savez(p, x=np.arange(3))
    elif what == "pickle":
        with open(p, "wb") as f:
            pickle.dump({"weights_": [np.zeros((2, 2))]}, f)
    elif what == "random":
        with open(p, "wb") as f:
            f.write(np.random.default_rng(0).bytes(4096))
    elif what == "empty":
        open(p, "wb").close()
    elif what == "compressed":
        d = dict(np.load(p))
        np.savez_compressed(p, **d)
    elif what == "extra entry":
        with zipfile.ZipFile(p, "a") as z:
            z.writestr("evil.npy", b"x")
    else:
        raise ValueError(what)


def _rewrite(p, edit):
    with np.load(p) as z:
        d = dict(z)
    header = json.loads(str(d["_header"]))
    edit(d, header)
    d["_header"] = np.array(json.dumps(header))
    np.savez(p, **d)


def replace_array(p, index, hostile):
    """Replace the array listed at ``index`` of _keys (wrapped around) by HOSTILE_ARRAYS[...]."""
    def edit(d, header):
        n = len(d["_keys"])
        if n == 0:
            d["a0"] = eval(HOSTILE_ARRAYS[hostile], {"np": np, "a": np.zeros(3)})
            return
        k = index % n
        d[f"a{k}"] = eval(HOSTILE_ARRAYS[hostile], {"np": np, "a": d[f"a{k}"]})
    if hostile == "object":       # np.savez pickles object arrays: write that file by hand
        with np.load(p) as z:
            d = dict(z)
        n = len(d["_keys"])
        d[f"a{index % max(n, 1)}"] = np.array([None, 1], dtype=object)
        np.savez(p, **d)
        return
    _rewrite(p, edit)


def _sections(header, section):
    if section == "top":
        return header
    node = header.get(section)
    if isinstance(node, dict) and isinstance(node.get("__dict__"), dict):
        return node["__dict__"]
    return header


def edit_header(p, op, section, key, value=None):
    """``op``: "add" (key = HOSTILE_JSON[value] or 1), "remove", "rename", "set"; ``key`` is
    a name, or an int picking one of the section's keys."""
    def edit(d, header):
        node = _sections(header, section)
        keys = sorted(node)
        name = keys[key % len(keys)] if isinstance(key, int) and keys else str(key)
        val = HOSTILE_JSON.get(value, 1)
        if op == "add":
            node[name if name not in node else name + "_x"] = val
        elif op == "remove":
            node.pop(name, None)
        elif op == "rename":
            if name in node:
                node[name + "_renamed"] = node.pop(name)
        elif op == "set":
            node[name] = val
    _rewrite(p, edit)


def edit_keys(p, op):
    def edit(d, header):
        keys = [str(k) for k in d["_keys"]]
        if op == "drop":
            keys = keys[:-1]
        elif op == "repeat" and keys:
            keys[-1] = keys[0]
        elif op == "reverse":
            keys = keys[::-1]
        elif op == "remove":
            d.pop("_keys")
            return
        elif op == "remove array" and keys:
            d.pop(f"a{len(keys) - 1}")
        d["_keys"] = np.array(keys, dtype=str)
    _rewrite(p, edit)
