"""A PyTorch peer for mean-field SBN learning: a 200-200-784 sigmoid belief net on binarised
Fashion-MNIST, trained with an amortised inference network by VIMCO or NVIL, under a
wall-clock budget, its held-out ln P(x) estimated by importance sampling along the way.

The model
---------
Generative net p, top layer first (the layout of ``mf.SigmoidBeliefNet([200, 200, 784])``:
``weights[l]`` of shape (sizes[l+1], sizes[l]), one bias vector per layer)::

    p(h2) = prod Bern(sigmoid(b0)),  p(h1 | h2) = Bern(sigmoid(W0 h2 + b1)),
    p(x | h1) = Bern(sigmoid(W1 h1 + b2))

Inference net q, bottom-up, sigmoid Bernoulli layers of the same widths::

    q(h1 | x) = Bern(sigmoid(R1 (x - m) + c1)),  q(h2 | h1) = Bern(sigmoid(R0 h1 + c0))

(m: the training pixel means; centring q's input, the usual preconditioning of an input
layer, changes only how c1 is parametrised, not what q can express.)  Weights start
N(0, 1/fan_in), biases at 0, except the visible biases b2 = logit of the clipped pixel means.

The estimators (written from the math of the two papers)
-------------------------------------------------------
f(h) = ln p(x, h) - ln q(h | x).

* VIMCO (Mnih & Rezende 2016), K samples h^1..h^K ~ q per image:
  L = ln (1/K) sum_k exp f_k, a lower bound on ln p(x).  Its gradient for p is
  sum_k w_k grad ln p(x, h^k) with w_k the normalised weights; for q it is
  sum_k (L - L_{-k}) grad ln q(h^k | x) - sum_k w_k grad ln q(h^k | x), where
  L_{-k} = ln (1/K) (sum_{j != k} exp f_j + exp g_k) replaces f_k by the arithmetic mean of the
  other f_j (the geometric mean of their weights).  This is the gradient of the surrogate
  L + sum_k stop(L - L_{-k}) ln q(h^k | x), which ``--grad autograd`` backpropagates.
* NVIL (Mnih & Gregor 2014), one sample per image: p follows grad ln p(x, h); q follows
  l grad ln q(h | x) with the learning signal l = (f - C(x) - c) / max(1, sqrt(v)), where
  C is a baseline MLP on x (784-100-1, tanh), and c, v are exponential moving averages
  (alpha = 0.8) of the batch mean and variance of f - C(x).  C is fitted by least squares to
  f - c.  The signal is the whole f (no per-layer local signals).

Adam, batch 100, lr 1e-3 by default for both methods (``--lr``).  Why: in a pilot (VIMCO,
the two rates side by side for 3 minutes on one thread each, about 600,000 patterns or 10
epochs each, held-out ln P on 300 test images) lr 1e-3 reached -130.9 nats against -143.4
for lr 3e-4, and was ahead at every checkpoint; a budget of minutes rewards the faster rate,
and nothing in the pilot suggested instability.  NVIL was not piloted separately.
Gradients are the hand-derived ones of ``Peer.set_gradients`` (``--grad autograd``
backpropagates the surrogate instead; the two agree to rounding on the same draws), and Adam
is PyTorch's fused implementation; both only save time.  Training runs in float32 (the throughput figures depend on it), and so does the
evaluation by default: its log weights, averaged in float64, differed from a float64
evaluation's on the same draws by at most 1e-4 nats (4e-5 nats per image's estimate, on 50
test images x 1000 draws of a partly trained net), against a Monte-Carlo error of about 0.05
nats; ``--eval-dtype float64`` takes twice as long.

Evaluation
----------
At each of ``--checkpoints`` equally spaced points of the training clock (which excludes
evaluation time), ln P(x) of a fixed subset of ``--n-eval`` test images is estimated by
importance sampling with q as the proposal, ``--eval-samples`` samples per image:
ln (1/S) sum_s exp f(h^s), a stochastic lower bound on ln p(x) in expectation.  Per image
the Monte-Carlo standard error is the delta-method one, sqrt(Var(w) / (S mean(w)^2)); the
figure's ``se`` is that of the mean over images, sqrt(sum se_i^2) / n (the error of the
estimate for *these* images, as ``mf.LogLikelihoodEstimate`` reports it), and ``se_images``
is sd(ln P_i) / sqrt(n), the error of the subset mean as an estimate of the whole test set's.

The budget is counted on the training wall clock (``--clock wall``).  On a machine shared with
other work, two threads that must meet at every parallel region can lose most of their speed
(measured here: 11,000 VIMCO patterns/s alone, 3,400 with one competing busy process); with
``--clock patterns --rate R`` the budget and the checkpoints count patterns seen / R instead,
i.e. the clock of a machine that trains at R patterns/s, R measured while the machine was
quiet.  The learning at a checkpoint depends only on the patterns seen, so this reproduces
the uncontended run; each checkpoint still logs the real training seconds, the CPU seconds
per training second and the load average.

Outputs (under bench/results/, which git ignores): ``<stem>.json`` and ``<stem>.npz``, both
rewritten at each checkpoint and at the end; the .npz holds the nets (``p_weights_0``,
``p_biases_0``, ... in float64, readable by :func:`load_mfengine_net`, and the inference net
``q_*``).

Command lines
-------------
Run from the repository root, with PyTorch 2.13 (CPU) and mfengine installed::

    python bench/peers/torch_sbn_amortized.py --throughput --threads 2
    python bench/peers/torch_sbn_amortized.py --method vimco --minutes 5
    python bench/peers/torch_sbn_amortized.py --method nvil --minutes 5
    nohup python bench/peers/torch_sbn_amortized.py --method vimco --minutes 30 --full-test \\
        > bench/results/vimco_30min.log 2>&1 &
    # on a machine shared with other work, as the runs of the module's first results were:
    OMP_WAIT_POLICY=PASSIVE python bench/peers/torch_sbn_amortized.py --method vimco \\
        --minutes 30 --clock patterns --rate 10600 --full-test --out vimco_30min
    OMP_WAIT_POLICY=PASSIVE python bench/peers/torch_sbn_amortized.py --method nvil \\
        --minutes 5 --checkpoints 5 --clock patterns --rate 20000 --threads 1 --out nvil_5min
    # mfengine's AIS estimate of the exported net against the peer's own IS estimate
    # (AIS costs about 10 s of one core per image at 8 chains x 100 steps):
    python bench/peers/torch_sbn_amortized.py --crosscheck bench/results/<stem>.npz \\
        --n-check 50 --ais-chains 8 --ais-steps 100 --mf-importance --threads 2

Both estimates are stochastic lower bounds on ln P(x) in expectation, so the larger one is
the better.  mfengine's AIS starts its chains at the net's mean-field solution; on a net
trained for 100 epochs by NVIL it was below the peer's IS with the inference net (by 5.6
nats on 50 test images at 8 chains x 100 steps, and by 5.5 nats on 10 images at 4 x 500,
against 8.5 at 8 x 100 on those 10): not converged at these settings, whatever its
reported standard error says.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SIZES = (200, 200, 784)
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.normpath(os.path.join(HERE, "..", "results"))


def bern_logp(s, z):
    """ln Bern(s; sigmoid(z)) summed over the last axis: s z - softplus(z) = ln sigmoid((2s - 1)
    z) for s in {0, 1} (one transcendental per unit; cheaper than the BCE-with-logits op)."""
    return F.logsigmoid((2.0 * s - 1.0) * z).sum(-1)


def draw(z, gen=None):
    """Bernoulli(sigmoid(z)) draws, no gradient."""
    u = torch.rand(z.shape, dtype=z.dtype, device=z.device, generator=gen)
    return (u < torch.sigmoid(z)).to(z.dtype)


class Peer(torch.nn.Module):
    """The generative net p and the inference net q of the module docstring."""

    def __init__(self, sizes, pixel_mean, dtype=torch.float32):
        super().__init__()
        self.sizes = tuple(sizes)
        n_top, n_mid, n_vis = sizes
        P = torch.nn.Parameter

        def normal(rows, cols):
            return P(torch.randn(rows, cols, dtype=dtype) / math.sqrt(cols))

        m = torch.as_tensor(pixel_mean, dtype=dtype).clamp(1e-3, 1 - 1e-3)
        self.register_buffer("centre", torch.as_tensor(pixel_mean, dtype=dtype))
        # p, top first
        self.b0 = P(torch.zeros(n_top, dtype=dtype))
        self.W0 = normal(n_mid, n_top)
        self.b1 = P(torch.zeros(n_mid, dtype=dtype))
        self.W1 = normal(n_vis, n_mid)
        self.b2 = P(torch.log(m) - torch.log1p(-m))
        # q, bottom up
        self.R1 = normal(n_mid, n_vis)
        self.c1 = P(torch.zeros(n_mid, dtype=dtype))
        self.R0 = normal(n_top, n_mid)
        self.c0 = P(torch.zeros(n_top, dtype=dtype))

    def p_parameters(self):
        return [self.b0, self.W0, self.b1, self.W1, self.b2]

    def q_parameters(self):
        return [self.R1, self.c1, self.R0, self.c0]

    def sample_and_score(self, x, k, gen=None):
        """Draw k samples from q for each row of x (B, n_vis); return ln p(x, h) and
        ln q(h | x), each (k, B).  q's first layer is computed once per image."""
        z1 = F.linear(x - self.centre, self.R1, self.c1).expand(k, -1, -1)
        h1 = draw(z1.detach(), gen)
        z2 = F.linear(h1, self.R0, self.c0)
        h2 = draw(z2.detach(), gen)
        log_q = bern_logp(h1, z1) + bern_logp(h2, z2)
        log_p = (bern_logp(h2, self.b0.expand_as(h2))
                 + bern_logp(h1, F.linear(h2, self.W0, self.b1))
                 + bern_logp(x.expand(k, -1, -1), F.linear(h1, self.W1, self.b2)))
        return log_p, log_q

    @torch.no_grad()
    def score_for_update(self, x, k, gen=None):
        """The draws and ln p, ln q of ``sample_and_score`` (same random stream, so the same
        draws), with what ``set_gradients`` needs kept; no autograd graph is built."""
        s = 2.0 * x - 1.0                                     # x z - softplus(z) = logsig(s z)
        xc = x - self.centre
        a1 = torch.addmm(self.c1, xc, self.R1.t())            # (B, n_mid), shared by the k
        sig1 = torch.sigmoid(a1)
        h1 = (torch.rand((k,) + a1.shape, dtype=a1.dtype, generator=gen) < sig1).to(a1.dtype)
        a2 = F.linear(h1, self.R0, self.c0)
        sig2 = torch.sigmoid(a2)
        h2 = (torch.rand(a2.shape, dtype=a2.dtype, generator=gen) < sig2).to(a2.dtype)
        log_q = ((h1 * a1).sum(-1) + F.logsigmoid(-a1).sum(-1)
                 + (h2 * a2).sum(-1) + F.logsigmoid(-a2).sum(-1))
        z1 = F.linear(h2, self.W0, self.b1)
        # the visible layer is the widest: ln sigmoid(t) as log of the sigmoid that the
        # gradient needs anyway (a third of the cost of logsigmoid + expm1).  t is floored
        # at -80 so that the sigmoid cannot underflow to 0; that changes ln p only where a
        # pixel's logit is beyond -80 against its value (never seen here), and not the
        # gradient.  The evaluation does not take this path.
        t = F.linear(h1, self.W1, self.b2).mul_(s).clamp_(min=-80.0)
        sig = torch.sigmoid(t)
        log_p = (h2 @ self.b0 + F.logsigmoid(-self.b0).sum()
                 + (h1 * z1).sum(-1) + F.logsigmoid(-z1).sum(-1) + torch.log(sig).sum(-1))
        # d ln p / d z at the visible layer: x - sigmoid(z) = s (1 - sigmoid(s z))
        g_vis = sig.neg_().add_(1.0).mul_(s)
        cache = (xc, sig1, h1, sig2, h2, h1 - torch.sigmoid(z1), g_vis)
        return log_p, log_q, cache

    @torch.no_grad()
    def set_gradients(self, cache, dp, dq):
        """Set each parameter's ``.grad`` to minus the gradient of sum_{k,b} dp[k,b] ln p(x_b,
        h^kb) + dq[k,b] ln q(h^kb | x_b) (draws held fixed), from ``score_for_update``'s
        cache: the minimiser's convention for an objective to be raised."""
        xc, sig1, h1, sig2, h2, g_mid, g_vis = cache
        flat = lambda a: a.reshape(-1, a.shape[-1])                     # noqa: E731
        dpf, dqf = dp.reshape(1, -1), dq.reshape(1, -1)
        h1p = flat(h1 * dp[..., None])
        grads = {
            "W1": flat(g_vis).t() @ h1p,
            "b2": (dpf @ flat(g_vis))[0],
            "W0": flat(g_mid).t() @ flat(h2 * dp[..., None]),
            "b1": (dpf @ flat(g_mid))[0],
            "b0": (dpf @ flat(h2))[0] - dp.sum() * torch.sigmoid(self.b0),
        }
        g2 = flat(h2 - sig2)
        grads["R0"] = (g2 * dqf.t()).t() @ flat(h1)
        grads["c0"] = (dqf @ g2)[0]
        # q's first layer: sum over the k draws of dq (h1 - sigmoid(a1)), per image
        d1 = (dq[..., None] * h1).sum(0) - dq.sum(0)[:, None] * sig1
        grads["R1"] = d1.t() @ xc
        grads["c1"] = d1.sum(0)
        for name, g in grads.items():
            getattr(self, name).grad = g.neg_()

    def export(self):
        """The nets' parameters as float64 NumPy arrays, keyed as in the .npz file."""
        d = {}
        for l, w in enumerate([self.W0, self.W1]):
            d[f"p_weights_{l}"] = w.detach().double().numpy()
        for l, b in enumerate([self.b0, self.b1, self.b2]):
            d[f"p_biases_{l}"] = b.detach().double().numpy()
        for name in ("R1", "c1", "R0", "c0", "centre"):
            d[f"q_{name}"] = getattr(self, name).detach().double().numpy()
        return d


