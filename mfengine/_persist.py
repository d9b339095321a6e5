"""Model files: ``model.save(path)`` and ``mf.load(path)``.

A model file is a ``.npz`` archive (uncompressed) with three kinds of entries:

``_header``
    A JSON record: ``format_version``, ``mfengine_version``, ``class`` (the model's public
    name), ``params`` (the constructor's arguments) and ``state`` (the fitted attributes).
    Values that are arrays stand in the record as ``{"__array__": key}``; floats as
    ``{"__float__": repr}`` (so that they survive JSON bit for bit); tuples, sparse matrices
    (as CSR arrays) and random generators have their own tags.
``_keys``
    The names of the arrays, in the order of the entries ``a0``, ``a1``, ...
``a0``, ``a1``, ...
    The arrays, each a plain ``.npy`` entry: nothing is pickled.

``load`` treats the file as hostile input.  Before anything is built from it, and before any
scipy or compiled code sees a value, it checks that

* the archive holds only these entries, each an uncompressed ``.npy`` of a plain numeric,
  boolean or text dtype whose declared size matches the bytes the entry holds (so no
  allocation is larger than the file);
* the header is a record with exactly the five fields, of a format this mfengine reads, and
  names one of the package's model classes;
* every array is named by exactly one place of the record, and every tag is well formed;
  a sparse matrix's structure is checked in full (index ranges, a monotone ``indptr``);
* the parameters are exactly the class's constructor arguments (less those a class added
  since files were first written, ``_params_added``, which take the value that reproduces
  the model such a file holds), and the fitted attributes
  are among those the class declares (``_saved_state``), each of its declared kind, with the
  ones that belong together (``_saved_together``) all present or all absent;
* and finally the model's own checks (``_check_loaded``) accept the parameters and the
  fitted attributes together (shapes that agree, finite values, valid probabilities).

Anything else is refused with a ``ValueError`` that names the file and the entry.
"""
import io
import json
import numbers
import os
import re
import zipfile

import numpy as np

__all__ = ["FORMAT_VERSION", "MODEL_CLASSES", "load", "save"]

#: Version of the file format written by ``save``; ``load`` refuses a newer one.
FORMAT_VERSION = 1

#: The model classes a file may name (their public names, as ``mfengine.<name>``).
MODEL_CLASSES = ("SigmoidBeliefNet", "BeliefNet", "BeliefNetBatch", "NLGBN", "ContextHMM",
                 "GenerativeClassifier", "BernoulliMixture", "MixtureClassifier")

_HEADER_FIELDS = {"format_version", "mfengine_version", "class", "params", "state"}
_ENTRY = re.compile(r"(_header|_keys|a(0|[1-9][0-9]{0,5}))\.npy")
#: Limits on what a header may hold; far above what any model writes.
_MAX_ENTRIES = 100_000
_MAX_DEPTH = 8
_MAX_STRING = 10_000
_MAX_NPY_HEADER = 65_536
_MAX_NDIM = 8


class _Refused(ValueError):
    """One problem of one entry of a model file (the file's name is added by ``load``)."""


# ------------------------------------------------------------------------------ writing
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


def _fitted_state(model):
    """The model's fitted attributes (public names ending in one underscore), less those the
    model asks to leave out, and what it asks to keep beside them (``_saved_private``: private
    names that ``load`` sets back)."""
    extra, leave_out = model._saved_private() if hasattr(model, "_saved_private") else ({}, ())
    state = {k: v for k, v in vars(model).items()
             if k.endswith("_") and not k.startswith("_") and not k.endswith("__")
             and k not in leave_out}
    state.update(extra)
    return state


def _check_path(path, verb):
    if isinstance(path, str):
        return path
    if isinstance(path, os.PathLike):
        p = os.fspath(path)
        if isinstance(p, str):
            return p
    raise TypeError(f"{verb}: path must be a str or an os.PathLike naming a file, got "
                    f"{type(path).__name__} {path!r}")


