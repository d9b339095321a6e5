"""
How far is the bound from ln P(x)?
==================================

A mean-field bound says nothing about its own gap. ``log_likelihood(X,
n_samples=K)`` estimates ln P(x) itself by importance sampling (the mean-field
posterior, mixed with the prior, as the proposal), with a standard error per
pattern; ``method="ais"`` uses annealed importance sampling from the same start, for
nets where the posterior is too sharp for one proposal. On a net with at most 20
hidden units, ``exact_log_likelihood`` enumerates them.

Here a 4-12-64 net (16 hidden units: exact enumeration is possible) is trained on
the binary 8x8 digits, and every estimate is set beside the exact value.
"""

import time

import matplotlib.pyplot as plt
import numpy as np

import mfengine as mf

X_train, X_test, _, _ = mf.datasets.load_binary_digits()
net = mf.SigmoidBeliefNet([4, 12, 64], max_iter=8, random_state=0).fit(X_train)
X = X_test[:200]


def timed(f, *args, **kw):
    t0 = time.process_time()
    out = f(*args, **kw)
    return out, time.process_time() - t0


exact, t_exact = timed(net.exact_log_likelihood, X)
gauss, t_gauss = timed(net.score_samples, X)                     # the net's own bound
sjj, t_sjj = timed(net.score_samples, X, method="sjj")           # a strict lower bound
imp, t_imp = timed(net.log_likelihood, X, n_samples=1000, random_state=0)
ais, t_ais = timed(net.log_likelihood, X, n_samples=25, method="ais", n_steps=20,
                   random_state=0)

rows = [("exact (enumeration)", exact, None, t_exact),
        ("Gaussian-approximated bound", gauss, None, t_gauss),
        ("strict bound (sjj)", sjj, None, t_sjj),
        ("importance, K = 1000", imp.estimate, imp.stderr, t_imp),
        ("AIS, 25 chains x 20 steps", ais.estimate, ais.stderr, t_ais)]
print(f"{'':30s} {'mean ln P':>10s} {'mean |error|':>13s} {'mean SE':>8s} {'CPU s':>6s}")
for name, value, se, t in rows:
    se_text = f"{se.mean():8.4f}" if se is not None else " " * 8
    print(f"{name:30s} {value.mean():10.4f} {np.abs(value - exact).mean():13.4f} "
          f"{se_text} {t:6.2f}")
print(f"importance estimates within 3 standard errors of exact: "
      f"{np.mean(np.abs(imp.estimate - exact) <= 3 * imp.stderr):.3f}")

# %%
# Per pattern: each bound lies below the exact value (the Gaussian-approximated one
# only approximately: it is not a strict bound), and the sampled estimates sit on it.
order = np.argsort(exact)
fig, ax = plt.subplots(figsize=(8, 3))
ax.plot(exact[order] - exact[order], "k-", lw=1, label="exact")
ax.plot(gauss[order] - exact[order], ".", ms=3, label="Gaussian-approximated bound")
ax.plot(sjj[order] - exact[order], ".", ms=3, label="sjj bound")
ax.errorbar(np.arange(len(X)), imp.estimate[order] - exact[order], yerr=imp.stderr[order],
            fmt=".", ms=3, lw=0.5, label="importance ± SE")
ax.set_xlabel("test digit, by exact ln P(x)")
ax.set_ylabel("minus exact ln P(x), nats")
ax.legend(fontsize=8)
fig.tight_layout()