def peer_from_npz(path, dtype=torch.float64):
    """The Peer (p and q) saved by ``export`` in ``path``."""
    z = np.load(path)
    sizes = (z["p_biases_0"].size, z["p_biases_1"].size, z["p_biases_2"].size)
    peer = Peer(sizes, z["q_centre"], dtype=dtype)
    with torch.no_grad():
        for name, key in (("W0", "p_weights_0"), ("W1", "p_weights_1"), ("b0", "p_biases_0"),
                          ("b1", "p_biases_1"), ("b2", "p_biases_2"), ("R1", "q_R1"),
                          ("c1", "q_c1"), ("R0", "q_R0"), ("c0", "q_c0")):
            getattr(peer, name).copy_(torch.as_tensor(z[key], dtype=dtype))
    return peer


def load_mfengine_net(path, **params):
    """The generative net saved in ``path`` as an ``mf.SigmoidBeliefNet``.

    Parameters
    ----------
    path : str
        An .npz file written by this script.
    **params
        Constructor parameters of the net (e.g. ``n_threads``, ``progress``).

    Returns
    -------
    net : mfengine.SigmoidBeliefNet
        Sizes (200, 200, 784), ``weights_[l]`` = ``p_weights_l``, ``biases_[l]`` = ``p_biases_l``.
    """
    import mfengine as mf

    z = np.load(path)
    n_layers = sum(1 for k in z.files if k.startswith("p_biases_"))
    weights = [z[f"p_weights_{l}"] for l in range(n_layers - 1)]
    biases = [z[f"p_biases_{l}"] for l in range(n_layers)]
    return mf.SigmoidBeliefNet.from_params(weights, biases, **params)


