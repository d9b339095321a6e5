"""
Compare the inference methods against exact ln P(x)
===================================================

Every belief net takes ``method=`` on ``infer`` and ``score_samples``: the
Gaussian-approximated bound (``"gaussian"``, layered sigmoid nets only), the strict
lower bound ``"sjj"``, and the Plefka approximations ``"plefka11"``, ``"plefka12"``,
``"plefka22"`` (the value reported is -G, which may lie on either side of ln P(x)).

On nets small enough to enumerate, each method's value is compared with the exact
ln P(x) per pattern, with its CPU time. The :doc:`/user_guide/which_method` page
gives the same comparison on larger nets.
"""

import time

import matplotlib.pyplot as plt
import numpy as np

import mfengine as mf

rng = np.random.default_rng(0)


def compare(net, X, methods, missing=None):
    """Mean signed and absolute error against exact, and CPU time, per method."""
    exact = net.exact_log_likelihood(X, missing=missing)
    out = {}
    for m in methods:
        t0 = time.process_time()
        value = net.score_samples(X, missing=missing, method=m)
        t = time.process_time() - t0
        out[m] = (np.mean(value - exact), np.mean(np.abs(value - exact)), t)
    return out


def show(title, results):
    print(title)
    print(f"  {'method':9s} {'mean(value - exact)':>20s} {'mean |error|':>13s} {'CPU ms':>8s}")
    for m, (signed, absolute, t) in results.items():
        print(f"  {m:9s} {signed:20.4f} {absolute:13.4f} {1e3 * t:8.1f}")


# %%
# A layered sigmoid net
# ---------------------
# 3-6-12 units, weights drawn with twice the default scale, 500 patterns sampled
# from the net itself.
net = mf.SigmoidBeliefNet([3, 6, 12], weight_scale=2.0, random_state=0)
X = net.sample(500, random_state=1)
layered = compare(net, X, ["gaussian", "sjj", "plefka11", "plefka12", "plefka22"])
show("layered sigmoid net 3-6-12, 500 patterns", layered)

# %%
# The same net with 30% of the pixels missing: missing units with no observed
# descendant sum out exactly in every method.
missing = rng.random(X.shape) < 0.3
show("same, 30% missing", compare(net, X, ["gaussian", "sjj", "plefka11", "plefka12",
                                           "plefka22"], missing))

# %%
# A noisy-OR net over a DAG
# -------------------------
# 14 units in topological order, each with up to four earlier parents; the last six
# are visible.
n = 14
W = np.tril(rng.uniform(0.2, 1.5, (n, n)) * (rng.random((n, n)) < 0.35), -1)
h = rng.uniform(0.05, 0.3, n)
dag = mf.BeliefNet(W, h, visible=np.arange(8, n), activation="noisy_or")
Xd = dag.sample(500, random_state=2)
noisy_or = compare(dag, Xd, ["sjj", "plefka11", "plefka12", "plefka22"])
show("noisy-OR DAG, 14 units, 500 patterns", noisy_or)

# %%
# ``plefka22`` on noisy-OR nets can break down: its G is unbounded below where a
# unit's input approaches zero, and ``infer`` warns when -G leaves the range of a
# log-probability (above 0 nats), as it does here. ``sjj`` stays a bound.

# %%
# Error against time, both nets.
fig, ax = plt.subplots(figsize=(6, 3.2))
for results, marker, label in [(layered, "o", "layered sigmoid"),
                               (noisy_or, "s", "noisy-OR DAG")]:
    for m, (signed, absolute, t) in results.items():
        ax.scatter(1e3 * t, absolute, marker=marker, color=f"C{list(layered).index(m)}",
                   label=f"{m} ({label})")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("CPU time, ms (500 patterns)")
ax.set_ylabel("mean |value - exact ln P(x)|, nats")
ax.legend(fontsize=7, ncol=2)
fig.tight_layout()
