"""Hypothesis strategies that draw fuzz cases for every public entry point of every family.

A case is a dict of Python source and metadata, so that it can be sent to a child process
and printed as a one-line reproducer::

    family   "SigmoidBeliefNet", "BeliefNet", "BeliefNetBatch", "NLGBN", "ContextHMM",
             "GenerativeClassifier", "mf.infer" (the dispatcher), "kernels"
             (mfengine.sbn.sjj / mfengine.sbn.plefka, the Python-visible solver entry points)
    setup    builds a small valid model ``m`` and data ``X`` (the family's base), then applies
             ONE hostile edit: a value, shape, dtype or layout of the data, a model parameter
             assigned after construction, a hyperparameter assigned after construction, or an
             argument of the call
    call     the entry point, assigning its answer to ``out``
    check    the property a returned answer must have (see worker.check)
    names    the words of the public API an error message must contain to be clear (the
             edited argument); empty when nothing was edited
    valid    True when the edit leaves the input valid (a read-only, Fortran-ordered or
             strided array, a list, 0 patterns where the answer is an empty array): then any
             error is a refusal of valid input

``generate(family, n, seed)`` draws ``n`` distinct cases with a fixed seed, so a run is
repeatable.
"""
import hashlib
import os

from hypothesis import strategies as st

# ------------------------------------------------------------------------------ values
#: Hostile floats, as source.
FLOATS = ["np.nan", "np.inf", "-np.inf", "1e300", "-1e300", "1e17", "-1e17", "1e-300",
          "5e-324", "-0.0", "0.0", "0.5", "-1.0", "2.0", "50.0", "1e3", "-1e3",
          "1.7976931348623157e308", "1e100"]
#: Hostile integers, as source (sizes that overflow int32, int64, uint64, and negatives).
INTS = ["-1", "0", "1", "2", "2**31 - 1", "2**31", "2**32", "2**62", "2**63 - 1", "2**63",
        "2**64", "-2**63", "-2**62", "np.int64(2**62)", "np.uint64(2**63)", "np.int32(-1)",
        "-(2**31)"]
#: Values of the wrong type, as source.
OTHERS = ["None", "'3'", "'abc'", "True", "False", "1j", "[1]", "()", "{}", "np.array([1, 2])",
          "object()", "b'x'", "np.float32(0.5)", "[0.1, 0.2]"]
#: Factors applied to a parameter array.
SCALES = ["1e17", "1e300", "-1e300", "1e3", "50.0", "100.0", "20.0", "1e-300", "np.nan",
          "np.inf", "0.0", "-1.0", "1e10", "1e100", "1e150", "-50.0"]
DTYPES = ["object", "complex", "str", "bool", "np.int64", "np.float32", "np.float16",
          "np.uint8"]


def lit(v):
    """Source for a Python float or int drawn by Hypothesis."""
    if isinstance(v, float):
        if v != v:
            return "np.nan"
        if v in (float("inf"), float("-inf")):
            return "np.inf" if v > 0 else "-np.inf"
        return repr(v)
    return repr(v)


def _big_or_small(v):
    # no mid-size integers: a valid but huge budget or sample count is a slow call, not a
    # finding, and a mid-size allocation would take real memory
    return abs(v) < 1000 or abs(v) > 2**40


FLOAT_VALUE = st.one_of(st.sampled_from(FLOATS),
                        st.floats(allow_nan=True, allow_infinity=True).map(lit))
INT_VALUE = st.one_of(st.sampled_from(INTS),
                      st.integers(-2**70, 2**70).filter(_big_or_small).map(lit))
ANY_VALUE = st.one_of(st.sampled_from(INTS), st.sampled_from(FLOATS), st.sampled_from(OTHERS),
                      st.floats(allow_nan=True, allow_infinity=True).map(lit),
                      st.integers(-2**70, 2**70).filter(_big_or_small).map(lit))


def _shape(s):
    return "(" + ", ".join(str(k) for k in s) + ("," if len(s) == 1 else "") + ")"


# ------------------------------------------------------------------------------ edits
ARRAY_EDITS = ("fill", "elem", "scale", "wider", "narrower", "empty_rows", "transpose",
               "add_dim", "ravel", "scalar", "dtype", "fortran", "strided", "readonly",
               "list", "none", "string", "negative", "ragged")
#: Edits that leave an array's values as they were (only its layout or container changes).
LAYOUT_EDITS = ("fortran", "strided", "readonly")


@st.composite
def array_edit(draw, target, shape, name, values=FLOAT_VALUE, edits=ARRAY_EDITS,
               list_valid=False):
    """Source that replaces ``target`` (an expression holding an array of ``shape``) by a
    hostile version; returns (source, label, valid)."""
    kind = draw(st.sampled_from(edits))
    T = target
    valid = kind in LAYOUT_EDITS or (kind == "list" and list_valid)
    if kind == "fill":
        v = draw(values)
        src, label = f"{T} = np.full({_shape(shape)}, {v})", f"{name} filled with {v}"
    elif kind == "elem":
        v = draw(values)
        idx = draw(st.sampled_from(["0", "-1"]))
        src = f"_a = np.array({T}, dtype=float)\n_a.flat[{idx}] = {v}\n{T} = _a"
        label = f"{name}.flat[{idx}] = {v}"
    elif kind == "scale":
        v = draw(st.sampled_from(SCALES))
        src, label = f"{T} = np.asarray({T}) * {v}", f"{name} * {v}"
    elif kind in ("wider", "narrower", "empty_rows"):
        s = list(shape)
        if kind == "wider":
            s[-1] += 1
        elif kind == "narrower":
            s[-1] = max(0, s[-1] - 1)
        else:
            s[0] = 0
        src, label = f"{T} = np.full({_shape(s)}, 0.25)", f"{name} of shape {tuple(s)}"
    elif kind == "transpose":
        src, label = f"{T} = np.ascontiguousarray(np.asarray({T}).T)", f"{name} transposed"
    elif kind == "add_dim":
        src, label = f"{T} = np.asarray({T})[None]", f"{name} with an extra axis"
    elif kind == "ravel":
        src, label = f"{T} = np.ravel({T})", f"{name} raveled"
    elif kind == "scalar":
        v = draw(ANY_VALUE)
        src, label = f"{T} = {v}", f"{name} = {v}"
    elif kind == "dtype":
        dt = draw(st.sampled_from(DTYPES))
        src, label = f"{T} = np.asarray({T}).astype({dt})", f"{name} as dtype {dt}"
    elif kind == "fortran":
        src, label = f"{T} = np.asfortranarray({T})", f"{name} Fortran-ordered"
    elif kind == "strided":
        src = f"{T} = np.repeat(np.asarray({T}), 2, axis=-1)[..., ::2]"
        label = f"{name} a strided view"
    elif kind == "readonly":
        src = f"_a = np.array({T})\n_a.setflags(write=False)\n{T} = _a"
        label = f"{name} read-only"
    elif kind == "list":
        src, label = f"{T} = np.asarray({T}).tolist()", f"{name} as a list"
    elif kind == "none":
        src, label = f"{T} = None", f"{name} = None"
    elif kind == "string":
        src, label = f"{T} = 'abc'", f"{name} = 'abc'"
    elif kind == "ragged":     # a nested list whose rows differ in length
        src = (f"_a = np.asarray({T}).tolist()\n_a = _a if isinstance(_a, list) else [_a]\n"
               f"_a[0] = _a[0] + [0.5] if isinstance(_a[0], list) else [_a[0], _a[0]]\n{T} = _a")
        label = f"{name} a ragged nested list"
    else:  # negative
        src, label = f"{T} = -np.abs(np.asarray({T}, dtype=float)) - 1.0", f"{name} negative"
    return src, label, valid


def _case(family, entry, setup, edit_src, call, check, names, valid, label, timeout=None):
    setup = setup.strip() + ("\n" + edit_src.strip() if edit_src else "")
    case = dict(family=family, entry=entry, setup=setup, call=call.strip(), check=check,
                names=list(names), valid=bool(valid), edit=label)
    if timeout:
        case["timeout"] = timeout
    case["id"] = family + ":" + hashlib.sha1((setup + "|" + call).encode()).hexdigest()[:10]
    return case