# --------------------------------------------------------------------------- estimators
def leave_one_out(f):
    """VIMCO's L_{-k} for f of shape (K, B): ln (1/K) of the sum of exp f_j over j != k plus
    exp of the mean of those f_j."""
    k = f.shape[0]
    others = (f.sum(0, keepdim=True) - f) / (k - 1)
    # row k of the (K, K, B) stack is f with f_k replaced by that mean
    eye = torch.eye(k, dtype=torch.bool)[:, :, None]
    stack = torch.where(eye, others[:, None, :], f[None, :, :])
    return torch.logsumexp(stack, 1) - math.log(k)


class Vimco:
    """The K-sample VIMCO objective and its gradient (module docstring).

    ``grad="manual"`` sets the gradients from the hand-derived formulas of
    ``Peer.set_gradients``; ``grad="autograd"`` backpropagates the surrogate.  Given the same
    random stream both give the same gradients (bench/peers/test_torch_sbn_amortized.py).
    """

    def __init__(self, peer, k, grad="manual"):
        if k < 2:
            raise ValueError("VIMCO needs K >= 2 samples (its baselines leave one out)")
        self.peer, self.k, self.grad = peer, k, grad
        self.params = list(peer.parameters())
        self.log_k = math.log(k)

    def gradients(self, x):
        """Set every parameter's ``.grad`` (for a minimiser) from one batch; return the mean
        K-sample bound of the batch."""
        k, b = self.k, x.shape[0]
        if self.grad == "manual":
            log_p, log_q, cache = self.peer.score_for_update(x, k)
            f = log_p - log_q                                       # (K, B)
            bound = torch.logsumexp(f, 0) - self.log_k
            w = torch.softmax(f, 0)
            signal = bound[None, :] - leave_one_out(f)
            self.peer.set_gradients(cache, w / b, (signal - w) / b)
            return float(bound.mean())
        log_p, log_q = self.peer.sample_and_score(x, k)
        f = log_p - log_q
        bound = torch.logsumexp(f, 0) - self.log_k
        signal = bound.detach()[None, :] - leave_one_out(f.detach())
        surrogate = bound + (signal * log_q).sum(0)
        (-surrogate.mean()).backward()
        return float(bound.detach().mean())


