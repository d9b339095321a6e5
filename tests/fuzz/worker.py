"""The child process of the fuzz suite: runs cases sent by the parent, one JSON line each.

Run as ``python worker.py`` (the parent, ``runner.py``, does this).  It reads one case per
line on stdin and writes one outcome per line on the file descriptor it was given (its
original stdout; the library's own prints go to stderr).  A case is Python source:
``setup`` (builds ``m``, ``X``, ... and applies the hostile edit) and ``call`` (assigns the
answer to ``out``); ``check`` names the property the answer must have.  A crash of the
compiled code kills only this process: the parent sees the pipe close, records the crash and
starts a fresh worker.

Every numeric property is checked here, in the child, so that the parent never touches the
library:

    ok     the call returned and the answer has its property (finite, in range, ...)
    error  the call raised; the parent judges whether the message names the argument
    bad    the call returned something it must not (NaN, inf, a bound above 0 for binary data,
           a bound above the exact ln P(v), a probability outside [0, 1], a decreasing
           history, a modified input)

The same file, run as ``python worker.py --repro 'code'``, runs one reproducer and prints
what the check made of it.
"""
import gc
import json
import math
import os
import sys
import time
import traceback
import warnings

PRELUDE = "import numpy as np\nimport mfengine as mf\n"

# cases import the suite's own helpers as ``fuzz.<module>`` (tests/ on the path)
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Largest |value| of a bound on ln P(v) of binary data that still counts as <= 0.
BOUND_SLACK = 1e-9


def _np():
    import numpy as np

    return np


def _finite_array(a, what):
    np = _np()
    if hasattr(a, "toarray"):      # a scipy.sparse parameter (BeliefNet's W may be sparse)
        a = a.toarray()
    a = np.asarray(a)
    if a.dtype.kind not in "biuf":
        return f"{what} has dtype {a.dtype}"
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        bad = a[~np.isfinite(a)].ravel()[0]
        return f"{what} holds a non-finite value ({bad!r})"
    return None


def _in_unit(a, what):
    np = _np()
    a = np.asarray(a, dtype=float)
    problem = _finite_array(a, what)
    if problem:
        return problem
    if a.size and (a.min() < -1e-12 or a.max() > 1 + 1e-12):
        return f"{what} leaves [0, 1] (min {a.min()!r}, max {a.max()!r})"
    return None


def _warned(caught, needle):
    return any(needle in str(w.message) for w in caught)


def _bound_problem(bound, method, ns, caught, allow_neg_inf=False):
    """What is wrong with a bound on ln P(v) for binary data (None when nothing)."""
    np = _np()
    if not isinstance(method, str):
        method = None           # a hostile m.method that the call did not use
    b = np.asarray(bound, dtype=float)
    finite = np.isfinite(b) | (allow_neg_inf & (b == -np.inf))
    if not np.all(finite):
        return f"bound holds a non-finite value ({b[~finite].ravel()[0]!r}) (method={method!r})"
    if method in ("sjj", "gaussian") and b.size and np.max(b) > BOUND_SLACK:
        return f"bound {np.max(b)!r} > 0 for binary data (method={method!r} is a bound)"
    if method and method.startswith("plefka") and b.size and np.max(b) > BOUND_SLACK:
        if not _warned(caught, "above 0"):
            return f"-G = {np.max(b)!r} > 0 without a warning (method={method!r})"
    return None


def _net_scale(m):
    """sum over units of |h_i| + sum_j |W_ij| (an upper bound on the rounding scale of z)."""
    np = _np()
    if hasattr(m, "W_"):
        Ws = m.W_ if isinstance(m.W_, list) else [m.W_]    # a sparse batch: a list of matrices
        W = sum(float(np.sum(np.abs(w.data if hasattr(w, "tocsr") else np.asarray(w))))
                for w in Ws)
        return W + float(np.sum(np.abs(np.asarray(m.h_))))
    W = [np.abs(np.asarray(w)) for w in m.weights_]
    h = [np.abs(np.asarray(b)) for b in m.biases_]
    return float(sum(np.sum(w) for w in W) + sum(np.sum(b) for b in h))