@st.composite
def hyper_edit(draw, hypers, values=ANY_VALUE):
    """``m.<hyper> = value`` for one of ``hypers``; returns (source, label, names)."""
    hp = draw(st.sampled_from(hypers))
    v = draw(values)
    return f"m.{hp} = {v}", f"m.{hp} = {v}", [hp]


# ------------------------------------------------------------------ SigmoidBeliefNet
SBN_SIZES = ([2, 3], [1, 2, 3], [3, 4])
SBN_METHODS = ("gaussian", "sjj", "plefka11", "plefka12", "plefka22")
SBN_HYPERS = ("sizes", "weight_scale", "method", "learning_rate", "max_iter", "batch_size",
              "tol", "init_visible_biases", "warm_start", "infer_tol", "infer_max_iter",
              "n_threads", "random_state", "progress", "callback")


@st.composite
def sbn_case(draw):
    sizes = draw(st.sampled_from(SBN_SIZES))
    method = draw(st.sampled_from(SBN_METHODS))
    nv, L = sizes[-1], len(sizes)
    n = draw(st.sampled_from([1, 5]))
    base = (f"m = mf.SigmoidBeliefNet({sizes}, method={method!r}, max_iter=2, "
            f"random_state=0, progress=False)\n"
            f"X = m.sample({n}, random_state=1)\nmethod = {method!r}")
    entry = draw(st.sampled_from(("infer", "mf.infer", "mf.infer(arrays)", "score_samples",
                                  "score", "fit", "sample", "exact_log_likelihood",
                                  "log_joint", "gradient", "evaluate_bound", "save_load")))
    calls = {
        "infer": ("out = m.infer(X, method=method)", "infer_strict"),
        "mf.infer": ("out = mf.infer(m, X, method=method)", "infer_strict"),
        "mf.infer(arrays)": ("out = mf.infer((m.weights_, m.biases_), X)", "infer"),
        "score_samples": ("out = m.score_samples(X)", "scores"),
        "score": ("out = m.score(X)", "score"),
        "fit": ("out = m.fit(X)", "fit"),
        "sample": ("out = m.sample(4, random_state=0)", "binary_sample"),
        "exact_log_likelihood": ("out = m.exact_log_likelihood(X)", "loglik"),
        "log_joint": ("out = m.log_joint(S)", "loglik"),
        "gradient": ("out = m.gradient(X)", "gradient"),
        "evaluate_bound": ("r = m.infer(X, method='gaussian')\n"
                           "out = m.evaluate_bound(X, r.mu, r.xi)", "scores"),
        "save_load": ("import os, tempfile\np = os.path.join(tempfile.mkdtemp(), 'm')\n"
                      "m.save(p)\nout = mf.load(p + '.npz').score_samples(X)", "scores"),
    }
    call, check = calls[entry]
    if entry == "mf.infer(arrays)":
        base += "\nmethod = 'gaussian'"
    if entry == "log_joint":
        base += "\nS = m.sample(3, random_state=2, return_all=True)"
    if entry == "evaluate_bound":
        base += "\nmethod = 'gaussian'"
    if entry == "gradient":
        base += "\nmethod = 'gaussian'"
    what = draw(st.sampled_from(("data", "param", "param_list", "hyper", "arg", "none")))
    names, valid, label, edit = [], False, "none", ""
    if what == "data":
        target = "S[0]" if entry == "log_joint" else "X"
        shape = (3, sizes[0]) if entry == "log_joint" else (n, nv)
        edit, label, valid = draw(array_edit(target, shape, "X",
                                             values=st.sampled_from(FLOATS + ["0.5", "2.0"]),
                                             edits=ARRAY_EDITS, list_valid=True))
        names = ["layers"] if entry == "log_joint" else ["X"]
        if "np.full((0," in edit and entry not in ("score", "fit", "log_joint"):
            valid = True        # 0 patterns: an empty answer
    elif what == "param":
        which = draw(st.sampled_from(("weights_", "biases_")))
        l = draw(st.integers(0, L - 2 if which == "weights_" else L - 1))
        shape = (sizes[l + 1], sizes[l]) if which == "weights_" else (sizes[l],)
        edit, label, valid = draw(array_edit(f"m.{which}[{l}]", shape, f"{which}[{l}]"))
        names = [which, which[:-1]]         # weights/biases: the documented aliases
        if entry == "fit":
            edit += "\nm.warm_start = True"
    elif what == "param_list":
        which = draw(st.sampled_from(("weights_", "biases_")))
        how = draw(st.sampled_from(("m.{w} = m.{w}[:-1]", "m.{w} = m.{w} + m.{w}",
                                    "m.{w} = tuple(m.{w})", "m.{w} = None",
                                    "m.{w} = np.zeros(3)", "m.{w} = []",
                                    "m.{w} = [np.asarray(a).tolist() for a in m.{w}]")))
        edit = how.format(w=which)
        label, names = edit, [which, which[:-1]]
        valid = "tuple(" in edit or "tolist" in edit
        if entry == "fit":
            edit += "\nm.warm_start = True"
    elif what == "hyper":
        if entry == "fit" and draw(st.booleans()):
            # a callback that replaces a weight by a wider array between epochs
            wl = draw(st.integers(0, L - 2))
            s = (sizes[wl + 1] + 1, sizes[wl] + 2)
            edit = (f"m.callback = lambda epoch, net, b: net.weights_.__setitem__({wl}, "
                    f"np.zeros({s}))\nm.max_iter = 3")
            label, names = f"callback replaces weights_[{wl}] by shape {s}", ["weights_"]
        else:
            edit, label, names = draw(hyper_edit(SBN_HYPERS))
            if names == ["method"]:
                base = base.replace(f"\nmethod = {method!r}", "")
                call = call.replace("method=method", "method=m.method")
                base += "\nmethod = None"
    elif what == "arg":
        if entry in ("infer", "mf.infer"):
            arg = draw(st.sampled_from(("tol", "max_iter", "n_threads", "method", "init_mu",
                                        "inner_tol", "missing", "progress")))
            if arg == "init_mu":
                H = sum(sizes[:-1])
                v = draw(st.one_of(
                    st.sampled_from(FLOATS).map(lambda f: f"np.full(({n}, {H}), {f})"),
                    st.sampled_from([f"np.full(({n}, {H + 1}), 0.5)", f"np.full(({n},), 0.5)",
                                     f"np.full(({n}, {H}), 0.5).astype(object)", "'abc'",
                                     f"np.full(({n + 1}, {H}), 0.5)"])))
            elif arg == "missing":
                v = draw(st.sampled_from([
                    f"np.zeros(({n}, {nv}), dtype=bool)", f"np.ones(({n}, {nv}), dtype=bool)",
                    f"np.zeros({nv}, dtype=bool)", f"np.zeros(({n}, {nv + 1}), dtype=bool)",
                    f"np.full(({n}, {nv}), 2)", f"np.full(({n}, {nv}), np.nan)", "'abc'",
                    f"np.eye({n}, {nv}, dtype=bool)"]))
            elif arg == "method":
                v = draw(st.one_of(st.sampled_from(["'SJJ'", "'exact'", "''", "None", "1"]),
                                   st.sampled_from(OTHERS)))
            else:
                v = draw(ANY_VALUE)
            if arg == "missing":
                base += f"\nmissing = {v}"       # a variable: the exact oracle reads it too
                v = "missing"
            call = call.replace("method=method)", f"method=method, {arg}={v})")
            if arg == "method":
                call = call.replace("method=method, method=", "method=")
                base += f"\nmethod = {v} if isinstance({v}, str) else None"
            label, names = f"{arg}={v}" if arg != "missing" else base.rsplit("\n", 1)[-1], [arg]
            if arg == "missing":
                names = ["missing", "X"]
                valid = "dtype=bool)" in base and f"{nv + 1}), dtype" not in base
                if method != "gaussian":
                    valid = False       # missing is "gaussian" only
        elif entry == "sample":
            arg = draw(st.sampled_from(("n_samples", "random_state", "return_all")))
            v = draw(INT_VALUE if arg == "n_samples" else ANY_VALUE)
            call = f"out = m.sample({arg}={v})" if arg != "n_samples" else f"out = m.sample({v})"
            label, names = f"{arg}={v}", [arg]
        elif entry == "exact_log_likelihood":
            v = draw(ANY_VALUE)
            call = f"out = m.exact_log_likelihood(X, max_hidden={v})"
            label, names = f"max_hidden={v}", ["max_hidden"]
        elif entry == "gradient":     # a result that is not the "gaussian" solution of X
            v = draw(st.sampled_from([
                "m.infer(X, method='plefka12')", "m.infer(X, method='sjj')",
                "m.infer(X, method='plefka22')", "m.infer(X[:1], method='gaussian')",
                "m.infer(np.vstack([X, X]), method='gaussian')", "'abc'", "3",
                "mf.SigmoidBeliefNet([1, 2, 3], random_state=0).infer(np.zeros((1, 3)))"]))
            call = f"out = m.gradient(X, result={v})"
            label, names = f"result={v}", ["result"]
    return _case("SigmoidBeliefNet", entry, base, edit, call, check, names, valid, label)