def save(model, path):
    """Write ``model`` to ``path`` (``.npz`` is added if missing); returns the path written.

    Parameters
    ----------
    model : estimator
        One of the package's models.
    path : str or os.PathLike
        Where to write.

    Returns
    -------
    path : str
        The file written.

    Raises
    ------
    TypeError
        If ``path`` is neither a str nor a path-like object.
    ValueError
        If the model's parameters or fitted attributes are not valid (``load`` would refuse
        the file): the message names the attribute.
    """
    from mfengine import __version__

    path = _check_path(path, "save")
    model._check_loaded()       # a file load would refuse is never written
    name = type(model).__name__
    arrays = {}
    header = {
        "format_version": FORMAT_VERSION,
        "mfengine_version": __version__,
        "class": f"mfengine:{name}" if name in MODEL_CLASSES else
                 f"{type(model).__module__}:{type(model).__qualname__}",
        "params": _encode("params", model.get_params(deep=False), arrays),
        "state": _encode("state", _fitted_state(model), arrays),
    }
    arrays = {f"a{k}": v for k, v in enumerate(arrays.values())} | {
        "_keys": np.array(list(arrays), dtype=str)}
    if not path.endswith(".npz"):
        path += ".npz"
    np.savez(path, _header=np.array(json.dumps(header)), **arrays)
    return path


# ------------------------------------------------------------------------------ reading
def _read_entry(archive, info, file_size):
    """The array of one ``.npy`` entry, after checking that its header is sound and that
    the size it declares is the size of the entry (never larger than the file)."""
    entry = info.filename[:-4]
    if info.compress_type != zipfile.ZIP_STORED:
        raise _Refused(f"entry {entry} is compressed; save writes every entry uncompressed")
    if info.file_size > file_size:
        raise _Refused(f"entry {entry} claims {info.file_size} bytes, more than the file holds")
    with archive.open(info) as f:
        head = f.read(8)
        if len(head) != 8 or head[:6] != b"\x93NUMPY" or head[6] not in (1, 2, 3):
            raise _Refused(f"entry {entry} is not a .npy array")
        width = 2 if head[6] == 1 else 4
        raw_len = f.read(width)
        n_header = int.from_bytes(raw_len, "little")
        if len(raw_len) != width or n_header > _MAX_NPY_HEADER:
            raise _Refused(f"entry {entry} has a damaged .npy header")
        text = f.read(n_header)
        if len(text) != n_header:
            raise _Refused(f"entry {entry} is truncated")
        try:
            fp = io.BytesIO(head + raw_len + text)
            version = np.lib.format.read_magic(fp)
            reader = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                      else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = reader(fp)
        except (ValueError, TypeError, SyntaxError, KeyError, RecursionError, MemoryError,
                UnicodeDecodeError, OverflowError) as exc:
            raise _Refused(f"entry {entry} has a damaged .npy header ({exc})") from None
        if (dtype.hasobject or dtype.names is not None or dtype.subdtype is not None
                or dtype.kind not in "biufU" or dtype.itemsize < 1):
            raise _Refused(f"entry {entry} has dtype {dtype}; model files hold numbers, "
                           "booleans and text only")
        if (not isinstance(shape, tuple) or len(shape) > _MAX_NDIM
                or not all(isinstance(k, int) and k >= 0 for k in shape)):
            raise _Refused(f"entry {entry} has an invalid shape {shape!r}")
        count = 1
        for k in shape:
            count *= k
        n_bytes = count * dtype.itemsize
        if 8 + width + n_header + n_bytes != info.file_size:
            raise _Refused(f"entry {entry} declares shape {shape} of {dtype} ({n_bytes} bytes) "
                           f"but holds {info.file_size - 8 - width - n_header} bytes of data")
        data = f.read(n_bytes)
        f.read(1)   # reaching the end makes zipfile compare the CRC
        if len(data) != n_bytes:
            raise _Refused(f"entry {entry} is truncated")
    arr = np.frombuffer(data, dtype=dtype, count=count)
    return arr.reshape(shape, order="F" if fortran else "C").copy()


def _read_header(text):
    """The JSON record of the ``_header`` entry."""
    if text.dtype.kind != "U" or text.shape != ():
        raise _Refused("entry _header is not a text record")
    try:
        header = json.loads(str(text))
    except (ValueError, RecursionError) as exc:
        raise _Refused(f"entry _header is not a JSON record ({exc})") from None
    if not isinstance(header, dict):
        raise _Refused("entry _header is not a record")
    return header


