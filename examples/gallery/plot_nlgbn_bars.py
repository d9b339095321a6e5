"""
Continuous data: a nonlinear Gaussian belief net on bars
========================================================

:class:`mfengine.NLGBN` models real-valued data. Each unit's pre-activation is
Gaussian given its parents, and its output passes through a nonlinearity: linear,
binary (a step), rectified or sigmoidal. Training is variational EM.

The data are Frey & Hinton's continuous bars: 6x6 images whose bars, all vertical or
all horizontal, are on with probability 0.3 and an intensity drawn from [0, 5], plus
unit-variance noise. A net with one binary top unit (the orientation), 16 rectified
middle units and 36 linear visible units learns one bar per middle unit.
"""

import matplotlib.pyplot as plt
import numpy as np

import mfengine as mf

X = mf.datasets.make_continuous_bars(1000, noisy=True, random_state=0)
X_test = mf.datasets.make_continuous_bars(500, noisy=True, random_state=1)

g = mf.NLGBN([1, 16, 36], units=["binary", "rectified", "linear"], max_iter=40,
             random_state=0)
g.fit(X)
print("bound per pattern after the first E-step and each EM iteration (every 10th):")
print(np.round(g.history_[::10], 2))
print(f"held-out mean bound: {g.score(X_test):.2f} nats per image")

# %%
# What the middle units learned: their weights to the 36 pixels.
fig, axes = plt.subplots(2, 8, figsize=(8, 2.3))
for k, ax in enumerate(axes.ravel()):
    w = g.weights_[1][:, k].reshape(6, 6)
    ax.imshow(w, cmap="gray_r")
    ax.set_axis_off()
fig.suptitle("weights of the 16 rectified units to the pixels", fontsize=9)
fig.subplots_adjust(left=0.01, right=0.99, top=0.85, bottom=0.02, wspace=0.1, hspace=0.1)

# %%
# Missing values are NaN (or a ``missing=`` mask). ``impute`` fills them with their
# posterior predictive means; here the right half of each held-out image.
X_hid = X_test.copy().reshape(-1, 6, 6)
X_hid[:, :, 3:] = np.nan
X_hid = X_hid.reshape(len(X_test), 36)
filled = g.impute(X_hid)
hidden = np.isnan(X_hid)
rmse = np.sqrt(np.mean((filled[hidden] - X_test[hidden]) ** 2))
rmse_mean = np.sqrt(np.mean((np.broadcast_to(X.mean(0), X_test.shape)[hidden]
                             - X_test[hidden]) ** 2))
print(f"RMSE on the hidden half: {rmse:.2f} (pixel means: {rmse_mean:.2f})")