class Nvil:
    """NVIL's single-sample estimator with its baselines (module docstring); ``grad`` as for
    ``Vimco`` (the baseline net is fitted by autograd either way)."""

    def __init__(self, peer, n_vis, hidden=100, alpha=0.8, dtype=torch.float32, grad="manual"):
        self.peer, self.grad = peer, grad
        self.baseline = torch.nn.Sequential(
            torch.nn.Linear(n_vis, hidden, dtype=dtype), torch.nn.Tanh(),
            torch.nn.Linear(hidden, 1, dtype=dtype))
        self.params = list(peer.parameters()) + list(self.baseline.parameters())
        self.alpha = alpha
        self.c = 0.0
        self.v = 1.0
        self.started = False

    def _signal(self, f, cx):
        r = f - cx
        mean, var = float(r.mean()), float(r.var())
        if not self.started:        # the first batch sets the averages outright
            self.c, self.v, self.started = mean, var, True
        else:
            a = self.alpha
            self.c = a * self.c + (1 - a) * mean
            self.v = a * self.v + (1 - a) * var
        return (r - self.c) / max(1.0, math.sqrt(self.v))

    def gradients(self, x):
        """Set every parameter's ``.grad`` (for a minimiser) from one batch; return the mean
        one-sample bound ln p(x, h) - ln q(h | x) of the batch."""
        b = x.shape[0]
        cx = self.baseline(x - self.peer.centre)[:, 0]
        if self.grad == "manual":
            log_p, log_q, cache = self.peer.score_for_update(x, 1)
            f = (log_p - log_q)[0]
            signal = self._signal(f, cx.detach())
            self.peer.set_gradients(cache, torch.full_like(log_p, 1.0 / b), signal[None, :] / b)
            (0.5 * ((f - self.c - cx) ** 2).mean()).backward()
            return float(f.mean())
        log_p, log_q = self.peer.sample_and_score(x, 1)
        log_p, log_q = log_p[0], log_q[0]
        f = (log_p - log_q).detach()
        with torch.no_grad():
            signal = self._signal(f, cx.detach())
        loss = -(log_p.mean() + (signal * log_q).mean()) + 0.5 * ((f - self.c - cx) ** 2).mean()
        loss.backward()
        return float(f.mean())