def _exact_problem(bound, ns):
    """For the strict bound on a small net: bound <= exact ln P(v) (None when it holds or
    cannot be checked)."""
    np = _np()
    m, X = ns.get("m"), ns.get("X")
    try:
        n_hidden = m.n_hidden
        if n_hidden > 12:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exact = np.asarray(m.exact_log_likelihood(X, missing=ns.get("missing")), dtype=float)
    except Exception:  # noqa: BLE001 - the oracle is unavailable for this input
        return None
    b = np.asarray(bound, dtype=float)
    if exact.shape != b.shape:
        return None
    ok = np.isfinite(exact)
    # float64 knows each input z_i = h_i + sum_j W_ij S_j only to about eps * (|h_i| +
    # sum_j |W_ij|), and d ln P / dz <= 1 per unit: beyond |W| ~ 1e15 the enumerated ln P(v)
    # itself depends on the order of summation, and no bound can be held to it more closely
    rounding = 8 * np.finfo(float).eps * _net_scale(m)
    over = (b - exact) > 1e-9 * np.maximum(1.0, np.abs(exact)) + rounding
    over &= ok
    if np.any(over):
        k = int(np.flatnonzero(over.ravel())[0])
        return (f"strict bound above exact ln P(v): {b.ravel()[k]!r} > {exact.ravel()[k]!r} "
                f"(by {b.ravel()[k] - exact.ravel()[k]:.3g})")
    return None


