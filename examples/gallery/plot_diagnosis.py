"""
Disease posteriors in a diagnosis net
=====================================

A diagnosis net (the shape of QMR-DT) is bipartite: diseases are roots with prior
probabilities, and each finding is a noisy-OR of the diseases linked to it,

.. math:: P(f_i = 1 \\mid d) = 1 - (1 - \\text{leak}_i) \\prod_j (1 - \\text{link}_{ij})^{d_j}.

In a :class:`mfengine.BeliefNet` with ``activation="noisy_or"`` a unit fires with
probability :math:`1 - e^{-z}`, :math:`z = h_i + \\sum_j W_{ij} s_j`, so the user's
numbers go in as :math:`W_{ij} = -\\ln(1 - \\text{link}_{ij})` and
:math:`h_i = -\\ln(1 - \\text{leak}_i)` (a disease's bias is
:math:`-\\ln(1 - \\text{prior}_j)`).

A case records some findings as present (1), some as absent (0), and most not at
all: those are marked ``missing`` and sum out of the problem exactly.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse

import mfengine as mf

# %%
# The user's numbers
# ------------------
# Here they are drawn at random (16 diseases, 60 findings, 4 diseases per finding);
# in practice they come from a knowledge base.
rng = np.random.default_rng(3)
n_d, n_f, per_finding = 16, 60, 4
prior = rng.uniform(0.01, 0.05, n_d)
leak = rng.uniform(0.005, 0.02, n_f)
link = np.zeros((n_f, n_d))
for i in range(n_f):
    link[i, rng.choice(n_d, per_finding, replace=False)] = rng.uniform(0.1, 0.9, per_finding)

# units 0..n_d-1 are the diseases, then the findings; W[i, j] is the edge j -> i, j < i
W = scipy.sparse.lil_matrix((n_d + n_f, n_d + n_f))
W[n_d:, :n_d] = -np.log1p(-link)
h = np.concatenate([-np.log1p(-prior), -np.log1p(-leak)])
net = mf.BeliefNet(W.tocsr(), h, visible=np.arange(n_d, n_d + n_f), activation="noisy_or")
print(net.n_hidden, "diseases,", net.n_visible, "findings,", net.n_weights, "links")

# %%
# A case
# ------
# Two diseases present; the findings are drawn from the net, and only a third of
# them are recorded.
d_true = np.zeros(n_d)
d_true[[2, 9]] = 1
p_f = 1 - (1 - leak) * np.prod(np.where(d_true > 0, 1 - link, 1.0), axis=1)
findings = (rng.random(n_f) < p_f).astype(float)
recorded = rng.random(n_f) < 1 / 3
case = np.where(recorded, findings, np.nan)[None, :]
missing = np.isnan(case)
print(f"{int(np.nansum(case))} positive and {int(np.sum(case == 0))} negative findings "
      f"recorded, {int(missing.sum())} not recorded")

# %%
# Posteriors by each method
# -------------------------
# ``infer`` returns the variational means; the first ``n_d`` columns of ``mu`` are
# the diseases' approximate posteriors. With 16 diseases the exact posterior is a sum
# over :math:`2^{16}` disease states, computed here directly from the noisy-OR
# formula (the unrecorded findings drop out).
posteriors, times, values = {}, {}, {}
for method in ("sjj", "plefka11", "plefka12"):
    t0 = time.process_time()
    r = net.infer(case, missing=missing, method=method)
    times[method] = time.process_time() - t0
    posteriors[method] = r.mu[0, :n_d]
    values[method] = r.bound[0]

states = ((np.arange(2**n_d)[:, None] >> np.arange(n_d)) & 1).astype(float)
log_p = states @ np.log(prior) + (1 - states) @ np.log1p(-prior)
obs = ~missing[0]
log_off = np.log1p(-leak[obs]) + states @ np.log1p(-link[obs]).T    # ln P(f_i = 0 | d)
f_obs = case[0, obs]
log_p += (log_off * (f_obs == 0)).sum(axis=1)
log_p += (np.log(-np.expm1(np.minimum(log_off, -1e-300))) * (f_obs == 1)).sum(axis=1)
log_evidence = np.logaddexp.reduce(log_p)
posteriors["exact"] = np.exp(log_p - log_evidence) @ states
values["exact"] = log_evidence
print("exact ln P(recorded findings) by enumeration:", round(log_evidence, 4),
      "(the package's own:", round(net.exact_log_likelihood(case, missing=missing)[0], 4), ")")

for method in ("sjj", "plefka11", "plefka12"):
    err = np.abs(posteriors[method] - posteriors["exact"])
    kind = "bound" if method == "sjj" else "-G"
    print(f"{method:9s} {kind:5s} {values[method]:9.4f}   mean |error| of the posteriors "
          f"{err.mean():.4f}, worst {err.max():.4f}, {1e3 * times[method]:.1f} ms CPU")

# %%
# ``sjj`` is a certified lower bound on ln P(findings); the Plefka values ``-G`` are
# approximations and may lie on either side of it. The posteriors:
fig, ax = plt.subplots(figsize=(8, 3))
x = np.arange(n_d)
for k, (name, p) in enumerate(posteriors.items()):
    ax.bar(x + (k - 1.5) * 0.2, p, width=0.2, label=name)
ax.set_xticks(x)
ax.set_xlabel("disease")
ax.set_ylabel("P(disease | recorded findings)")
ax.legend(fontsize=8)
ax.set_title(f"present: diseases {np.flatnonzero(d_true).tolist()}", fontsize=9)
fig.tight_layout()
