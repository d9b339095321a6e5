"""The compiled training epoch (``_gaussian.fit_epoch``): against a plain Python epoch built
from the kernel's solves and the reference gradient; its argument checks (in a child process,
so that a crash is a test failure); and solver edge cases written with the kernel's internals
in view.  The kernel is called directly, on a minimal net object, as the estimators call it."""
import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mfengine.sbn import _gaussian

try:
    from . import reference as ref
except ImportError:  # tests/ is not a package: conftest.py puts references/ on sys.path
    import reference as ref


class Net:
    """What the kernel reads of a model: ``weights`` and ``biases``, lists of float64 arrays
    (the layer sizes are the lengths of the biases)."""

    def __init__(self, weights, biases):
        self.weights = [np.array(w, dtype=np.float64) for w in weights]
        self.biases = [np.array(b, dtype=np.float64) for b in biases]

    @property
    def sizes(self):
        return [len(b) for b in self.biases]

    def copy(self):
        return Net(self.weights, self.biases)


def random_net(sizes, weight_scale, seed, bias_scale=0.0):
    """Weights N(0, weight_scale^2 / fan_in), biases N(0, bias_scale^2)."""
    rng = np.random.default_rng(seed)
    W = [rng.normal(0.0, weight_scale / np.sqrt(sizes[l]), (sizes[l + 1], sizes[l]))
         for l in range(len(sizes) - 1)]
    return Net(W, [rng.normal(0.0, bias_scale, n) for n in sizes])