# ------------------------------------------------------------------ BeliefNet (DAG)
DAG_METHODS = ("sjj", "plefka11", "plefka12", "plefka22")
DAG_HYPERS = ("method", "learning_rate", "max_iter", "batch_size", "tol", "warm_start",
              "infer_tol", "infer_max_iter", "n_threads", "random_state", "progress",
              "callback", "activation")


def _dag_base(activation, n_units=5, visible=(3, 4), scale="1.0"):
    if activation == "noisy_or":
        return (f"rng = np.random.default_rng(0)\n"
                f"W = np.tril(rng.uniform(0, 1, ({n_units}, {n_units})), -1) * {scale}\n"
                f"h = rng.uniform(0.1, 1.0, {n_units})\nvis = {list(visible)}\n")
    return (f"rng = np.random.default_rng(0)\n"
            f"W = np.tril(rng.normal(size=({n_units}, {n_units})), -1) * {scale}\n"
            f"h = rng.normal(size={n_units})\nvis = {list(visible)}\n")


@st.composite
def dag_case(draw):
    activation = draw(st.sampled_from(("sigmoid", "noisy_or")))
    method = draw(st.sampled_from(DAG_METHODS))
    scale = draw(st.sampled_from(["1.0", "1.0", "5.0", "20.0", "50.0", "100.0", "1e3"]))
    visible = draw(st.sampled_from([(3, 4), (0, 4), (1, 2, 3, 4)]))
    n = draw(st.sampled_from([1, 6]))
    nv = len(visible)
    base = _dag_base(activation, 5, visible, scale) + (
        f"m = mf.BeliefNet(W, h, visible=vis, activation={activation!r}, method={method!r}, "
        f"max_iter=2, batch_size=3, progress=False)\n"
        f"X = m.sample({n}, random_state=1)\nmethod = {method!r}")
    entry = draw(st.sampled_from(("infer", "mf.infer", "score_samples", "score", "fit",
                                  "sample", "exact_log_likelihood", "log_joint")))
    calls = {
        "infer": ("out = m.infer(X, method=method)", "infer_strict"),
        "mf.infer": ("out = mf.infer(m, X, method=method)", "infer_strict"),
        "score_samples": ("out = m.score_samples(X)", "scores"),
        "score": ("out = m.score(X)", "score"),
        "fit": ("out = m.fit(X)", "fit"),
        "sample": ("out = m.sample(4, random_state=0)", "binary_sample"),
        "exact_log_likelihood": ("out = m.exact_log_likelihood(X)", "loglik"),
        "log_joint": ("out = m.log_joint(S)", "loglik"),
    }
    call, check = calls[entry]
    if entry == "log_joint":
        base += "\nS = m.sample(3, random_state=2, return_all=True)"
    what = draw(st.sampled_from(("data", "param", "ctor", "hyper", "arg", "none")))
    names, valid, label, edit = [], False, "none", ""
    if what == "data":
        target, shape = ("S", (3, 5)) if entry == "log_joint" else ("X", (n, nv))
        edit, label, valid = draw(array_edit(target, shape, target,
                                             values=st.sampled_from(FLOATS + ["0.5", "2.0"]),
                                             list_valid=True))
        names = [target]
        if "np.full((0," in edit:
            valid = entry not in ("score", "fit")
    elif what == "param":
        which = draw(st.sampled_from(("W_", "h_", "visible_")))
        shape = {"W_": (5, 5), "h_": (5,), "visible_": (5,)}[which]
        edit, label, valid = draw(array_edit(f"m.{which}", shape, which))
        names = [which]
        if entry == "fit":
            edit += "\nm.warm_start = True"
    elif what == "ctor":
        which = draw(st.sampled_from(("W", "h", "vis", "activation", "upper", "sparse")))
        if which == "sparse":
            fmt = draw(st.sampled_from(("csr_matrix", "csc_matrix", "coo_matrix", "csr_array")))
            edit, label, names = (f"import scipy.sparse\nW = scipy.sparse.{fmt}(W)",
                                  f"W as scipy.sparse.{fmt}", ["W"])
            valid = True        # W may be dense or scipy.sparse
        elif which == "vis":
            v = draw(st.sampled_from(["[4, 3]", "[3, 3]", "[5]", "[-1, 4]", "[]", "[2**63 - 1]",
                                      "[0.5, 4]", "np.zeros(5, dtype=bool)", "np.ones(4, dtype=bool)",
                                      "[[3, 4]]", "'abc'", "None", "[True, False]",
                                      "np.array([3, 4], dtype=np.uint64)", "[np.nan]"]))
            # a valid list of another length makes the sampled X the wrong width: X is named
            edit, label, names = f"vis = {v}", f"visible={v}", ["visible", "X"]
        elif which == "activation":
            v = draw(st.sampled_from(["'relu'", "None", "1", "'SIGMOID'", "'noisy_or'"]))
            edit, label, names = f"activation = {v}", f"activation={v}", ["activation", "W", "h"]
        elif which == "upper":
            edit, label, names = "W = W.copy()\nW[0, 4] = 1.0", "W with an upper entry", ["W"]
        else:
            shape = (5, 5) if which == "W" else (5,)
            edit, label, valid = draw(array_edit(which, shape, which))
            names = [which]
        act = "activation" if which == "activation" else repr(activation)
        edit += (f"\nm = mf.BeliefNet(W, h, visible=vis, activation={act}, method={method!r}, "
                 "max_iter=2, batch_size=3, progress=False)")
        if which in ("vis", "activation", "upper"):
            valid = False
    elif what == "hyper":
        if entry == "fit" and draw(st.booleans()):
            edit = ("m.callback = lambda epoch, net, b: setattr(net, 'W_', np.zeros((6, 6)))"
                    "\nm.max_iter = 3")
            label, names = "callback replaces W_ by shape (6, 6)", ["W_"]
        else:
            edit, label, names = draw(hyper_edit(DAG_HYPERS))
            if names == ["method"]:
                call = call.replace("method=method", "method=m.method")
    elif what == "arg":
        if entry in ("infer", "mf.infer"):
            arg = draw(st.sampled_from(("tol", "max_iter", "n_threads", "init_mu", "inner_tol",
                                        "missing", "method")))
            H = 5 - nv
            if arg == "init_mu":
                v = draw(st.one_of(
                    st.sampled_from(FLOATS).map(lambda f: f"np.full(({n}, {H}), {f})"),
                    st.sampled_from([f"np.full(({n}, {H + 1}), 0.5)", "'abc'",
                                     f"np.full(({n}, {H}), 0.999999)"])))
            elif arg == "missing":
                v = draw(st.sampled_from([
                    f"np.zeros(({n}, {nv}), dtype=bool)", f"np.ones(({n}, {nv}), dtype=bool)",
                    f"np.zeros(({n}, {nv + 1}), dtype=bool)", f"np.full(({n}, {nv}), 2)"]))
            elif arg == "method":
                v = draw(st.sampled_from(["'gaussian'", "'SJJ'", "None", "1", "''"]))
            else:
                v = draw(ANY_VALUE)
            if arg == "missing":
                base += f"\nmissing = {v}"       # a variable: the exact oracle reads it too
                v = "missing"
            call = call.replace("method=method)", f"method=method, {arg}={v})")
            if arg == "method":
                call = call.replace("method=method, method=", "method=")
                base += f"\nmethod = {v} if isinstance({v}, str) else None"
            label, names = f"{arg}={v}" if arg != "missing" else base.rsplit("\n", 1)[-1], [arg]
            if arg == "missing":
                names = ["missing", "X"]
                valid = "dtype=bool)" in base and f"{nv + 1}), dtype" not in base
        elif entry == "sample":
            arg = draw(st.sampled_from(("n_samples", "random_state", "return_all")))
            v = draw(INT_VALUE if arg == "n_samples" else ANY_VALUE)
            call = f"out = m.sample({arg}={v})" if arg != "n_samples" else f"out = m.sample({v})"
            label, names = f"{arg}={v}", [arg]
        elif entry == "exact_log_likelihood":
            v = draw(ANY_VALUE)
            call = f"out = m.exact_log_likelihood(X, max_hidden={v})"
            label, names = f"max_hidden={v}", ["max_hidden"]
    return _case("BeliefNet", entry, base, edit, call, check, names, valid, label)