# --------------------------------------------------------------------------- evaluation
@torch.no_grad()
def is_estimate(peer, X, n_samples, seed, chunk_rows=20000):
    """Per-image importance-sampling estimate of ln p(x) with q as the proposal, and its
    delta-method standard error; float64 NumPy arrays of shape (n,)."""
    gen = torch.Generator().manual_seed(seed)
    per = max(1, chunk_rows // n_samples)
    est, se = [], []
    for a in range(0, X.shape[0], per):
        x = X[a:a + per]
        log_p, log_q = peer.sample_and_score(x, n_samples, gen)
        f = (log_p - log_q).double()                                 # (S, b)
        top = f.max(0).values
        w = torch.exp(f - top)
        m = w.mean(0)
        est.append(top + torch.log(m))
        se.append(torch.sqrt(w.var(0) / (n_samples * m * m)))
    return torch.cat(est).numpy(), torch.cat(se).numpy()


def summarise(est, se):
    n = est.size
    return {"lnp": float(est.mean()), "se": float(math.sqrt(np.sum(se ** 2)) / n),
            "se_images": float(est.std(ddof=1) / math.sqrt(n)), "n_images": int(n),
            "max_image_se": float(se.max())}


def evaluate(peer, X_eval, n_samples, seed, dtype=torch.float32):
    """Evaluate a copy of the nets in ``dtype`` (the training copy is left alone)."""
    ev = Peer(peer.sizes, peer.centre.double().numpy(), dtype=dtype)
    ev.load_state_dict({k: v.to(dtype) for k, v in peer.state_dict().items()})
    t0 = time.perf_counter()
    est, se = is_estimate(ev, torch.as_tensor(X_eval, dtype=dtype), n_samples, seed)
    out = summarise(est, se)
    out["eval_seconds"] = time.perf_counter() - t0
    return out, est, se


# --------------------------------------------------------------------------- driver
def train(args):
    from mfengine.datasets import load_fashion_mnist

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    X_train, X_test = load_fashion_mnist(args.data)
    X_eval = X_test[:args.n_eval]
    Xt = torch.as_tensor(X_train, dtype=torch.float32)
    n = Xt.shape[0]
    peer = Peer(SIZES, X_train.mean(0))
    est = (Vimco(peer, args.k, grad=args.grad) if args.method == "vimco"
           else Nvil(peer, SIZES[-1], grad=args.grad))
    # fused: the same Adam update in one kernel over all parameters (on this machine about
    # 0.7 ms a step instead of 1.8 ms for the default per-parameter loop)
    opt = torch.optim.Adam(est.params, lr=args.lr, fused=True)

    stem = args.out or (f"{args.method}_{args.minutes:g}min_seed{args.seed}_"
                        f"{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(RESULTS, exist_ok=True)
    json_path = os.path.join(RESULTS, stem + ".json")
    npz_path = os.path.join(RESULTS, stem + ".npz")
    record = {"method": args.method, "k": args.k if args.method == "vimco" else 1,
              "sizes": SIZES, "grad": args.grad, "lr": args.lr, "batch": args.batch, "threads": args.threads,
              "seed": args.seed, "budget_seconds": args.minutes * 60.0,
              "clock": args.clock, "rate": args.rate,
              "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
              "eval_samples": args.eval_samples, "torch": torch.__version__,
              "train_dtype": "float32", "eval_dtype": args.eval_dtype, "checkpoints": []}

    eval_dtype = {"float32": torch.float32, "float64": torch.float64}[args.eval_dtype]
    budget = args.minutes * 60.0
    marks = [budget * (i + 1) / args.checkpoints for i in range(args.checkpoints)]
    print(f"{args.method}: budget {budget:.0f} s of training, {args.threads} thread(s), "
          f"checkpoints every {budget / args.checkpoints:.0f} s; eval on {X_eval.shape[0]} "
          f"test images x {args.eval_samples} samples", flush=True)

    def checkpoint(train_s, train_cpu, seen, obj_sum, obj_count):
        # the machine may be shared: the load average and the CPU seconds the training
        # got per second of its clock (at most --threads) say how far to trust patterns/s
        load = os.getloadavg()[0]
        res, _, _ = evaluate(peer, X_eval, args.eval_samples, seed=12345, dtype=eval_dtype)
        row = {"train_seconds": train_s,
               "clock_seconds": train_s if args.clock == "wall" else seen / args.rate,
               "epochs": seen / n, "patterns_seen": seen,
               "patterns_per_second": seen / train_s if train_s > 0 else float("nan"),
               "train_cpu_per_second": train_cpu / train_s if train_s > 0 else float("nan"),
               "load_average_1min": load,
               "train_objective": obj_sum / max(obj_count, 1), **res}
        record["checkpoints"].append(row)
        record["eval_seconds_total"] = sum(r["eval_seconds"] for r in record["checkpoints"])
        np.savez(npz_path, **peer.export())      # the latest nets, should the run be cut short
        with open(json_path, "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"  t={row['clock_seconds']:7.1f}s (wall {train_s:7.1f}s)  epochs {row['epochs']:6.2f}  {row['patterns_per_second']:8.0f}"
              f" pat/s  train obj {row['train_objective']:8.2f}  held-out ln P "
              f"{res['lnp']:8.2f} +- {res['se']:.2f} (images {res['se_images']:.2f})  "
              f"[eval {res['eval_seconds']:.1f}s; cpu {row['train_cpu_per_second']:.2f}/s, "
              f"load {load:.1f}]", flush=True)

    train_s, train_cpu, seen, obj_sum, obj_count = 0.0, 0.0, 0, 0.0, 0
    perm, pos = rng.permutation(n), 0
    next_mark = 0
    while next_mark < len(marks):
        t0, c0 = time.perf_counter(), time.process_time()
        # 20 steps between clock reads: a checkpoint comes at most 20 steps late
        for _ in range(20):
            if pos + args.batch > n:
                perm, pos = rng.permutation(n), 0
            x = Xt[perm[pos:pos + args.batch]]
            pos += args.batch
            opt.zero_grad(set_to_none=True)
            obj = est.gradients(x)
            opt.step()
            seen += x.shape[0]
            obj_sum += obj
            obj_count += 1
        train_s += time.perf_counter() - t0
        train_cpu += time.process_time() - c0
        clock = train_s if args.clock == "wall" else seen / args.rate
        if clock >= marks[next_mark]:
            checkpoint(train_s, train_cpu, seen, obj_sum, obj_count)
            obj_sum, obj_count = 0.0, 0
            next_mark += 1
            while next_mark < len(marks) and clock >= marks[next_mark]:
                next_mark += 1

    np.savez(npz_path, **peer.export())
    if args.full_test:
        res, _, _ = evaluate(peer, X_test, args.eval_samples, seed=54321, dtype=eval_dtype)
        record["full_test"] = res
        print(f"  full test set ({X_test.shape[0]} images x {args.eval_samples}): ln P "
              f"{res['lnp']:.2f} +- {res['se']:.3f} (images {res['se_images']:.2f})  "
              f"[eval {res['eval_seconds']:.1f}s]", flush=True)
    with open(json_path, "w") as fh:
        json.dump(record, fh, indent=1)
    print(f"wrote {json_path} and {npz_path}", flush=True)


def throughput(args):
    """Training patterns/s of each method and gradient path: ``--reps`` timings of 100 steps
    each after 20 warm-up steps, on the real data, with the CPU seconds per second (2.0 on
    two threads of a quiet machine) and the load average beside each."""
    from mfengine.datasets import load_fashion_mnist

    torch.set_num_threads(args.threads)
    X_train, _ = load_fashion_mnist(args.data)
    Xt = torch.as_tensor(X_train, dtype=torch.float32)
    rng = np.random.default_rng(args.seed)
    out = []
    for method in ("vimco", "nvil"):
        for grad in ("manual", "autograd"):
            torch.manual_seed(args.seed)
            peer = Peer(SIZES, X_train.mean(0))
            est = (Vimco(peer, args.k, grad=grad) if method == "vimco"
                   else Nvil(peer, SIZES[-1], grad=grad))
            opt = torch.optim.Adam(est.params, lr=args.lr, fused=True)
            # rows drawn beforehand, gathered in the timed loop as training does
            batches = [rng.integers(0, Xt.shape[0], args.batch) for _ in range(120)]

            def steps(bs):
                for rows in bs:
                    x = Xt[rows]
                    opt.zero_grad(set_to_none=True)
                    est.gradients(x)
                    opt.step()

            steps(batches[:20])
            reps = []
            for _ in range(args.reps):
                t0, c0 = time.perf_counter(), time.process_time()
                steps(batches[20:])
                dt = time.perf_counter() - t0
                reps.append({"patterns_per_second": 100 * args.batch / dt,
                             "cpu_per_second": (time.process_time() - c0) / dt,
                             "load_average_1min": os.getloadavg()[0]})
            out.append({"method": method, "grad": grad, "threads": args.threads, "reps": reps})
            print(f"{method:5s} {grad:8s} {args.threads} thread(s): " + "  ".join(
                f"{r['patterns_per_second']:6.0f}/s (cpu {r['cpu_per_second']:.2f}, load "
                f"{r['load_average_1min']:.1f})" for r in reps), flush=True)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"throughput_{args.threads}threads_"
                                 f"{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {path}")


def crosscheck(args):
    """mfengine's AIS (and its mean-field importance sampler) on the exported net against the
    peer's IS with q, on the same test images."""
    from mfengine.datasets import load_fashion_mnist

    torch.set_num_threads(args.threads)
    _, X_test = load_fashion_mnist(args.data)
    X = X_test[:args.n_check]
    peer = peer_from_npz(args.crosscheck)
    net = load_mfengine_net(args.crosscheck, n_threads=args.threads, progress=False)
    rows = {}
    for n_s in (args.eval_samples, 10 * args.eval_samples):
        t0 = time.perf_counter()
        est, se = is_estimate(peer, torch.as_tensor(X), n_s, seed=777)
        rows[f"peer IS, q proposal, {n_s} samples"] = (est, se, time.perf_counter() - t0)
    t0 = time.perf_counter()
    r = net.log_likelihood(X, n_samples=args.ais_chains, method="ais", n_steps=args.ais_steps,
                           random_state=0)
    rows["mfengine AIS"] = (r.estimate, r.stderr, time.perf_counter() - t0)
    if args.mf_importance:
        t0 = time.perf_counter()
        r2 = net.log_likelihood(X, n_samples=args.eval_samples, method="importance",
                                random_state=0)
        rows["mfengine IS, mean-field proposal"] = (r2.estimate, r2.stderr,
                                                    time.perf_counter() - t0)
        rows["mfengine mean-field bound (gaussian)"] = (r2.bound, np.zeros_like(r2.bound), 0.0)
    print(f"{args.crosscheck}: {X.shape[0]} test images; peer IS {args.eval_samples} samples, "
          f"AIS {args.ais_chains} chains x {args.ais_steps} steps")
    base = rows[f"peer IS, q proposal, {args.eval_samples} samples"][0]
    out = {}
    for name, (e, s, sec) in rows.items():
        d = e - base
        print(f"  {name:40s} {e.mean():9.3f} +- {math.sqrt(np.sum(s ** 2)) / e.size:.3f}   "
              f"minus peer IS: mean {d.mean():+8.3f} (SE {d.std(ddof=1) / math.sqrt(d.size):.3f})"
              f"   [{sec:.1f}s]")
        out[name] = {"mean": float(e.mean()), "se": float(math.sqrt(np.sum(s ** 2)) / e.size),
                     "minus_peer_mean": float(d.mean()),
                     "minus_peer_se": float(d.std(ddof=1) / math.sqrt(d.size)), "seconds": sec}
    path = os.path.splitext(args.crosscheck)[0] + "_crosscheck.json"
    with open(path, "w") as fh:
        json.dump({"n_images": int(X.shape[0]), "eval_samples": args.eval_samples,
                   "ais_chains": args.ais_chains, "ais_steps": args.ais_steps, "rows": out},
                  fh, indent=1)
    print(f"wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=("vimco", "nvil"), default="vimco")
    ap.add_argument("--minutes", type=float, default=30.0, help="training wall-clock budget")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=5, help="VIMCO samples per image")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--grad", choices=("manual", "autograd"), default="manual",
                    help="hand-derived gradients (faster) or autograd on the surrogate")
    ap.add_argument("--checkpoints", type=int, default=10)
    ap.add_argument("--n-eval", type=int, default=1000, help="test images at each checkpoint")
    ap.add_argument("--eval-samples", type=int, default=1000, help="IS samples per image")
    ap.add_argument("--eval-dtype", choices=("float32", "float64"), default="float32",
                    help="precision of the evaluation's nets (log weights are averaged in "
                         "float64 either way)")
    ap.add_argument("--full-test", action="store_true",
                    help="at the end, also evaluate all 10,000 test images")
    ap.add_argument("--data", default=None, help="folder of the IDX files")
    ap.add_argument("--out", default=None, help="stem of the result files")
    ap.add_argument("--crosscheck", metavar="NPZ", default=None,
                    help="no training: compare mfengine's AIS on this exported net with the "
                         "peer's IS")
    ap.add_argument("--n-check", type=int, default=50)
    ap.add_argument("--ais-chains", type=int, default=8)
    ap.add_argument("--ais-steps", type=int, default=100)
    ap.add_argument("--mf-importance", action="store_true",
                    help="with --crosscheck: also mfengine's mean-field importance sampler")
    ap.add_argument("--clock", choices=("wall", "patterns"), default="wall",
                    help="what the budget and the checkpoints count: the training wall clock, "
                         "or patterns seen / --rate (the clock of a machine that trains at "
                         "--rate patterns/s; for runs on a machine shared with other work)")
    ap.add_argument("--rate", type=float, default=None,
                    help="patterns/s of --clock patterns (measured on a quiet machine)")
    ap.add_argument("--throughput", action="store_true",
                    help="no training run: time 100-step stretches of each method")
    ap.add_argument("--reps", type=int, default=3, help="timings per case of --throughput")
    args = ap.parse_args(argv)
    if args.clock == "patterns" and not (args.rate and args.rate > 0):
        ap.error("--clock patterns needs --rate, a positive number of patterns per second")
    if args.crosscheck:
        crosscheck(args)
    elif args.throughput:
        throughput(args)
    else:
        train(args)


if __name__ == "__main__":
    sys.exit(main())