def sample(net, n, seed):
    """n visible vectors drawn from the net (ancestral sampling)."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, net.sizes[0])) < 1 / (1 + np.exp(-net.biases[0]))).astype(float)
    for W, b in zip(net.weights, net.biases[1:]):
        x = (rng.random((n, len(b))) < 1 / (1 + np.exp(-(x @ W.T + b)))).astype(float)
    return x


def inner_tol_for(tol):
    return min(1e-3, max(1e-13, 0.1 * np.sqrt(tol)))


def infer(net, V, missing=None, tol=1e-6, max_sweeps=200, inner_tol=None, init_mu=None,
          n_threads=1):
    """The kernel called as the net's ``infer`` calls it (inner_tol=None: the default inner
    tolerance with the gain rule on)."""
    gain_rule = inner_tol is None
    if inner_tol is None:
        inner_tol = inner_tol_for(tol)
    V = np.ascontiguousarray(V, dtype=np.float64)
    if missing is not None:
        missing = np.ascontiguousarray(missing, dtype=np.uint8)
        V = np.where(missing, 0.0, V)
    return _gaussian.run(net.weights, net.biases, V, missing, init_mu, tol, inner_tol, max_sweeps, n_threads,
                         gain_rule)


def gradient(net, V, r, missing=None):
    """The reference gradient summed over the patterns of V at the solution r."""
    gW = [np.zeros_like(w) for w in net.weights]
    gb = [np.zeros_like(b) for b in net.biases]
    for p in range(len(V)):
        obs = None if missing is None else 1.0 - missing[p]
        mu = [m[p] for m in r.mu[:-1]] + [np.where(np.isfinite(V[p]), V[p], 0.0)]
        w, b = ref.gradient(net.weights, net.biases, mu, [x[p] for x in r.xi], obs)
        for acc, g in zip(gW + gb, w + b):
            acc += g
    return gW, gb


def python_epoch(net, V, order, lr, batch_size, tol, missing=None):
    total = 0.0
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        mb = None if missing is None else missing[idx]
        r = infer(net, V[idx], missing=mb, tol=tol, max_sweeps=500)
        total += r.bound.sum()
        gW, gb = gradient(net, V[idx], r, mb)
        for w, g in zip(net.weights, gW):
            w += lr / len(idx) * g
        for b, g in zip(net.biases, gb):
            b += lr / len(idx) * g
    return total


def epoch(net, V, missing=None, order=None, lr=0.1, batch_size=5, tol=1e-8, state=None,
          callback=None):
    n = V.shape[0]
    if order is None:
        order = np.arange(n, dtype=np.intp)
    if state is None:
        state = np.full((n, sum(net.sizes)), 0.5)
    return _gaussian.fit_epoch(net.weights, net.biases, V, missing, order, lr, batch_size, tol, inner_tol_for(tol),
                               500, state, callback)


# ----------------------------------------------------------------------------- the epoch
def test_reference_gradient_matches_finite_differences():
    """ref.gradient is the derivative of ref.bound in every weight and bias (central
    differences), at a (mu, xi) away from the fixed points, with a missing visible entry."""
    net = random_net([2, 3, 4], 1.5, seed=0, bias_scale=1.0)
    rng = np.random.default_rng(1)
    mu = [rng.uniform(0.1, 0.9, n) for n in net.sizes[:-1]] + [np.array([1.0, 0.0, 1.0, 0.0])]
    xi = [rng.uniform(0.05, 0.95, n) for n in net.sizes]
    obs = np.array([1.0, 0.0, 1.0, 1.0])
    gW, gb = ref.gradient(net.weights, net.biases, mu, xi, obs)
    h = 1e-6
    for params, grads in ((net.weights, gW), (net.biases, gb)):
        for a, g in zip(params, grads):
            for idx in np.ndindex(a.shape):
                a0 = a[idx]
                a[idx] = a0 + h
                up = ref.bound(net.weights, net.biases, mu, xi, obs)
                a[idx] = a0 - h
                dn = ref.bound(net.weights, net.biases, mu, xi, obs)
                a[idx] = a0
                assert g[idx] == pytest.approx((up - dn) / (2 * h), rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("batch_size", [1, 7, 60])
@pytest.mark.parametrize("with_missing", [False, True])
def test_compiled_epoch_matches_python_epoch(batch_size, with_missing):
    V = sample(random_net([2, 4, 8], 2.0, seed=0), 60, seed=1)
    missing = None
    if with_missing:
        missing = (np.random.default_rng(4).random(V.shape) < 0.2).astype(np.uint8)
        V = np.where(missing, 0.0, V)
    a = random_net([2, 4, 8], 0.5, seed=3)
    b = a.copy()
    start = a.copy()
    order = np.random.default_rng(5).permutation(60).astype(np.intp)
    state = np.full((60, 14), 0.5)
    total = _gaussian.fit_epoch(a.weights, a.biases, V, missing, order, 0.1, batch_size, 1e-10,
                                inner_tol_for(1e-10), 500, state)
    total_ref = python_epoch(b, V, order, 0.1, batch_size, 1e-10, missing)
    assert total == pytest.approx(total_ref, rel=1e-12, abs=1e-9)
    for x, y in zip(a.weights + a.biases, b.weights + b.biases):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-11)
    # the parameters really moved
    assert max(np.abs(x - y).max() for x, y in zip(a.weights, start.weights)) > 1e-3


def test_epoch_with_zero_learning_rate_sums_the_converged_bounds():
    """With learning rate 0 the epoch's total is the sum of the solved bounds, the state holds
    the solutions, and the parameters are unchanged."""
    net = random_net([2, 4, 8], 1.0, seed=3)
    V = sample(random_net([2, 4, 8], 2.0, seed=0), 40, seed=1)
    state = np.full((40, 14), 0.5)
    before = net.copy()
    total = epoch(net, V, lr=0.0, tol=1e-10, state=state)
    r = infer(net, V, tol=1e-10, max_sweeps=500)
    assert total == pytest.approx(r.bound.sum(), abs=1e-9)
    np.testing.assert_allclose(state[:, :6], np.concatenate(r.mu[:-1], axis=1), atol=1e-9)
    for x, y in zip(net.weights + net.biases, before.weights + before.biases):
        np.testing.assert_array_equal(x, y)


def test_epoch_refuses_divergence_and_leaves_the_model_unchanged():
    net = random_net([2, 6], 1.0, seed=0)
    V = sample(net, 30, seed=1)
    before = net.copy()
    with pytest.raises(FloatingPointError, match="learning rate"):
        epoch(net, V, lr=1e308, batch_size=1)
    for x, y in zip(net.weights + net.biases, before.weights + before.biases):
        np.testing.assert_array_equal(x, y)


def test_epochs_in_python_threads_match_sequential_epochs():
    """The compiled epoch releases the GIL and keeps no shared state: nets trained in parallel
    Python threads end bit-identical to nets trained one after the other."""
    data = [sample(random_net([3, 6, 12], 1.5, seed=s), 80, seed=s + 10) for s in range(4)]
    seq = [random_net([3, 6, 12], 0.5, seed=s + 20) for s in range(4)]
    par = [n.copy() for n in seq]
    totals = [epoch(n, V, batch_size=4) for n, V in zip(seq, data)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda i: epoch(par[i], data[i], batch_size=4), range(4)))
    assert got == totals
    for a, b in zip(seq, par):
        for x, y in zip(a.weights + a.biases, b.weights + b.biases):
            np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------------------- argument checks
# Each case builds a fresh net [2, 3, 4] with 6 patterns, applies one change, calls fit_epoch and
# reports the exception: all run in one child process, so that an invalid read or write that
# crashes the interpreter fails the test instead of ending the test run.
EPOCH_CASES = {
    # (python statements applied to net, V, miss, order, state, kw; expected words in the error)
    "wider weight": ("net.weights[0] = np.zeros((3, 5))", "weights[0]"),
    "transposed weight": ("net.weights[1] = np.zeros((3, 4))", "weights[1]"),
    "longer bias": ("net.biases[1] = np.zeros(7)", "weights[0]"),
    "float32 weight": ("net.weights[0] = net.weights[0].astype(np.float32)", "weights[0]"),
    "list weight": ("net.weights[0] = net.weights[0].tolist()", "weights[0]"),
    "NaN weight": ("net.weights[0][0, 0] = np.nan", "weights[0]"),
    "1e300 weight": ("net.weights[1][0, 0] = -1e300", "weights[1]"),
    "1e300 bias": ("net.biases[2][0] = 1e300", "biases[2]"),
    "read-only weight": ("net.weights[1].flags.writeable = False", "weights[1]"),
    "missing weight": ("del net.weights[1]", "weight matrices"),
    "2-D bias": ("net.biases[0] = np.zeros((2, 1))", "biases[0]"),
    "empty bias": ("net.biases[0] = np.zeros(0)", "biases[0]"),
    "float32 V": ("V = V.astype(np.float32)", "V"),
    "Fortran V": ("V = np.asfortranarray(V)", "V must be C-contiguous"),
    "narrow V": ("V = V[:, :3].copy()", "V must have shape"),
    "1-D V": ("V = V[0].copy()", "V must be a 2-D"),
    "0.5 in V": ("V[2, 1] = 0.5", "V must be 0 or 1"),
    "NaN in V": ("V[2, 1] = np.nan", "V must be 0 or 1"),
    "missing shape": ("miss = np.zeros((6, 3), np.uint8)", "missing must have shape"),
    "missing dtype": ("miss = np.zeros((6, 4), np.int64)", "missing must have dtype"),
    "order dtype": ("order = order.astype(np.int32)", "order must have dtype"),
    "short order": ("order = order[:5].copy()", "order must have shape"),
    "order too large": ("order[3] = 6", "order must hold pattern indices"),
    "negative order": ("order[3] = -1", "order must hold pattern indices"),
    "state shape": ("state = np.full((6, 8), 0.5)", "state must have shape"),
    "read-only state": ("state.flags.writeable = False", "state must be writable"),
    "strided state": ("state = np.full((6, 18), 0.5)[:, ::2]", "state must be C-contiguous"),
    "NaN state": ("state[1, 2] = np.nan", "state"),
    "state above 1": ("state[1, 0] = 1.5", "state"),
    "NaN learning rate": ("kw['learning_rate'] = np.nan", "learning_rate"),
    "zero batch": ("kw['batch_size'] = 0", "batch_size"),
    "float batch": ("kw['batch_size'] = 2.0", "batch_size"),
    "zero tol": ("kw['tol'] = 0.0", "tol"),
    "NaN inner_tol": ("kw['inner_tol'] = np.nan", "inner_tol"),
    "zero max_sweeps": ("kw['max_sweeps'] = 0", "max_sweeps"),
    "huge max_sweeps": ("kw['max_sweeps'] = 2**70", "max_sweeps"),
    "callback not callable": ("kw['progress_callback'] = 5", "progress_callback"),
    "callback widens a weight": (
        "kw['progress_callback'] = lambda k: net.weights.__setitem__(0, np.zeros((3, 9)))",
        "weights[0]"),
    "callback adds a layer": (
        "kw['progress_callback'] = lambda k: (net.weights.append(np.zeros((2, 4))), "
        "net.biases.append(np.zeros(2)))", "layer sizes changed"),
}

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from mfengine.sbn import _gaussian

    class Net:
        def __init__(self):
            rng = np.random.default_rng(0)
            self.weights = [rng.normal(0, 1, (3, 2)), rng.normal(0, 1, (4, 3))]
            self.biases = [np.zeros(2), np.zeros(3), np.zeros(4)]

    out = {}
    for name, code in json.loads(sys.argv[1]).items():
        net = Net()
        V = (np.arange(24).reshape(6, 4) % 3 == 0).astype(float)
        miss = np.zeros((6, 4), np.uint8)
        order = np.arange(6, dtype=np.intp)
        state = np.full((6, 9), 0.5)
        kw = dict(learning_rate=0.1, batch_size=2, tol=1e-6, inner_tol=1e-4, max_sweeps=50,
                  progress_callback=None)
        exec(code)
        try:
            total = _gaussian.fit_epoch(net.weights, net.biases, V, miss, order, kw['learning_rate'], kw['batch_size'],
                                        kw['tol'], kw['inner_tol'], kw['max_sweeps'], state,
                                        kw['progress_callback'])
            out[name] = ["ok", repr(total)]
        except Exception as e:
            out[name] = ["ValueError" if isinstance(e, ValueError) else type(e).__name__, str(e)]
    print(json.dumps(out))
    """
)