# ------------------------------------------------------------------ BeliefNetBatch
BATCH_HYPERS = ("method", "infer_tol", "infer_max_iter", "n_threads", "progress", "activation")


@st.composite
def batch_case(draw):
    activation = draw(st.sampled_from(("sigmoid", "noisy_or")))
    method = draw(st.sampled_from(DAG_METHODS))
    scale = draw(st.sampled_from(["1.0", "1.0", "20.0", "60.0", "1e3"]))
    k = draw(st.sampled_from([1, 3]))
    rows = draw(st.sampled_from([None, 2]))     # X of shape (k, nv) or (k, m, nv)
    if activation == "noisy_or":
        base = (f"rng = np.random.default_rng(0)\n"
                f"W = np.tril(rng.uniform(0, 1, ({k}, 4, 4)), -1) * {scale}\n"
                f"h = rng.uniform(0.1, 1.0, ({k}, 4))\n")
    else:
        base = (f"rng = np.random.default_rng(0)\nW = np.tril(rng.normal(size=({k}, 4, 4)), -1) "
                f"* {scale}\nh = rng.normal(size=({k}, 4))\n")
    base += (f"m = mf.BeliefNetBatch(W, h, [2, 3], activation={activation!r}, method={method!r}, "
             f"progress=False)\n")
    base += (f"X = m.sample(1, random_state=1)[:, 0, :]\n" if rows is None else
             f"X = m.sample({rows}, random_state=1)\n") + f"method = {method!r}"
    xshape = (k, 2) if rows is None else (k, rows, 2)
    entry = draw(st.sampled_from(("infer", "mf.infer", "score_samples", "score", "sample",
                                  "exact_log_likelihood", "log_joint", "from_nets",
                                  "mf.infer(list)", "getitem")))
    calls = {
        "infer": ("out = m.infer(X, method=method)", "infer_strict"),
        "mf.infer": ("out = mf.infer(m, X, method=method)", "infer_strict"),
        "score_samples": ("out = m.score_samples(X)", "scores"),
        "score": ("out = m.score(X)", "score"),
        "sample": ("out = m.sample(3, random_state=0)", "binary_sample"),
        "exact_log_likelihood": ("out = m.exact_log_likelihood(X)", "loglik"),
        "log_joint": ("out = m.log_joint(S)", "loglik"),
        "from_nets": ("out = mf.BeliefNetBatch.from_nets([m[j] for j in range(len(m))], "
                      "method=method).score_samples(X)", "scores"),
        "mf.infer(list)": ("out = mf.infer([m[j] for j in range(len(m))], X, method=method)",
                           "infer"),
        "getitem": ("out = m[0].score_samples(m[0].sample(3, random_state=0))", "scores"),
    }
    call, check = calls[entry]
    if entry == "log_joint":
        base += "\nS = m.sample(2, random_state=2, return_all=True)"
    what = draw(st.sampled_from(("data", "param", "ctor", "hyper", "arg", "none")))
    if what not in ("param", "ctor") and draw(st.booleans()):
        # the same nets given as a list of scipy.sparse matrices (the edits of W_ or W
        # below are written for the dense (n_nets, 4, 4) array)
        base = base.replace("m = mf.BeliefNetBatch(W, h,",
                            "import scipy.sparse as sp\n"
                            "m = mf.BeliefNetBatch([sp.csr_matrix(w) for w in W], h,")
    names, valid, label, edit = [], False, "none", ""
    clean_types = None
    if what == "data" and entry == "getitem":
        what = "none"
    if what == "data":
        target, shape = ("S", (k, 2, 4)) if entry == "log_joint" else ("X", xshape)
        edit, label, valid = draw(array_edit(target, shape, target,
                                             values=st.sampled_from(FLOATS + ["0.5", "2.0"]),
                                             list_valid=True))
        names = [target]
        if "np.full((0," in edit:
            valid = False
    elif what == "param":
        which = draw(st.sampled_from(("W_", "h_", "visible_")))
        shape = {"W_": (k, 4, 4), "h_": (k, 4), "visible_": (4,)}[which]
        edit, label, valid = draw(array_edit(f"m.{which}", shape, which))
        names = [which]
    elif what == "ctor":
        which = draw(st.sampled_from(("W", "h", "zero_nets")))
        if which == "zero_nets":
            edit, label, names = "W = W[:0]\nh = h[:0]", "0 nets", ["W", "n_nets"]
        else:
            shape = (k, 4, 4) if which == "W" else (k, 4)
            edit, label, valid = draw(array_edit(which, shape, which))
            names = [which]
        edit += (f"\nm = mf.BeliefNetBatch(W, h, [2, 3], activation={activation!r}, "
                 f"method={method!r}, progress=False)")
    elif what == "hyper":
        edit, label, names = draw(hyper_edit(BATCH_HYPERS))
        if names == ["method"]:
            call = call.replace("method=method", "method=m.method")
    elif what == "arg":
        if entry in ("infer", "mf.infer"):
            arg = draw(st.sampled_from(("tol", "max_iter", "n_threads", "init_mu", "missing")))
            if arg == "init_mu":
                n_items = k * (rows or 1)
                v = draw(st.sampled_from([f"np.full(({n_items}, 2), 0.5)",
                                          f"np.full(({n_items}, 3), 0.5)",
                                          f"np.full(({n_items}, 2), np.nan)", "'abc'"]))
            elif arg == "missing":
                v = draw(st.sampled_from(["np.zeros(X.shape, dtype=bool)",
                                          "np.zeros(2, dtype=bool)",
                                          "rng.random(X.shape) < 0.5", "np.ones(2, dtype=bool)",
                                          "np.zeros(X.shape[:-1] + (3,), dtype=bool)",
                                          "np.zeros(X.shape, dtype=float)", "np.full(X.shape, 2)"]))
            else:
                v = draw(ANY_VALUE)
            label, names = f"{arg}={v}", [arg]
            if arg == "missing":
                valid = "dtype=bool)" in v and "(3,)" not in v or "< 0.5" in v
                base += f"\nmissing = {v}"       # a variable: the exact oracle reads it too
                v = "missing"
            call = call.replace("method=method)", f"method=method, {arg}={v})")
        elif entry == "sample":
            v = draw(INT_VALUE)
            call, label, names = f"out = m.sample({v})", f"n_samples={v}", ["n_samples"]
        elif entry == "getitem":
            v = draw(st.one_of(INT_VALUE, st.sampled_from(OTHERS)))
            call, label, names = f"out = m[{v}]", f"m[{v}]", ["index", "k", "net", "nets"]
            check = "any"
            clean_types = ["IndexError", "KeyError"]
    case = _case("BeliefNetBatch", entry, base, edit, call, check, names, valid, label)
    if clean_types:
        case["clean_types"] = clean_types
    return case


# ------------------------------------------------------------------ NLGBN
NLGBN_UNITS = ("None", "'binary'", "['linear', 'linear']", "['sigmoidal', 'linear']",
               "[['binary', 'rectified'], 'linear']")
NLGBN_HYPERS = ("sizes", "units", "weight_scale", "max_iter", "tol", "infer_tol",
                "infer_max_iter", "min_variance", "warm_start", "n_threads", "random_state",
                "progress")


