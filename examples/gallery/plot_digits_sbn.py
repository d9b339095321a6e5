"""
Train a sigmoid belief net on your own images
=============================================

A layered sigmoid belief net models binary data. Here the "own images" are
scikit-learn's bundled 8x8 digits (grey levels 0-16); any ``(n, height, width)``
array works the same way: binarise it, flatten each image into a row, fit.

The net is trained by Saul & Jordan's mean-field learning (the gradient of the
Gaussian-approximated bound, on-line, with the paper's learning-rate schedule).
"""

# %%
# Binarise
# --------
# Binary units want 0/1 data. Thresholding at half the grey range is the simplest
# choice; drawing each pixel once as a Bernoulli variable with its grey level as
# probability (``rng.random(X.shape) < X / 16``) is the other common one.
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import mfengine as mf

images = load_digits().images                         # (1797, 8, 8), grey levels 0..16
X = (images.reshape(len(images), -1) >= 8).astype(float)
rng = np.random.default_rng(0)
order = rng.permutation(len(X))
X_train, X_test = X[order[:1400]], X[order[1400:]]
print(X_train.shape, X_test.shape, f"{X.mean():.2f} of the pixels are on")

# %%
# Fit
# ---
# Sizes run from the top layer to the visible one. ``fit`` returns the net;
# ``history_`` holds the mean bound per epoch.
net = mf.SigmoidBeliefNet([10, 40, 64], max_iter=8, random_state=0)
net.fit(X_train)
print("bound per epoch (nats):", np.round(net.history_, 2))
print(f"held-out mean bound: {net.score(X_test):.2f} nats per image")

# %%
# Samples and filters
# -------------------
# ``sample`` draws images by ancestral sampling. The columns of the last weight
# matrix (40 hidden units -> 64 pixels) show what each unit of the middle layer
# draws when it turns on.
samples = net.sample(16, random_state=1)
filters = net.weights_[-1].T                          # (40, 64): one row per middle unit

fig, axes = plt.subplots(2, 16, figsize=(12, 2.2))
for k in range(16):
    axes[0, k].imshow(samples[k].reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
    w = filters[k].reshape(8, 8)
    lim = np.abs(w).max()
    axes[1, k].imshow(w, cmap="RdBu_r", vmin=-lim, vmax=lim)
for ax in axes.ravel():
    ax.set_axis_off()
fig.text(0.01, 0.93, "samples", fontsize=9)
fig.text(0.01, 0.47, "weights of 16 middle units to the pixels (red +, blue -)", fontsize=9)
fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.9, hspace=0.35, wspace=0.1)

# %%
# Score new images
# ----------------
# ``score_samples`` gives a bound on ln P(x) per image: low values flag images
# unlike the training data. Shifting the test digits by one pixel makes them
# less probable under the model.
shifted = np.roll(X_test.reshape(-1, 8, 8), 1, axis=2).reshape(len(X_test), -1)
print(f"test digits {net.score(X_test):.2f}, shifted one pixel right {net.score(shifted):.2f}")