def run_child(script, *args, timeout=300):
    """Run a Python script in a fresh interpreter; a crash (signal, abort) fails the test."""
    res = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, f"child process died ({res.returncode}):\n{res.stderr[-3000:]}"
    return res.stdout


def test_fit_epoch_checks_every_argument_before_touching_memory():
    got = json.loads(run_child(CHILD, json.dumps({k: v[0] for k, v in EPOCH_CASES.items()})))
    for name, (_, words) in EPOCH_CASES.items():
        kind, message = got[name]
        assert kind == "ValueError", f"{name}: {kind}: {message}"
        assert words in message, f"{name}: {message!r} does not name {words!r}"


def test_fit_epoch_clamps_a_huge_batch_size_to_the_data():
    net = random_net([2, 3, 4], 1.0, seed=0)
    V = sample(net, 6, seed=1)
    a, b = net.copy(), net.copy()
    t1 = epoch(a, V, batch_size=2**62)
    t2 = epoch(b, V, batch_size=6)
    assert t1 == t2 and np.isfinite(t1)
    for x, y in zip(a.weights + a.biases, b.weights + b.biases):
        np.testing.assert_array_equal(x, y)


def test_fit_callback_that_reshapes_a_weight_cannot_corrupt_memory():
    """The issue's repro through the public estimator, in a child process: a fit callback that
    replaces a weight matrix by a wider one between epochs gives a ValueError naming the
    weights (it used to read out of bounds and abort with "malloc(): corrupted top size")."""
    script = textwrap.dedent(
        """
        import numpy as np, mfengine as mf
        def widen(epoch, net, value):
            net.weights_[0] = np.zeros((net.weights_[0].shape[0], 50))
        V = (np.random.default_rng(0).random((20, 8)) < 0.5).astype(float)
        net = mf.SigmoidBeliefNet([2, 4, 8], max_iter=3, callback=widen, progress=False,
                                  random_state=0)
        try:
            net.fit(V)
            print("no error")
        except ValueError as e:
            print("ValueError", e)
        """
    )
    out = run_child(script)
    assert out.startswith("ValueError") and "weights" in out, out