def _read_archive(path):
    """``(header, arrays)``: the decoded JSON header and the named arrays of a model file."""
    try:
        file_size = os.path.getsize(path)
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        with open(path, "rb") as f:
            magic = f.read(6)
        what = "a single .npy array" if magic == b"\x93NUMPY" else "not a .npz archive"
        raise _Refused(f"not an mfengine model file ({what})") from None
    except (zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise _Refused(f"not a readable .npz archive ({exc})") from None
    with archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        if len(infos) > _MAX_ENTRIES + 2:
            raise _Refused(f"the archive holds {len(infos)} entries")
        odd = [n for n in names if not _ENTRY.fullmatch(n)]
        if odd:
            raise _Refused(f"entry {odd[0]!r} is not part of an mfengine model file")
        if len(set(names)) != len(names):
            raise _Refused("the archive holds two entries of the same name")
        if "_header.npy" not in names:
            raise _Refused("not an mfengine model file (no _header entry)")
        by_name = {i.filename[:-4]: i for i in infos}
        try:
            header = _read_header(_read_entry(archive, by_name.pop("_header"), file_size))
            keys = (_read_entry(archive, by_name.pop("_keys"), file_size) if "_keys" in by_name
                    else np.array([], dtype="U1"))
            n = len(by_name)
            if keys.shape != (n,) or (n and keys.dtype.kind != "U"):   # (none: any dtype)
                raise _Refused(f"entry _keys must list the names of the {n} arrays a0..a{n - 1}")
            if set(by_name) != {f"a{k}" for k in range(n)}:
                raise _Refused(f"the arrays must be a0..a{n - 1}")
            keys = [str(k) for k in keys]
            if len(set(keys)) != n or any(len(k) > _MAX_STRING for k in keys):
                raise _Refused("entry _keys names an array twice")
            arrays = {}
            for k, key in enumerate(keys):
                try:
                    arrays[key] = _read_entry(archive, by_name[f"a{k}"], file_size)
                except _Refused as exc:      # name the array by what it holds
                    raise _Refused(str(exc).replace(f"entry a{k} ", f"entry {key} (a{k}) ", 1)) from None
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise _Refused(f"the archive is damaged ({exc})") from None
    for key, arr in arrays.items():     # NaN is never a valid value of a model: the file is damaged
        if arr.dtype.kind == "f" and np.isnan(arr).any():
            raise _Refused(f"entry {key} holds NaN")
    return header, arrays


def _check_csr(data, indices, indptr, shape, where):
    """A scipy CSR matrix from arrays that are checked in full first (with NumPy alone), so
    that scipy never indexes out of range."""
    from mfengine._validation import csr_from_arrays

    if not isinstance(shape, list) or not all(isinstance(k, int) for k in shape):
        raise _Refused(f"{where}: the shape of a sparse matrix must be two sizes, got {shape!r}")
    for part, a in (("data", data), ("indices", indices), ("indptr", indptr)):
        if not isinstance(a, np.ndarray):
            raise _Refused(f"{where}.{part} must be an array")
    if data.dtype.kind not in "biuf":
        raise _Refused(f"{where}.data must hold numbers")
    try:
        return csr_from_arrays(data, indices, indptr, tuple(shape), f"entry {where}")
    except ValueError as exc:
        raise _Refused(str(exc)) from None


def _make_rng(state, where):
    """A numpy Generator from a saved bit-generator state, refusing any other content."""
    if not isinstance(state, dict) or not isinstance(state.get("bit_generator"), str):
        raise _Refused(f"{where}: a random generator's state must name its bit generator")
    name = state["bit_generator"]
    if name not in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"):
        raise _Refused(f"{where}: unknown bit generator {name!r}")
    bit_generator = getattr(np.random, name)()
    try:
        bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError, IndexError) as exc:
        raise _Refused(f"{where}: not a valid {name} state ({exc})") from None
    return np.random.Generator(bit_generator)