def check(kind, out, ns, caught):
    """None if ``out`` has the property ``kind`` names, else a description of what is wrong."""
    np = _np()
    if kind == "any":
        return None
    if kind in ("infer", "infer_strict"):
        method = getattr(out, "method", None)
        noisy = getattr(ns.get("m"), "activation", "sigmoid") == "noisy_or"
        p = _bound_problem(out.bound, method, ns, caught, allow_neg_inf=noisy)
        if p:
            return p
        for name in ("mu", "xi"):
            val = getattr(out, name, None)
            if val is None:
                continue
            parts = val if isinstance(val, list) else [val]
            for l, a in enumerate(parts):
                if name == "xi" and noisy:
                    p = _finite_array(a, f"{name}[{l}]")
                else:
                    p = _in_unit(a, f"{name}[{l}]")
                if p:
                    return p
        if kind == "infer_strict" and method == "sjj":
            return _exact_problem(out.bound, ns)
        return None
    if kind in ("scores", "score"):
        method = ns.get("method") or getattr(ns.get("m"), "method", None)
        noisy = getattr(ns.get("m"), "activation", "sigmoid") == "noisy_or"
        if kind == "score" and not isinstance(out, float):
            return f"score returned {type(out).__name__}, not a float"
        return _bound_problem(out, method, ns, caught, allow_neg_inf=noisy)
    if kind == "loglik":      # exact ln P(v) of binary data, or ln P(S)
        a = np.asarray(out, dtype=float)
        noisy = getattr(ns.get("m"), "activation", "sigmoid") == "noisy_or"
        if np.any(np.isnan(a)) or np.any(a == np.inf) or (not noisy and np.any(np.isinf(a))):
            return f"log-probability holds a non-finite value ({a[~np.isfinite(a)].ravel()[0]!r})"
        if a.size and np.nanmax(a) > BOUND_SLACK:
            return f"log-probability {np.nanmax(a)!r} > 0"
        return None
    if kind == "binary_sample":
        a = np.asarray(out[-1] if isinstance(out, list) else out)
        p = _finite_array(a, "sample")
        if p:
            return p
        if a.size and not np.all((a == 0) | (a == 1)):
            return "sample holds values other than 0 and 1"
        return None
    if kind == "finite":
        parts = out if isinstance(out, (list, tuple)) else [out]
        for k, a in enumerate(parts):
            p = _finite_array(a, f"output[{k}]")
            if p:
                return p
        return None
    if kind == "gradient":
        for k, part in enumerate(out):
            for l, a in enumerate(part):
                p = _finite_array(a, f"gradient[{k}][{l}]")
                if p:
                    return p
        return None
    if kind in ("fit", "fit_monotone", "fit_hmm"):
        m = ns.get("m")
        if out is not m:
            return f"fit returned {type(out).__name__}, not self"
        hist = getattr(m, "history_", None)
        hists = hist if isinstance(hist, list) else [hist]
        for h in hists:
            p = _finite_array(h, "history_")
            if p:
                return p
            h = np.asarray(h, dtype=float)
            if kind == "fit_monotone" and h.size > 1:
                drop = -np.diff(h)
                if np.any(drop > 1e-9 * np.maximum(1.0, np.abs(h[1:]))):
                    return f"history_ decreases (by {drop.max():.3g})"
        if kind == "fit_hmm" and hist is not None and np.size(hist) > 1:
            bw = int(m.bw_n_iter_)
            for part in (np.asarray(hist[:bw]), np.asarray(hist[bw:])):
                if part.size > 1:
                    drop = -np.diff(part)
                    if np.any(drop > 1e-9 * np.maximum(1.0, np.abs(part[1:]))):
                        return f"history_ decreases within a phase (by {drop.max():.3g})"
        for name in ("weights_", "biases_", "variances_", "W_", "h_", "means_",
                     "right_means_", "left_means_", "transmat_", "startprob_",
                     "class_log_prior_"):
            val = getattr(m, name, None)
            if val is None:
                continue
            for l, a in enumerate(val if isinstance(val, list) else [val]):
                p = _finite_array(a, f"{name}[{l}]")
                if p:
                    return f"after fit: {p}"
        return None
    if kind == "proba":
        a = np.asarray(out, dtype=float)
        p = _in_unit(a, "probabilities")
        if p:
            return p
        if a.ndim == 2 and a.size and np.max(np.abs(a.sum(axis=1) - 1.0)) > 1e-9:
            return "probabilities do not sum to 1 per row"
        return None
    if kind == "log_proba":
        a = np.asarray(out, dtype=float)
        if np.any(np.isnan(a)) or np.any(a == np.inf):
            return "log-probabilities hold NaN or +inf"
        if a.size and np.max(a) > BOUND_SLACK:
            return f"log-probability {np.max(a)!r} > 0"
        return None
    if kind == "predict":
        classes = getattr(ns.get("m"), "classes_", None)
        if classes is None:
            return None
        out, classes = np.asarray(out), np.asarray(classes)
        known = np.zeros(out.shape, dtype=bool)
        for c in classes:
            known |= out == c
        if classes.dtype.kind == "f" and out.dtype.kind == "f":
            known |= np.isnan(out) & np.any(np.isnan(classes))   # a NaN label the user set
        if not np.all(known):
            return "predict returned a label outside classes_"
        return None
    if kind == "accuracy":
        if not (isinstance(out, float) and 0.0 <= out <= 1.0):
            return f"score returned {out!r}, not an accuracy in [0, 1]"
        return None
    if kind == "hmm_score":
        if not (isinstance(out, float) and math.isfinite(out)):
            return f"score returned {out!r}, not a finite float"
        return _hmm_exact_problem(out, ns)
    if kind == "hmm_infer":
        p = _finite_array(out.bound, "bound")
        if p:
            return p
        if out.posteriors is not None:
            p = _in_unit(out.posteriors, "posteriors")
            if p:
                return p
        return _hmm_exact_problem(float(np.sum(out.bound)), ns)
    if kind == "hmm_samples":
        logprob, post = out
        if not math.isfinite(logprob):
            return f"log_prob {logprob!r} is not finite"
        return _in_unit(post, "posteriors") or _hmm_exact_problem(logprob, ns)
    if kind == "hmm_decode":
        logprob, path = out
        if not math.isfinite(logprob):
            return f"log_prob {logprob!r} is not finite"
        n = int(ns["m"].n_states)
        if np.size(path) and (np.min(path) < 0 or np.max(path) >= n):
            return "decoded state outside [0, n_states)"
        return None
    if kind == "hmm_path":
        n = int(ns["m"].n_states)
        if np.size(out) and (np.min(out) < 0 or np.max(out) >= n):
            return "predicted state outside [0, n_states)"
        return None
    if kind == "hmm_sample":
        X, states = out
        return _finite_array(X, "sampled X") or _finite_array(states, "sampled states")
    if kind == "kernel":      # (bound, mu, xi, n_sweeps, converged) of sjj.solve
        p = _finite_array(out[0], "bound")
        if p:
            return p
        if np.size(out[0]) and np.max(out[0]) > BOUND_SLACK:
            return f"bound {np.max(out[0])!r} > 0"
        return _in_unit(out[1], "mu")
    if kind == "kernel_plefka":   # (G, u, n_iter, converged)
        return _finite_array(out[0], "G") or _in_unit(out[1], "u")
    if kind == "kernel_value":
        return _finite_array(out, "value")
    return f"unknown check {kind!r}"