@st.composite
def nlgbn_case(draw):
    units = draw(st.sampled_from(NLGBN_UNITS))
    n = draw(st.sampled_from([1, 6]))
    base = (f"m = mf.NLGBN([2, 3], units={units}, max_iter=2, tol=1e-3, random_state=0, "
            f"progress=False)\nX = m.sample({n}, random_state=1)")
    entry = draw(st.sampled_from(("infer", "mf.infer", "score_samples", "score", "fit",
                                  "sample", "bound_at", "save_load")))
    calls = {
        "infer": ("out = m.infer(X)", "finite_infer"),
        "mf.infer": ("out = mf.infer(m, X)", "finite_infer"),
        "score_samples": ("out = m.score_samples(X)", "finite"),
        "score": ("out = m.score(X)", "finite"),
        "fit": ("out = m.fit(X)", "fit_monotone"),
        "sample": ("out = m.sample(4, random_state=0)", "finite"),
        "bound_at": ("r = m.infer(X)\nmu = np.concatenate(r.mu[:-1], axis=1)\n"
                     "sigma = np.concatenate(r.sigma[:-1], axis=1)\n"
                     "out = m.bound_at(X, mu, sigma)", "finite"),
        "save_load": ("import os, tempfile\np = os.path.join(tempfile.mkdtemp(), 'm')\n"
                      "m.save(p)\nout = mf.load(p + '.npz').score_samples(X)", "finite"),
    }
    call, check = calls[entry]
    if check == "finite_infer":
        check = "finite"
        call += "\nout = [out.bound] + list(out.mu) + list(out.sigma)"
    what = draw(st.sampled_from(("data", "param", "param_list", "hyper", "arg", "none")))
    names, valid, label, edit = [], False, "none", ""
    if what == "data":
        edit, label, valid = draw(array_edit("X", (n, 3), "X", list_valid=True))
        names = ["X"]
        if "np.full((0," in edit:
            valid = entry not in ("score", "fit")
    elif what == "param":
        which = draw(st.sampled_from(("weights_", "biases_", "variances_", "units_")))
        if which == "units_":
            v = draw(st.sampled_from(["(('tanh', 'tanh'), ('linear',) * 3)", "None",
                                      "(('linear', 'linear'),)", "[['binary'] * 2, ['linear'] * 3]",
                                      "(('binary',) * 2, ('binary',) * 3)", "'binary'",
                                      "(('linear',) * 5, ('linear',) * 3)"]))
            edit, label = f"m.units_ = {v}", f"units_ = {v}"
        else:
            l = draw(st.integers(0, 0 if which == "weights_" else 1))
            shape = (3, 2) if which == "weights_" else ((2,), (3,))[l]
            edit, label, valid = draw(array_edit(f"m.{which}[{l}]", shape, f"{which}[{l}]"))
        names = [which]
        if entry == "fit":
            edit += "\nm.warm_start = True"
    elif what == "param_list":
        which = draw(st.sampled_from(("weights_", "biases_", "variances_")))
        how = draw(st.sampled_from(("m.{w} = m.{w}[:-1]", "m.{w} = m.{w} + m.{w}",
                                    "m.{w} = tuple(m.{w})", "m.{w} = None", "m.{w} = []")))
        edit = how.format(w=which)
        label, names = edit, [which]
        if entry == "fit":
            edit += "\nm.warm_start = True"
    elif what == "hyper":
        edit, label, names = draw(hyper_edit(NLGBN_HYPERS))
        if names[0] in ("sizes", "units", "weight_scale", "random_state"):
            # these act when parameters are drawn: on a model that has none yet
            edit = ("m = mf.NLGBN([2, 3], max_iter=2, tol=1e-3, random_state=0, progress=False)\n"
                    + edit)
    elif what == "arg":
        if entry in ("infer", "mf.infer"):
            arg = draw(st.sampled_from(("tol", "max_iter", "n_threads")))
            v = draw(ANY_VALUE)
            call = call.replace("(X)", f"(X, {arg}={v})", 1).replace("(m, X)", f"(m, X, {arg}={v})", 1)
            label, names = f"{arg}={v}", [arg]
        elif entry == "sample":
            arg = draw(st.sampled_from(("n_samples", "random_state", "return_all")))
            v = draw(INT_VALUE if arg == "n_samples" else ANY_VALUE)
            call = f"out = m.sample({arg}={v})" if arg != "n_samples" else f"out = m.sample({v})"
            label, names = f"{arg}={v}", [arg]
            if arg == "return_all":
                check = "any"
        elif entry == "bound_at":
            arg = draw(st.sampled_from(("mu", "sigma")))
            edit2, label, valid = draw(array_edit(arg, (n, 2), arg))
            call = call.replace("out = m.bound_at", edit2 + "\nout = m.bound_at")
            names = [arg]
    return _case("NLGBN", entry, base, edit, call, check, names, valid, label)


# ------------------------------------------------------------------ ContextHMM
HMM_HYPERS = ("n_states", "n_features", "lag", "context", "method", "max_iter", "tol",
              "bw_max_iter", "infer_max_iter", "infer_tol", "algorithm", "params",
              "init_params", "context_init_scale", "max_augmented_states", "warm_start",
              "n_threads", "random_state", "progress", "starts")
#: starts= values: the valid ones first (a name, names in any order, 'all')
HMM_STARTS_VALID = ["'all'", "'link'", "'naive-link'", "'first-order'", "'own-means'",
                    "('own-means', 'link')", "['naive-link', 'first-order', 'own-means']",
                    "('link', 'naive-link', 'first-order', 'own-means')"]
HMM_STARTS = HMM_STARTS_VALID + ["'ALL'", "''", "()", "[]", "('link', 'link')", "('link', 3)",
                                 "{'link'}", "b'link'", "np.array(['link'])", "None", "0",
                                 "'link,own-means'"]
HMM_LENGTHS = ["[2**62, 2**62, 2**63 - 1, 11]", "np.array([2**63, 2**63 + 20], dtype=np.uint64)",
               "[10, 10]", "[20]", "[5, 5, 5, 5]", "[1] * 20", "[0, 20]", "[-1, 21]", "[21]",
               "[19]", "[10.0, 10.0]", "[10.5, 9.5]", "np.array([[10, 10]])", "'abc'", "[]",
               "[np.nan, 20]", "[2**31, -(2**31) + 20]", "np.array([10, 10], dtype=np.int8)",
               "[True] * 20", "[2**64 - 1, 21]"]