class _Decoder:
    """Turns the header's record back into Python values, refusing any malformed tag, and
    counts the arrays it hands out (each must be named exactly once)."""

    def __init__(self, arrays):
        self.arrays = arrays
        self.used = set()

    def array(self, key, where):
        if not isinstance(key, str) or key not in self.arrays:
            raise _Refused(f"{where} names an array {key!r} that the file does not hold")
        if key in self.used:
            raise _Refused(f"{where} names the array {key!r} a second time")
        self.used.add(key)
        return self.arrays[key]

    def __call__(self, desc, where, depth=0):
        if depth > _MAX_DEPTH:
            raise _Refused(f"{where} is nested too deeply")
        if desc is None or isinstance(desc, (bool, int)):
            return desc
        if isinstance(desc, str):
            if len(desc) > _MAX_STRING:
                raise _Refused(f"{where} is a string of {len(desc)} characters")
            return desc
        if isinstance(desc, list):
            return [self(d, f"{where}[{k}]", depth + 1) for k, d in enumerate(desc)]
        if not isinstance(desc, dict) or len(desc) not in (1, 2):
            raise _Refused(f"{where} is not a value of a model file ({type(desc).__name__})")
        tag = next(iter(desc))
        body = desc[tag]
        if set(desc) == {"__csr__", "shape"}:
            if not isinstance(body, list) or len(body) != 3:
                raise _Refused(f"{where}: a sparse matrix needs data, indices and indptr")
            parts = [self(d, where, depth + 1) for d in body]
            return _check_csr(*parts, desc["shape"], where)
        if len(desc) != 1:
            raise _Refused(f"{where} has unknown fields {sorted(desc)}")
        if tag == "__array__":
            return self.array(body, where)
        if tag == "__float__":
            if not isinstance(body, str) or len(body) > 40:
                raise _Refused(f"{where} is not a number")
            try:
                return float(body)
            except ValueError:
                raise _Refused(f"{where} is not a number ({body!r})") from None
        if tag == "__tuple__" and isinstance(body, list):
            return tuple(self(d, f"{where}[{k}]", depth + 1) for k, d in enumerate(body))
        if tag == "__dict__" and isinstance(body, dict):
            return {k: self(v, f"{where}.{k}", depth + 1) for k, v in body.items()}
        if tag == "__rng__":
            return _make_rng(body, where)
        raise _Refused(f"{where} has an unknown tag {tag!r}")


# The kinds of fitted attributes a class may declare in ``_saved_state``: what each must be.
def _is_array(v, kinds="biuf", ndim=None):
    return (isinstance(v, np.ndarray) and v.dtype.kind in kinds
            and (ndim is None or v.ndim == ndim))


def _is_sparse(v):
    return type(v).__module__.startswith("scipy.sparse")


def _is_numeric(v, depth=0):
    """A numeric array, or (as a user may have assigned one) a nested list of numbers."""
    if _is_array(v):
        return True
    if isinstance(v, (list, tuple)) and depth < 3:
        return all(isinstance(x, (int, float)) or _is_numeric(x, depth + 1) for x in v)
    return False


_KINDS = {
    "array": (_is_numeric, "a numeric array"),
    "labels": (lambda v: _is_array(v, "biufU", 1), "a 1-D array of labels"),
    "vector": (lambda v: _is_array(v, "f", 1), "a 1-D float array"),
    "arrays": (lambda v: isinstance(v, (list, tuple)) and all(_is_numeric(a) for a in v),
               "a list of numeric arrays"),
    "nested arrays": (lambda v: isinstance(v, (list, tuple)) and all(
        isinstance(a, (list, tuple)) and all(_is_numeric(b) for b in a) for a in v),
        "a list of lists of numeric arrays"),
    "vectors": (lambda v: isinstance(v, list) and all(_is_array(a, "f", 1) for a in v),
                "a list of 1-D float arrays"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62,
              "a non-negative integer"),
    "counts": (lambda v: _is_array(v, "iu", 1) and (v.size == 0 or v.min() >= 0),
               "a 1-D array of non-negative integers"),
    "flag": (lambda v: isinstance(v, bool), "True or False"),
    "flags": (lambda v: _is_array(v, "b", 1), "a 1-D boolean array"),
    "name": (lambda v: isinstance(v, str), "a string"),
    "names": (lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
              "a list of strings"),
    "name table": (lambda v: isinstance(v, tuple) and all(
        isinstance(t, tuple) and all(isinstance(s, str) for s in t) for t in v),
        "a tuple of tuples of strings"),
    "sparse": (_is_sparse, "a sparse matrix"),
    "weights": (lambda v: _is_array(v) or _is_sparse(v) or (
        isinstance(v, list) and all(_is_sparse(a) for a in v)),
        "an array, a sparse matrix or a list of sparse matrices"),
}