def _hmm_exact_problem(total, ns):
    """A structured or naive bound is never above the exact ln P(x) (small lags only)."""
    np = _np()
    m, method = ns.get("m"), ns.get("method") or getattr(ns.get("m"), "method", None)
    if method == "exact" or not ns.get("hmm_oracle", False):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exact = m.score(ns["X"], ns.get("lengths"), method="exact")
    except Exception:  # noqa: BLE001 - no oracle for this input
        return None
    if np.isfinite(exact) and total - exact > 1e-7 * max(1.0, abs(exact)):
        return f"bound {total!r} above exact ln P(x) {exact!r} (method={method!r})"
    return None


def _snapshot(ns):
    """Copies of the array inputs, to check that the call did not modify them."""
    np = _np()
    snap = {}
    for name in ("X", "y", "lengths", "missing", "init_mu"):
        val = ns.get(name)
        if isinstance(val, np.ndarray) and val.dtype != object:
            snap[name] = val.copy()
    return snap


def _modified(ns, snap):
    np = _np()
    for name, before in snap.items():
        after = ns.get(name)
        if not isinstance(after, np.ndarray) or after.shape != before.shape:
            continue
        try:
            same = np.array_equal(after, before, equal_nan=before.dtype.kind in "fc")
        except TypeError:
            same = np.array_equal(after, before)
        if not same:
            return f"the call modified its input {name}"
    return None


def _churn():
    """Allocate and free, so that a heap corruption left by the case shows here, not later."""
    np = _np()
    junk = [np.empty(64 + 37 * k) for k in range(100)]
    junk += [bytearray(100 + k) for k in range(100)]
    del junk
    gc.collect(0)       # the young generation only: a full collection costs 0.1 s here


def run_case(case, ns=None):
    """Run one case; returns its outcome as a dict (never raises)."""
    ns = {} if ns is None else ns
    res = {"id": case.get("id")}
    try:
        prelude = "" if case.get("bare") else PRELUDE
        exec(compile(prelude + case["setup"], "<setup>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001 - setup must work; report it
        res.update(outcome="setup_error", exc_type=type(exc).__name__, msg=str(exc)[:500],
                   tb=traceback.format_exc()[-1500:])
        return res
    snap = _snapshot(ns)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(case["call"], "<call>", "exec"), ns)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - every exception is an outcome
            res.update(outcome="error", exc_type=type(exc).__name__,
                       exc_mro=[c.__name__ for c in type(exc).__mro__],
                       msg=str(exc)[:1000], tb=traceback.format_exc()[-1500:])
        else:
            try:
                problem = check(case.get("check", "any"), ns.get("out"), ns, caught)
            except Exception as exc:  # noqa: BLE001 - an answer the check cannot read
                problem = f"the answer could not be checked ({type(exc).__name__}: {exc})"
            problem = problem or _modified(ns, snap)
            res.update(outcome="bad" if problem else "ok", problem=problem)
        res["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:160]}"
                                  for w in caught})[:5]
    res["elapsed"] = time.perf_counter() - t0
    _churn()
    return res


def serve():
    """The worker loop: one case per line on stdin, one outcome per line on the result fd."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # the library's prints go to stderr, not the results
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")
    import numpy  # noqa: F401  (import before the first case, so a case is timed alone)
    if not os.environ.get("MFENGINE_FUZZ_BARE"):      # the runner's own tests skip these
        import mfengine  # noqa: F401
        import mfengine.classify  # noqa: F401
        import mfengine.hmm  # noqa: F401
        import mfengine.nlgbn  # noqa: F401

    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        sys.stderr.write(f"\n=== case {case.get('id')}\n")
        sys.stderr.flush()
        res = run_case(case)
        out.write(json.dumps(res, default=str) + "\n")


def repro(code):
    """Run a reproducer's code (setup and call in one) and print the outcome."""
    case = {"id": "repro", "setup": "", "call": code, "check": "any"}
    res = run_case(case)
    print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--repro":
        repro(sys.argv[2])
    else:
        serve()