# ----------------------------------------------------------------------------- solver edge cases
@pytest.mark.parametrize("init", [1e-9, 1e-12, 1.0 - 1e-12])
@pytest.mark.parametrize("inner_tol", [None, 1e-4])
def test_saturated_start_still_moves(init, inner_tol):
    """A mean started next to 0 or 1 moves when its derivative says so: the default rule that
    skips updates with a negligible predicted gain must not freeze saturated units."""
    net = Net([np.array([[1.0]])], [np.array([0.0]), np.array([0.0])])
    V = np.array([[1.0]])
    best = infer(net, V, tol=1e-12, inner_tol=1e-10)
    r = infer(net, V, init_mu=[[init]], inner_tol=inner_tol)
    assert r.mu[0][0, 0] == pytest.approx(best.mu[0][0, 0], abs=1e-3)
    assert r.bound[0] == pytest.approx(best.bound[0], abs=1e-6)
    # one hidden unit over one visible unit: the 1-D problem is concave and the bound is
    # within the Gaussian approximation of ln P(v)
    assert abs(r.bound[0] - ref.exact_log_likelihood(net.weights, net.biases, V[0])) < 0.05


def test_shallow_maximum_at_the_symmetric_start_is_left_for_the_far_better_one():
    """By symmetry the derivative is exactly 0 at mu = 0.5, the default start, and with the
    children's xi at their values there mu = 0.5 is a (very shallow) local maximum of this
    unit's non-concave 1-D objective, some 15 nats below the maxima near either end.  The
    solver's probe of the other end must find them."""
    J = 20.0
    net = Net([np.array([[J], [J]])], [np.zeros(1), np.array([-J / 2, -J / 2])])
    V = np.array([[1.0, 0.0]])
    xi = [np.array([0.5]), np.array([0.5, 0.5])]
    stuck = ref.bound(net.weights, net.biases, [np.array([0.5]), V[0]], xi)
    exact = ref.exact_log_likelihood(net.weights, net.biases, V[0])
    for inner_tol in (None, 1e-6):
        r = infer(net, V, inner_tol=inner_tol)
        m = r.mu[0][0, 0]
        assert m < 0.1 or m > 0.9
        assert r.bound[0] > stuck + 5.0
        # the Gaussian-approximated bound is close to the exact value (not necessarily below)
        assert abs(r.bound[0] - exact) < 0.1


