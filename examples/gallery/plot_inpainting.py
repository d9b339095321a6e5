"""
Fill in missing pixels
======================

Missing entries are marginalised by every verb that takes ``missing=``: a boolean
mask of the data's shape (or one row for every pattern) that is True where a value
was not observed. ``impute`` replaces them by their posterior predictive
probability of a 1, by mean field or, with ``method="importance"``, by importance
sampling.

Here the bottom half of each held-out digit is hidden and filled in.
"""

import matplotlib.pyplot as plt
import numpy as np

import mfengine as mf

X_train, X_test, y_train, y_test = mf.datasets.load_binary_digits()   # 8x8, thresholded
net = mf.SigmoidBeliefNet([8, 24, 64], max_iter=8, random_state=0).fit(X_train)

missing = np.zeros(X_test.shape, dtype=bool)
missing[:, 32:] = True                        # the bottom four rows of every image
X_seen = X_test.copy()
X_seen[missing] = np.nan                      # missing entries may hold anything, NaN too

p_mf = net.impute(X_seen, missing)                                   # mean field
p_is = net.impute(X_seen, missing, method="importance", n_samples=500, random_state=0)
p_marg = np.broadcast_to(X_train.mean(axis=0), X_test.shape)         # pixel frequencies


def log_loss(p):
    """Mean per-pixel log-loss (nats) on the hidden pixels."""
    p = np.clip(p[missing], 1e-12, 1 - 1e-12)
    x = X_test[missing]
    return -np.mean(x * np.log(p) + (1 - x) * np.log1p(-p))


for name, p in [("pixel marginals", p_marg), ("mean field", p_mf), ("importance", p_is)]:
    print(f"{name:16s} log-loss {log_loss(p):.3f} nats per hidden pixel")

# %%
# The bound itself marginalises the hidden half too: ``score_samples(X, missing)``
# bounds ln P(top half).
print("mean bound on ln P(top half):", round(net.score(X_seen, missing=missing), 2))

# %%
# The first eight test digits: the truth, what the net saw, and its fill-in (grey
# levels are probabilities).
fig, axes = plt.subplots(3, 8, figsize=(8, 3.3))
shown = X_seen.copy()
shown[missing] = 0.5
for k in range(8):
    for row, img in enumerate([X_test[k], shown[k], p_mf[k]]):
        axes[row, k].imshow(img.reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
        axes[row, k].set_axis_off()
for row, label in enumerate(["truth", "seen", "filled in"]):
    axes[row, 0].text(-1.0, 3.5, label, ha="right", va="center", fontsize=9)
fig.subplots_adjust(left=0.1, right=0.99, top=0.98, bottom=0.02, wspace=0.1, hspace=0.1)