@st.composite
def hmm_case(draw):
    n_states = draw(st.sampled_from([2, 3]))
    D = draw(st.sampled_from([1, 2]))
    lag = draw(st.sampled_from([1, 2, 3]))
    context = draw(st.sampled_from(("right", "left", "both")))
    method = draw(st.sampled_from(("structured", "naive", "exact")))
    T = 20
    base = (f"m = mf.ContextHMM({n_states}, {D}, lag={lag}, context={context!r}, "
            f"method={method!r}, max_iter=2, bw_max_iter=2, random_state=0, progress=False)\n"
            f"rng = np.random.default_rng(0)\n"
            f"m.means_ = np.arange({n_states * D}.0).reshape({n_states}, {D})\n")
    if context in ("right", "both"):
        base += f"m.right_means_ = rng.normal(0, 0.3, ({n_states}, {D}))\n"
    if context in ("left", "both"):
        base += f"m.left_means_ = rng.normal(0, 0.3, ({n_states}, {D}))\n"
    base += (f"X = np.sin(np.arange({T}.0))[:, None] * np.ones({D}) + 0.5\nlengths = None\n"
             f"method = {method!r}\nhmm_oracle = True")
    entry = draw(st.sampled_from(("infer", "mf.infer", "score", "score_samples", "predict",
                                  "predict_proba", "decode", "sample", "fit")))
    calls = {
        "infer": ("out = m.infer(X, lengths)", "hmm_infer"),
        "mf.infer": ("out = mf.infer(m, X, lengths)", "hmm_infer"),
        "score": ("out = m.score(X, lengths)", "hmm_score"),
        "score_samples": ("out = m.score_samples(X, lengths, method=msp)", "hmm_samples"),
        "predict": ("out = m.predict(X, lengths, method=msp)", "hmm_path"),
        "predict_proba": ("out = m.predict_proba(X, lengths, method=msp)", "proba"),
        "decode": ("out = m.decode(X, lengths, method=msp)", "hmm_decode"),
        "sample": ("out = m.sample(10, random_state=0)", "hmm_sample"),
        "fit": ("out = m.fit(X, lengths)", "fit_hmm"),
    }
    call, check = calls[entry]
    if "msp" in call:
        base += f"\nmsp = {method!r} if {method!r} != 'exact' else 'structured'\nmethod = msp"
    what = draw(st.sampled_from(("data", "lengths", "param", "hyper", "arg", "none")))
    names, valid, label, edit = [], False, "none", ""
    if what == "data" and draw(st.booleans()):
        v = draw(st.sampled_from(["[X[:7], X[7:]]", "[X]", "[X[:7], X[7:, :0]]", "[X[:7], X[7:8]]",
                                  "[X[:7], X[7:].T]", "[]", "[X[:0], X]", "[X[:7], X[7:].tolist()]",
                                  "(X[:7], X[7:])", "[X[:7], None]", "[X[:7], X[7:].astype(complex)]"]))
        edit, label, names = f"X = {v}", f"X = {v}", ["X", "X[0]", "X[1]"]
        valid = v in ("[X[:7], X[7:]]", "[X]", "[X[:7], X[7:8]]", "(X[:7], X[7:])")
        if entry == "sample":
            entry, call, check = "score", "out = m.score(X, lengths)", "hmm_score"
    elif what == "data":
        edit, label, valid = draw(array_edit("X", (T, D), "X", list_valid=True))
        names = ["X"]
        if "np.full((0," in edit:
            valid = False
    elif what == "lengths":
        v = draw(st.sampled_from(HMM_LENGTHS))
        edit, label, names = f"lengths = {v}", f"lengths={v}", ["lengths"]
        valid = v in ("[10, 10]", "[20]", "[5, 5, 5, 5]", "[1] * 20",
                      "np.array([10, 10], dtype=np.int8)")
    elif what == "param":
        which = draw(st.sampled_from(("means_", "right_means_", "left_means_", "startprob_",
                                      "transmat_")))
        shape = {"startprob_": (n_states,), "transmat_": (n_states, n_states)}.get(
            which, (n_states, D))
        if which in ("startprob_", "transmat_"):
            base += (f"\nm.startprob_ = np.full({n_states}, 1.0 / {n_states})\n"
                     f"m.transmat_ = np.full(({n_states}, {n_states}), 1.0 / {n_states})")
        elif which != "means_":
            base += (f"\nm.{which} = np.zeros(({n_states}, {D})) if getattr(m, {which!r}, None) "
                     f"is None else m.{which}")
        edit, label, valid = draw(array_edit(f"m.{which}", shape, which))
        names = [which]
        if entry == "fit":
            edit += "\nm.warm_start = True"
    elif what == "hyper" and draw(st.booleans()):
        v = draw(st.sampled_from(HMM_STARTS))
        edit, label, names = f"m.starts = {v}", f"m.starts = {v}", ["starts"]
        valid = v in HMM_STARTS_VALID
    elif what == "hyper":
        edit, label, names = draw(hyper_edit(HMM_HYPERS))
    elif what == "arg":
        if entry in ("infer", "mf.infer"):
            arg = draw(st.sampled_from(("tol", "max_iter", "method")))
            v = draw(ANY_VALUE if arg != "method" else st.sampled_from(
                ["'SJJ'", "None", "1", "''", "'exact'", "'naive'"]))
            call = call.replace("lengths)", f"lengths, {arg}={v})")
            label, names = f"{arg}={v}", [arg]
        elif entry in ("score_samples", "predict", "predict_proba", "decode"):
            arg = draw(st.sampled_from(("method", "algorithm"))) if entry == "decode" else "method"
            v = draw(st.sampled_from(["'exact'", "'SJJ'", "1", "''", "None"]))
            call = call.replace("method=msp", f"{arg}={v}")
            # algorithm=None is the default: a model built with method='exact' is then at fault
            label, names = f"{arg}={v}", [arg] if arg == "method" else [arg, "method"]
        elif entry == "sample":
            arg = draw(st.sampled_from(("n_samples", "random_state")))
            v = draw(INT_VALUE if arg == "n_samples" else ANY_VALUE)
            call = f"out = m.sample({arg}={v})" if arg != "n_samples" else f"out = m.sample({v})"
            label, names = f"{arg}={v}", [arg]
    return _case("ContextHMM", entry, base, edit, call, check, names, valid, label,
                 timeout=60 if entry == "fit" else None)


# ------------------------------------------------------------------ GenerativeClassifier
CLF_HYPERS = ("hidden", "max_iter", "learning_rate", "batch_size", "weight_scale", "tol",
              "infer_tol", "infer_max_iter", "warm_start", "n_threads", "random_state",
              "progress")


@st.composite
def clf_case(draw):
    base = ("rng = np.random.default_rng(0)\nX = (rng.random((16, 4)) < 0.5).astype(float)\n"
            "y = np.repeat([0, 1], 8)\n"
            "m = mf.GenerativeClassifier(hidden=(2,), max_iter=2, random_state=0, "
            "progress=False).fit(X, y)\nmethod = 'gaussian'")
    entry = draw(st.sampled_from(("fit", "predict", "predict_proba", "predict_log_proba",
                                  "score", "class_bounds")))
    calls = {
        "fit": ("out = m.fit(X, y)", "fit"),
        "predict": ("out = m.predict(X)", "predict"),
        "predict_proba": ("out = m.predict_proba(X)", "proba"),
        "predict_log_proba": ("out = m.predict_log_proba(X)", "log_proba"),
        "score": ("out = m.score(X, y)", "accuracy"),
        "class_bounds": ("out = m.class_bounds(X)", "scores"),
    }
    call, check = calls[entry]
    what = draw(st.sampled_from(("data", "labels", "param", "hyper", "missing", "none")))
    names, valid, label, edit = [], False, "none", ""
    if what == "data":
        edit, label, valid = draw(array_edit("X", (16, 4), "X",
                                             values=st.sampled_from(FLOATS + ["0.5", "2.0"]),
                                             list_valid=True))
        names = ["X"]
        if "np.full((0," in edit:
            valid = False
        if entry in ("fit", "score"):
            # keep y as long as X, with both classes, so that the error is about X
            edit += ("\ny = (np.resize(np.unique(y), len(X)) if hasattr(X, '__len__') "
                     "and not isinstance(X, str) and len(X) != len(y) else y)")
    elif what == "labels":
        v = draw(st.sampled_from(["y.astype(float) + 0.5", "np.zeros(16)", "y[:-1]",
                                  "np.full(16, np.nan)", "y[:, None]", "y.astype(str)",
                                  "y.astype(object)", "np.arange(16) * 0.1", "None",
                                  "np.repeat(['a', 'b'], 8)", "y * 2**62", "y + 0j",
                                  "np.array([np.inf] * 8 + [0] * 8)"]))
        edit, label, names = f"y = {v}", f"y = {v}", ["y"]
        if entry not in ("fit", "score"):
            call = "out = m.fit(X, y)"
            check, entry = "fit", "fit"
        # other labels than those of the fit: score must refuse them
        valid = entry == "fit" and v in ("y.astype(str)", "np.repeat(['a', 'b'], 8)", "y * 2**62")
    elif what == "param":
        which = draw(st.sampled_from(("net_weights_", "net_biases_", "class_log_prior_",
                                      "classes_")))
        if which == "net_weights_":
            edit, label, valid = draw(array_edit("m.net_weights_[0][0]", (4, 2),
                                                 "net_weights_[0][0]"))
        elif which == "net_biases_":
            l = draw(st.integers(0, 1))
            edit, label, valid = draw(array_edit(f"m.net_biases_[0][{l}]", ((2,), (4,))[l],
                                                 f"net_biases_[0][{l}]"))
        elif which == "class_log_prior_":
            edit, label, valid = draw(array_edit("m.class_log_prior_", (2,), "class_log_prior_"))
        else:
            v = draw(st.sampled_from(["np.array([0])", "np.array([0, 1, 2])", "None",
                                      "np.array(['a', 'b'])", "np.array([np.nan, 1.0])"]))
            edit, label = f"m.classes_ = {v}", f"classes_ = {v}"
        names = [which]
        if entry == "fit":
            edit += "\nm.warm_start = True"
    elif what == "hyper":
        edit, label, names = draw(hyper_edit(CLF_HYPERS))
        if entry != "fit" and names[0] not in ("infer_tol", "infer_max_iter", "n_threads"):
            call, check, entry = "out = m.fit(X, y)", "fit", "fit"
    elif what == "missing":
        if entry == "fit":
            call, check, entry = "out = m.predict_proba(X)", "proba", "predict_proba"
        v = draw(st.sampled_from(["np.zeros((16, 4), dtype=bool)", "np.ones((16, 4), dtype=bool)",
                                  "np.zeros(4, dtype=bool)", "np.zeros((16, 5), dtype=bool)",
                                  "np.full((16, 4), 2)", "'abc'"]))
        if entry == "score":
            call = f"out = m.score(X, y, missing={v})"
        else:
            call = call.replace("(X)", f"(X, missing={v})")
        label, names = f"missing={v}", ["missing"]
        valid = "dtype=bool)" in v and "5)" not in v
    return _case("GenerativeClassifier", entry, base, edit, call, check, names, valid, label)


