"""
Bounds and approximations on a QMR-sized diagnosis net
======================================================

On a net of the size of QMR-DT (600 diseases, 4,000 findings, 40,000 links; built by
``mf.datasets.make_diagnosis_net``) exact ln P(findings) is out of reach of
enumeration, but ``"sjj"`` gives a *certified lower bound*: ln P lies above it. The
Plefka values -G are approximations that may lie on either side of ln P. So a case
where -G falls below the sjj bound is one where -G is too low by at least the
difference, and -G above 0 nats is impossible for a log-probability.

Cases are drawn from the net itself, with every finding recorded, and again with
most findings unrecorded (``missing=``), which sums them out.
"""

import time

import matplotlib.pyplot as plt
import numpy as np

import mfengine as mf

net = mf.datasets.make_diagnosis_net(random_state=0)
X = net.sample(20, random_state=1)                   # 20 cases, all 4,000 findings
print(f"{net.n_hidden} diseases, {net.n_visible} findings, {net.n_weights} links; "
      f"{X.sum(axis=1).mean():.0f} positive findings per case on average")

rng = np.random.default_rng(2)
unrecorded = rng.random(X.shape) < 0.95              # 95% of the findings not recorded


def run(missing):
    out = {}
    for method in ("sjj", "plefka11", "plefka12"):
        t0 = time.process_time()
        r = net.infer(X, missing=missing, method=method, n_threads=1)
        out[method] = (r.bound, time.process_time() - t0, r.converged.mean())
    return out


for title, missing in [("every finding recorded", None),
                       ("95% of the findings unrecorded", unrecorded)]:
    res = run(missing)
    lower = res["sjj"][0]
    print(title)
    for method, (value, t, conv) in res.items():
        line = (f"  {method:9s} mean {value.mean():9.2f} nats, {len(X) / t:7.1f} cases per "
                f"CPU-second, converged {conv:.2f}")
        if method != "sjj":
            below = value < lower - 1e-9
            line += (f"; below the sjj bound on {below.sum()} of {len(X)} cases"
                     + (f" (by {np.max(lower - value):.1f} nats at most)" if below.any() else ""))
        print(line)
    if missing is None:
        full = res

# %%
# Every finding recorded: each case's value against the certified lower bound, by
# the number of positive findings.
n_pos = X.sum(axis=1)
fig, ax = plt.subplots(figsize=(7, 3))
for method, marker in [("plefka11", "o"), ("plefka12", "s")]:
    ax.scatter(n_pos, full[method][0] - full["sjj"][0], marker=marker, s=16,
               label=f"-G of {method} minus the sjj bound")
ax.axhline(0, color="k", lw=0.8)
ax.set_xlabel("positive findings in the case")
ax.set_ylabel("nats")
ax.legend(fontsize=8)
fig.tight_layout()