def _check_state(cls, state):
    declared = getattr(cls, "_saved_state", {})
    for key, value in state.items():
        if key not in declared:
            raise _Refused(f"entry state.{key} is not a fitted attribute of {cls.__name__}")
        test, what = _KINDS[declared[key]]
        if not test(value):
            raise _Refused(f"entry state.{key} must be {what}")
    for group in getattr(cls, "_saved_together", ()):
        present = [k for k in group if k in state]
        if present and len(present) != len(group):
            missing = sorted(set(group) - set(present))
            raise _Refused(f"entry state.{missing[0]} is missing: {cls.__name__} saves "
                           f"{', '.join(sorted(group))} together")


def _model_class(name):
    import mfengine

    if not isinstance(name, str):
        raise _Refused("the header's class must be a string")
    module, _, qualname = name.partition(":")
    if not (module == "mfengine" or module.startswith("mfengine.")) or qualname not in MODEL_CLASSES:
        raise _Refused(f"the header names class {name!r}, not an mfengine model")
    return getattr(mfengine, qualname)


def load(path):
    """Read a model written by ``model.save(path)``.

    The file is treated as untrusted input: it is checked in full (see
    :mod:`mfengine._persist`) before a model is built from it.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npz`` file written by ``save``.

    Returns
    -------
    model : estimator
        A model of the saved class, with the saved parameters and fitted attributes; it gives
        bit-identical scores.

    Raises
    ------
    TypeError
        If ``path`` is neither a str nor a path-like object.
    ValueError
        If the file is not a valid mfengine model file (the message names the file and the
        entry at fault), or was written in a newer format.
    FileNotFoundError
        If there is no such file.

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
    path = _check_path(path, "load")
    try:
        return _load(path)
    except _Refused as exc:
        raise ValueError(f"the model file {path} is refused: {exc}") from None


def _load(path):
    header, arrays = _read_archive(path)
    if set(header) != _HEADER_FIELDS:
        odd = sorted(set(header) ^ _HEADER_FIELDS)
        raise _Refused(f"the header must have the fields {sorted(_HEADER_FIELDS)}; "
                       f"{odd[0]!r} is {'missing' if odd[0] in _HEADER_FIELDS else 'not one'}")
    version = header["format_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _Refused(f"the header's format_version must be a positive integer, got {version!r}")
    if version > FORMAT_VERSION:
        raise _Refused(
            f"it was written in mfengine file format {version} (by mfengine "
            f"{str(header['mfengine_version'])[:40]}); this mfengine reads formats up to "
            f"{FORMAT_VERSION}: upgrade mfengine to load it")
    if not isinstance(header["mfengine_version"], str) or len(header["mfengine_version"]) > 100:
        raise _Refused("the header's mfengine_version must be a short string")
    cls = _model_class(header["class"])
    decode = _Decoder(arrays)
    params, state = (decode(header[k], k) for k in ("params", "state"))
    if len(decode.used) != len(arrays):
        extra = sorted(set(arrays) - decode.used)[0]
        raise _Refused(f"the array {extra!r} is named by no field of the header")
    if not isinstance(params, dict) or not isinstance(state, dict):
        raise _Refused("the header's params and state must be records")
    names = set(cls._get_param_names())
    for name, value in getattr(cls, "_params_added", {}).items():
        params.setdefault(name, value)
    if set(params) != names:
        odd = sorted(set(params) ^ names)[0]
        raise _Refused(f"entry params.{odd} is "
                       f"{'missing' if odd in names else 'not a parameter of ' + cls.__name__}")
    _check_state(cls, state)
    model = cls(**params)
    vars(model).update(state)
    if hasattr(model, "_after_load"):     # e.g. which fitted attributes are parameter copies
        model._after_load()
    try:
        model._check_loaded()
    except (ValueError, TypeError, OverflowError) as exc:
        raise _Refused(f"its parameters are not valid for {cls.__name__}: {exc}") from None
    return model