# ------------------------------------------------------------------ mf.infer's dispatch
@st.composite
def dispatch_case(draw):
    base = ("net = mf.SigmoidBeliefNet([2, 3], random_state=0, progress=False)\n"
            "X = net.sample(3, random_state=1)\nmethod = 'gaussian'\n"
            "rng = np.random.default_rng(0)\n"
            "d1 = mf.BeliefNet(np.tril(rng.normal(size=(4, 4)), -1), np.zeros(4), [2, 3])\n"
            "d2 = mf.BeliefNet(np.tril(rng.normal(size=(5, 5)), -1), np.zeros(5), [3, 4])")
    v = draw(st.one_of(st.sampled_from([
        "None", "3", "'abc'", "[]", "()", "[d1, d2]", "[d1, net]", "(net.weights_,)",
        "(net.weights_, net.biases_, net.biases_)", "([np.ones((3, 2)) * np.nan], net.biases_)",
        "([np.ones((3, 2))], [np.zeros(2), np.zeros(3)])", "([np.ones((4, 2))], net.biases_)",
        "([], [])", "(net.biases_, net.weights_)", "np.zeros((2, 2))", "{'weights': 1}",
        "mf.SigmoidBeliefNet", "[d1] * 2", "(net.weights_, [np.zeros(2), np.zeros(3)])",
        "([np.ones((3, 2)) * 1e300], net.biases_)", "net"]),
        st.sampled_from(OTHERS)))
    X = draw(st.sampled_from(["X", "np.zeros((2, 2))", "np.zeros((3, 3))"]))
    call = f"out = mf.infer({v}, {X})"
    valid = v in ("net", "([np.ones((3, 2))], [np.zeros(2), np.zeros(3)])") and X == "X"
    names = ["model", "weights", "biases", "weights_", "biases_", "nets", "X"]
    return _case("mf.infer", "mf.infer", base, "", call, "infer", names, valid, f"model={v}")


# ------------------------------------------------------------------ kernel entry points
@st.composite
def kernel_case(draw):
    base = ("from mfengine.sbn import sjj, plefka\nfrom mfengine.sbn.dag import DagStructure\n"
            "rng = np.random.default_rng(0)\nW = np.tril(rng.normal(size=(4, 4)), -1)\n"
            "s = DagStructure(W != 0)\nw = s.pack(W)[None]\nh = np.zeros((1, 4))\n"
            "net_of = np.zeros(3, dtype=np.intp)\nclamp = np.full((3, 4), np.nan)\n"
            "clamp[:, 2:] = [[0, 1], [1, 1], [0, 0]]\nmu = np.full((3, 4), 0.5)\n"
            "mu[:, 2:] = clamp[:, 2:]\nxi = np.full((3, 4), 0.5)")
    entry = draw(st.sampled_from(("sjj.solve", "sjj.evaluate", "plefka.solve",
                                  "plefka.objective", "plefka.gradient")))
    calls = {
        "sjj.solve": ("out = sjj.solve(s, w, h, net_of, clamp)", "kernel"),
        "sjj.evaluate": ("out = sjj.evaluate(s, w, h, net_of, clamp, mu, xi)", "kernel_value"),
        "plefka.solve": ("out = plefka.solve(s, w, h, net_of, clamp, 11, 'sigmoid')",
                         "kernel_plefka"),
        "plefka.objective": ("out = plefka.objective(s, w, h, net_of, clamp, mu, 12, 'sigmoid')",
                             "kernel_value"),
        "plefka.gradient": ("out = plefka.gradient(s, w, h, net_of, clamp, mu, 12, 'sigmoid')",
                            "finite"),
    }
    call, check = calls[entry]
    what = draw(st.sampled_from(("structure", "w", "h", "net_of", "clamp", "mu", "arg")))
    valid = False
    if what == "structure":
        arr = draw(st.sampled_from(("par_ptr", "par_idx", "ch_ptr", "ch_idx", "ch_w")))
        v = draw(st.sampled_from(["-1", "100", "2**62", "3"]))
        pos = draw(st.sampled_from(["0", "-1"]))
        how = draw(st.sampled_from(("set", "shorter", "float", "n_units")))
        if how == "set":
            edit = f"s.{arr} = s.{arr}.copy()\ns.{arr}[{pos}] = {v}"
            label = f"structure.{arr}[{pos}] = {v}"
        elif how == "shorter":
            edit, label = f"s.{arr} = s.{arr}[:-1]", f"structure.{arr} shorter"
        elif how == "float":
            edit, label = f"s.{arr} = s.{arr}.astype(float)", f"structure.{arr} as float"
        else:
            edit, label = f"s.n_units = {v}", f"structure.n_units = {v}"
            arr = "n_units"
        names = ["structure", arr]
    elif what in ("w", "h", "net_of", "clamp", "mu"):
        shape = {"w": (1, 3), "h": (1, 4), "net_of": (3,), "clamp": (3, 4), "mu": (3, 4)}[what]
        values = (st.sampled_from(["-1", "1", "2**62", "-2**63", "np.nan"]) if what == "net_of"
                  else FLOAT_VALUE)
        edit, label, valid = draw(array_edit(what, shape, what, values=values))
        names = [what]
        if what == "mu":
            if entry == "sjj.solve":
                call = call.replace("net_of, clamp)", "net_of, clamp, init_mu=mu)")
                names = ["init_mu"]
            elif entry == "plefka.solve":
                call = call.replace("'sigmoid')", "'sigmoid', init_u=mu)")
                names = ["init_u"]
            elif entry in ("plefka.objective", "plefka.gradient"):
                names = ["u"]
    else:
        arg = draw(st.sampled_from(("tol", "max_sweeps", "n_threads", "inner_tol")))
        if entry != "sjj.solve":
            arg = "n_threads" if entry == "sjj.evaluate" else draw(st.sampled_from(("tol",
                                                                                     "max_iter", "n_threads")))
            if entry in ("plefka.objective", "plefka.gradient"):
                arg = "order"
        v = draw(ANY_VALUE)
        if arg == "order":
            call = call.replace(", 12,", f", {v},")
        else:
            call = call[:-1] + f", {arg}={v})"
        edit, label, names = "", f"{arg}={v}", [arg]
    return _case("kernels", entry, base, edit, call, check, names, valid, label)


