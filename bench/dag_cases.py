"""The models of bench/speed/dag_compare.py, their data, and mf.infer's run on them."""
import os
import sys
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/

import mfengine as mf  # noqa: E402

import _paths  # noqa: E402,F401  (accuracy/ on sys.path)
from plefka_tables import random_nets  # noqa: E402

BATCH_SIZES = (2, 4, 6)
N_NETS = 10000
LAYERED_SIZES = (4, 12, 36, 100)
N_PATTERNS = 1000
TOL = 1e-6
XI_TOL = 1e-10       # |phi'(xi)| at which the NumPy peer's xi solves stop
METHODS = ("sjj", "plefka11", "plefka12")
MODELS = {
    "batch": "10,000 random 2x4x6 nets, W, h ~ U[-1, 1], visible = 0",
    "layered": "4x12x36x100, W ~ N(0, 1/fan_in), 1000 sampled patterns",
}
# Asserted agreement (see the module docstring).
MAX_MEAN_ABS_DIFF_SJJ = 1e-4
MAX_MEAN_DIFF_G12 = 1e-4
MAX_OBJECTIVE_MISMATCH = 1e-9


# ---------------------------------------------------------------------------- cases
@dataclass
class Case:
    """One model with its data, as mf.infer takes it and as layers for the peers.

    ``W[l]`` is (n_items or 1, sizes[l + 1], sizes[l]), ``b[l]`` (n_items or 1, sizes[l]):
    per item for the batch of nets, shared (leading dimension 1) for the single net."""
    name: str
    description: str
    model: object
    V: np.ndarray
    W: list
    b: list
    sizes: tuple

    @property
    def n_items(self):
        return self.V.shape[0]

    def subset(self, n):
        """The first n items (the same nets and data, for the slow peers)."""
        if n is None or n >= self.n_items:
            return self
        W = [w[:n] if w.shape[0] > 1 else w for w in self.W]
        b = [v[:n] if v.shape[0] > 1 else v for v in self.b]
        model = self.model
        if isinstance(model, mf.BeliefNetBatch):
            model = mf.BeliefNetBatch(model.W[:n], model.h[:n], model.visible, model.activation)
        return Case(self.name, self.description, model, self.V[:n], W, b, self.sizes)


def make_case(name, n=None):
    if name == "batch":
        n = N_NETS if n is None else n
        batch = random_nets(np.random.default_rng(0), -1.0, 1.0, n, "sigmoid")
        off = np.cumsum((0,) + BATCH_SIZES)
        W = [np.ascontiguousarray(batch.W[:, off[l + 1]:off[l + 2], off[l]:off[l + 1]])
             for l in range(len(BATCH_SIZES) - 1)]
        b = [np.ascontiguousarray(batch.h[:, off[l]:off[l + 1]]) for l in range(len(BATCH_SIZES))]
        V = np.zeros((n, BATCH_SIZES[-1]))
        return Case(name, MODELS[name], batch, V, W, b, BATCH_SIZES)
    if name == "layered":
        n = N_PATTERNS if n is None else n
        net = mf.SigmoidBeliefNet(list(LAYERED_SIZES), random_state=0)
        V = net.sample(n, random_state=1)
        W = [np.asarray(w, dtype=np.float64)[None] for w in net.weights]
        b = [np.asarray(v, dtype=np.float64)[None] for v in net.biases]
        return Case(name, MODELS[name], net, V, W, b, LAYERED_SIZES)
    raise ValueError(f"unknown model {name!r}; one of {sorted(MODELS)}")


@dataclass
class Outcome:
    impl: str
    threads: int
    bound: np.ndarray           # (n_items,) nats: L for sjj, -G12 for plefka12
    converged: np.ndarray
    iterations: str
    mu: list = None             # hidden layers, (n_items, sizes[l]) each
    xi: list = None             # sjj: layers 1.., (n_items, sizes[l]) each
    seconds: float = float("nan")
    cpu_seconds: float = float("nan")
    extra: dict = field(default_factory=dict)


def run_mf(case, method, threads, tol=TOL):
    r = mf.infer(case.model, case.V, method=method, tol=tol, n_threads=threads)
    L = len(case.sizes)
    if isinstance(r.mu, list):                      # a layered net: one array per layer
        mu, xi = r.mu[:-1], None if r.xi is None else r.xi[1:]
    else:                                           # a batch: (n_nets, n_units)
        off = np.cumsum((0,) + case.sizes)
        mu = [r.mu[:, off[l]:off[l + 1]] for l in range(L - 1)]
        xi = None if r.xi is None else [r.xi[:, off[l]:off[l + 1]] for l in range(1, L)]
    sweeps = np.asarray(r.n_iter).ravel()
    return Outcome("mfengine", threads, np.asarray(r.bound).ravel(),
                   np.asarray(r.converged).ravel(),
                   f"{sweeps.mean():.1f}/{sweeps.max()} sweeps", mu, xi)