@pytest.mark.parametrize("sizes, weight_scale", [([3, 8, 20], 1.0), ([4, 12, 36], 1.0),
                                                 ([3, 8, 20], 3.0), ([2, 6, 6, 12], 2.0)])
def test_default_mode_shortcuts_never_lower_the_bound(sizes, weight_scale):
    """With the default tolerances the solver skips updates with a negligible predicted gain
    and takes short Newton steps without re-evaluating the children (their cached sigmoids
    move by a Taylor step).  Every such step must still raise the exact bound, and the
    shortcuts must actually be taken (the path differs from the fully evaluated one)."""
    net = random_net(sizes, weight_scale, seed=11)
    V = sample(net, 3, seed=12)
    H = sum(sizes[:-1])
    moved_differently = False
    for v in V:
        fast = _gaussian.trace(net.weights, net.biases, v, max_sweeps=12, inner_tol=1e-4, gain_tol=1e-6 / (10 * H))
        full = _gaussian.trace(net.weights, net.biases, v, max_sweeps=12, inner_tol=1e-4)
        drop = fast["before"] - fast["after"]
        scale = 1.0 + np.abs(fast["before"]).max()
        assert drop.max() <= 1e-12 * scale, f"an update lowered the bound by {drop.max():.3e}"
        # the default mode reaches the same bound as the fully evaluated path, to round-off of tol
        assert fast["after"][-1] == pytest.approx(full["after"][-1], abs=1e-5)
        moved_differently |= not np.array_equal(fast["mu"], full["mu"])
    assert moved_differently


def test_many_python_threads_at_once():
    """Concurrent calls from Python threads (the kernel releases the GIL) give exactly the
    answers of sequential calls, on 1 and 2 OpenMP threads each."""
    nets = [random_net([4, 12, 36], 1.0, seed=s) for s in range(4)]
    data = [sample(n, 300, seed=7) for n in nets]
    expected = [infer(n, V, n_threads=1).bound for n, V in zip(nets, data)]
    jobs = [(i % 4, nt) for i in range(16) for nt in (1, 2)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda j: infer(nets[j[0]], data[j[0]], n_threads=j[1]).bound, jobs))
    for (i, _), bound in zip(jobs, got):
        np.testing.assert_array_equal(bound, expected[i])


@pytest.mark.parametrize("inner_tol", [None, 1e-10])
def test_pass_skipping_a_layer_does_not_stop_early(inner_tol):
    """With two hidden layers a pass may skip the layer the previous pass ended on; a pass over
    pinned (saturated) units alone changes the bound by nothing, and must not on its own declare
    convergence.  Restarting from the reported solution must gain nothing."""
    W0 = np.array([[-1.2, 1.4], [-0.8, 0.2]])
    W1 = np.array([[-2.5, -6.7], [-11.3, 0.8], [3.1, -6.9], [-11.7, 14.0]])
    net = Net([W0, W1], [np.array([-1.3, -2.2]), np.zeros(2), np.zeros(4)])
    V = np.ones((1, 4))
    r = infer(net, V, tol=1e-12, inner_tol=inner_tol)
    assert r.converged.all()
    again = infer(net, V, tol=1e-12, inner_tol=inner_tol,
                  init_mu=np.concatenate(r.mu[:-1], axis=1))
    assert again.bound[0] - r.bound[0] < 1e-9