@st.composite
def load_case(draw):
    """``mf.load`` of a model file of any family that was damaged, replaced or crafted (a file
    may come from anywhere): one edit of ``model_files`` (truncation, a flipped bit, a
    foreign file, one stored array replaced by a hostile value, a header key added, removed,
    renamed or set to a hostile value, the array names dropped, repeated or reordered)."""
    from fuzz import model_files as mfz

    kind = draw(st.sampled_from(sorted(mfz.MODELS)))
    what = draw(st.sampled_from(["truncate", "flip", "foreign", "array", "array", "array",
                                 "header", "header", "keys"]))
    if what == "truncate":
        edit = f"mfz.truncate(p, {draw(st.sampled_from([0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99]))})"
    elif what == "flip":
        edit = (f"mfz.flip_bit(p, {draw(st.floats(0, 1).map(lambda v: round(v, 4)))}, "
                f"{draw(st.integers(0, 7))})")
    elif what == "foreign":
        edit = f"mfz.foreign(p, {draw(st.sampled_from(['npy', 'zip', 'npz', 'pickle', 'random', 'empty', 'compressed', 'extra entry']))!r})"
    elif what == "array":
        edit = (f"mfz.replace_array(p, {draw(st.integers(0, 30))}, "
                f"{draw(st.sampled_from(sorted(mfz.HOSTILE_ARRAYS)))!r})")
    elif what == "header":
        op = draw(st.sampled_from(["add", "remove", "rename", "set"]))
        section = draw(st.sampled_from(["top", "params", "state"]))
        key = draw(st.one_of(st.integers(0, 30), st.sampled_from(
            ["score_samples", "__dict__", "__class__", "weights_", "fit", "W_", "_src"])))
        value = draw(st.sampled_from(sorted(mfz.HOSTILE_JSON)))
        edit = f"mfz.edit_header(p, {op!r}, {section!r}, {key!r}, {value!r})"
    else:
        edit = f"mfz.edit_keys(p, {draw(st.sampled_from(['drop', 'repeat', 'reverse', 'remove', 'remove array']))!r})"
    setup = f"from fuzz import model_files as mfz\np, X = mfz.fresh_copy({kind!r})"
    call = f"m = mf.load(p)\nout = mfz.score({kind!r}, m, X)"
    # a loaded model may still refuse a value at use (a weight too large for one method):
    # the message then names the parameter
    names = ["file", "model file", "weights", "weights_", "biases", "biases_", "W_", "h_",
             "means_", "variances_", "transmat_", "startprob_", "X"]
    return _case("load", "mf.load", setup, edit, call, "finite", names, False,
                 f"{kind}: {edit}")


def _kernel_finding(entry, call, check, value):
    setup = ("from mfengine.sbn import sjj, plefka\nfrom mfengine.sbn.dag import DagStructure\n"
             "rng = np.random.default_rng(0)\nW = np.tril(rng.normal(size=(4, 4)), -1)\n"
             "s = DagStructure(W != 0)\nw = s.pack(W)[None]\nh = np.zeros((1, 4))\n"
             "net_of = np.zeros(3, dtype=np.intp)\nclamp = np.full((3, 4), np.nan)\n"
             "clamp[:, 2:] = [[0, 1], [1, 1], [0, 0]]\nmu = np.full((3, 4), 0.5)\n"
             "mu[:, 2:] = clamp[:, 2:]")
    edit = f"s.par_ptr = s.par_ptr.copy()\ns.par_ptr[-1] = {value}"
    return _case("kernels", entry, setup, edit, call, check, ["structure", "par_ptr"], False,
                 f"structure.par_ptr[-1] = {value}")


_CLF = ("rng = np.random.default_rng(0)\nX = (rng.random((16, 4)) < 0.5).astype(float)\n"
        "y = np.repeat([0, 1], 8)\nm = mf.GenerativeClassifier(hidden=(2,), max_iter=2, "
        "random_state=0, progress=False).fit(X, y)")

#: Failures the long profile found, run by every profile as regression cases (their family
#: counts them like any other case).
FINDINGS = [
    _case("GenerativeClassifier", "predict_proba", _CLF,
          "m.class_log_prior_ = np.asarray(m.class_log_prior_) * 1e100",
          "out = m.predict_proba(X)", "proba", ["class_log_prior_"], False,
          "class_log_prior_ * 1e100"),
    _case("kernels", "plefka.solve", _kernel_finding("plefka.solve", "", "", "0")["setup"]
          .rsplit("\ns.par_ptr", 1)[0], "h = np.full((1, 4), 1.7976931348623157e308)",
          "out = plefka.solve(s, w, h, net_of, clamp, 11, 'sigmoid')", "kernel_plefka", ["h"],
          False, "h filled with 1.7976931348623157e308"),
    _case("kernels", "plefka.gradient", _kernel_finding("plefka.solve", "", "", "0")["setup"]
          .rsplit("\ns.par_ptr", 1)[0], "w = w.copy()\nw.flat[0] = -1e300",
          "out = plefka.gradient(s, w, h, net_of, clamp, mu, 12, 'sigmoid')", "finite", ["w"],
          False, "w.flat[0] = -1e300"),
    _kernel_finding("plefka.solve", "out = plefka.solve(s, w, h, net_of, clamp, 11, 'sigmoid')",
                    "kernel_plefka", "2**62"),
    _kernel_finding("plefka.objective",
                    "out = plefka.objective(s, w, h, net_of, clamp, mu, 12, 'sigmoid')",
                    "kernel_value", "100"),
    _kernel_finding("plefka.gradient",
                    "out = plefka.gradient(s, w, h, net_of, clamp, mu, 12, 'sigmoid')",
                    "finite", "100"),
]


#: Every generator of mf.datasets: its call with valid arguments, and the arguments to edit.
DATASETS = {
    "make_diagnosis_net": ("make_diagnosis_net", dict(n_diseases=20, n_findings=30,
                                                      parents_per_finding=3, random_state=0),
                           ["prior", "link", "leak"]),
    "make_bars": ("make_bars", dict(n=5, random_state=0), ["size", "p_bar"]),
    "make_continuous_bars": ("make_continuous_bars", dict(n=5, random_state=0), ["noisy"]),
    "make_stereo": ("make_stereo", dict(n=5, random_state=0),
                    ["noisy", "n_dots", "n_pixels", "blur", "shift"]),
    "load_binary_digits": ("load_binary_digits", {}, ["threshold", "test_size",
                                                      "random_state"]),
}


@st.composite
def datasets_case(draw):
    """Hostile arguments to the generators and loaders of ``mf.datasets``."""
    entry = draw(st.sampled_from(sorted(DATASETS)))
    func, kwargs, extra = DATASETS[entry]
    arg = draw(st.sampled_from(sorted(set(kwargs) | set(extra))))
    v = draw(st.one_of(ANY_VALUE, st.sampled_from([
        "(0.1,)", "(0.5, 0.1)", "('a', 'b')", "(np.nan, 0.5)", "(0.1, 0.2, 0.3)", "'ab'",
        "(-1, 0.5)", "(0.1, np.inf)", "[0.1, 0.2]"])))
    args = {k: repr(x) for k, x in kwargs.items()}
    args[arg] = v
    call = f"out = mf.datasets.{func}(" + ", ".join(f"{k}={x}" for k, x in args.items()) + ")"
    return _case("datasets", entry, "", "", call, "any", [arg], False, f"{arg}={v}")


FAMILIES = {
    "SigmoidBeliefNet": sbn_case,
    "BeliefNet": dag_case,
    "BeliefNetBatch": batch_case,
    "NLGBN": nlgbn_case,
    "ContextHMM": hmm_case,
    "GenerativeClassifier": clf_case,
    "mf.infer": dispatch_case,
    "kernels": kernel_case,
    "load": load_case,
    "datasets": datasets_case,
}


def generate(family, n, seed=0):
    """``n`` distinct cases of ``family``, drawn by Hypothesis with a fixed seed."""
    return generate_many([family], n, seed)[family]


def generate_many(families, n, seed=0):
    """``{family: n distinct cases}``, drawn by Hypothesis with a fixed seed.

    The cases are drawn in a fresh interpreter (``python cases.py``): Hypothesis's engine
    is deterministic for a given seed only within the same calling context (the same seed
    drew 118 cases from one script and 119 from another), so every caller -- the short
    profile under pytest, bench/tools/fuzz_long.py -- draws them the same way and gets the same
    cases."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, os.path.abspath(__file__), ",".join(families),
                          str(n), str(seed)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"drawing the fuzz cases failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def _draw(family, n, seed):
    """``generate``'s work, in the fresh interpreter."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fixed_seed

    found = {}

    @fixed_seed(seed)
    @settings(max_examples=n, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(FAMILIES[family]())
    def collect(case):
        found.setdefault(case["id"], case)

    collect()
    return list(found.values())[:n]


if __name__ == "__main__":
    import json
    import sys

    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    n, seed = int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps({fam: _draw(fam, n, seed) for fam in sys.argv[1].split(",")}))
