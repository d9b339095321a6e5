"""Figures in the style of Saul & Jordan's section 3 (Figs. 2-4), written to image files.

matplotlib is imported only inside these functions.  Figures are drawn on an Agg canvas
directly (no pyplot), so calling them never changes the user's matplotlib backend or opens a
window.
"""
import math
import os

import numpy as np

__all__ = ["plot_bound_history", "plot_samples", "plot_missing_curve"]


def _figure(figsize):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "mfengine.plot needs matplotlib; install it with 'pip install mfengine[demo]' "
            "(or 'pip install matplotlib')."
        ) from exc
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path, dpi=120):
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def _as_series(histories, labels):
    """Turn a dict, a 2-D array or a list of 1-D arrays into [(label, 1-D array)]."""
    if isinstance(histories, dict):
        items = [(str(k), np.asarray(v, dtype=float)) for k, v in histories.items()]
    else:
        arr = histories
        if isinstance(arr, np.ndarray) and arr.ndim == 1:
            arr = [arr]
        items = [(None, np.asarray(v, dtype=float)) for v in arr]
        if labels is not None:
            labels = list(labels)
            if len(labels) != len(items):
                raise ValueError(f"got {len(labels)} labels for {len(items)} histories")
            items = [(str(lab), v) for lab, (_, v) in zip(labels, items)]
        else:
            items = [(str(i), v) for i, (_, v) in enumerate(items)]
    for name, v in items:
        if v.ndim != 1 or v.size == 0:
            raise ValueError(f"history {name!r} must be a non-empty 1-D sequence, got shape {v.shape}")
    if not items:
        raise ValueError("histories is empty")
    return items


def plot_bound_history(histories, path, labels=None, n_visible=None, title=None):
    """Mean bound per training pattern against epoch (the paper's Fig. 2).

    Parameters
    ----------
    histories : dict, ndarray of shape (n_curves, n_epochs) or list of sequences
        Mean bound per pattern (nats) after each epoch, e.g. ``GenerativeClassifier.history_``;
        a dict maps a curve's label to its sequence.
    path : str or path-like
        Output image file (PNG by extension); parent directories are created.
    labels : sequence of str, optional
        Curve labels when ``histories`` is not a dict.
    n_visible : int, optional
        When given, the bound is divided by ``n_visible * ln 2`` as in the paper (bits per
        pixel); otherwise it is plotted in nats per pattern.
    title : str, optional
        Figure title (default: "Mean-field bound during training").

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ValueError
        If a history is empty or not 1-D, the labels do not match, or ``n_visible`` is not a
        positive integer.
    ImportError
        If matplotlib is not installed.

    See Also
    --------
    plot_samples : The paper's Fig. 3.
    plot_missing_curve : The paper's Fig. 4.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from mfengine.plot import plot_bound_history
    >>> path = os.path.join(tempfile.mkdtemp(), "bound.png")
    >>> plot_bound_history({"0": [-30.0, -25.0, -24.0]}, path) == path
    True
    """
    items = _as_series(histories, labels)
    if n_visible is not None and (not isinstance(n_visible, (int, np.integer)) or n_visible < 1):
        raise ValueError(f"n_visible must be a positive integer, got {n_visible!r}")
    scale = 1.0 if n_visible is None else 1.0 / (n_visible * math.log(2.0))
    fig = _figure((6.0, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    for name, v in items:
        ax.plot(np.arange(1, v.size + 1), v * scale, marker="o", markersize=3, label=name)
    ax.set_xlabel("epoch")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if n_visible is None:
        ax.set_ylabel("mean bound on ln P(v) per pattern [nats]")
    else:
        ax.set_ylabel(f"mean bound / ({n_visible} ln 2)  [bits per pixel]")
    ax.set_title(title or "Mean-field bound during training")
    ax.grid(True, alpha=0.3)
    if len(items) > 1:
        ax.legend(title="class", fontsize="small", ncol=2)
    return _save(fig, path)


def plot_samples(nets, path, n_per_class=8, labels=None, image_shape=(8, 8), random_state=0,
                 title=None):
    """A grid of images sampled from each net (the paper's Fig. 3): one row per net.

    Parameters
    ----------
    nets : sequence of SigmoidBeliefNet
        The models to sample from: anything with ``sample(n, random_state=...)`` that
        returns an (n, n_pixels) array, e.g. ``GenerativeClassifier.nets_``.
    path : str or path-like
        Output image file.
    n_per_class : int, default=8
        Samples drawn from each net.
    labels : sequence, optional
        Row labels (e.g. ``GenerativeClassifier.classes_``).
    image_shape : tuple of int, default=(8, 8)
        Height and width to reshape each visible vector into.
    random_state : int, optional
        Seed for sampling (each net gets its own stream derived from it).
    title : str, optional
        Figure title (default: "Samples from each class's generative model").

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ValueError
        If ``nets`` is empty, ``n_per_class`` is not a positive integer, the labels do not
        match, or the samples do not have ``image_shape`` pixels.
    ImportError
        If matplotlib is not installed.

    See Also
    --------
    plot_bound_history : The paper's Fig. 2.

    Examples
    --------
    >>> import tempfile, os
    >>> from mfengine import BernoulliMixture
    >>> from mfengine.plot import plot_samples
    >>> net = BernoulliMixture(n_components=1).fit([[0, 1, 1, 0], [1, 0, 0, 1]])
    >>> path = os.path.join(tempfile.mkdtemp(), "samples.png")
    >>> plot_samples([net], path, n_per_class=3, image_shape=(2, 2)) == path
    True
    """
    nets = list(nets)
    if not nets:
        raise ValueError("nets is empty")
    if not isinstance(n_per_class, (int, np.integer)) or n_per_class < 1:
        raise ValueError(f"n_per_class must be a positive integer, got {n_per_class!r}")
    h, w = (int(s) for s in image_shape)
    if labels is not None:
        labels = list(labels)
        if len(labels) != len(nets):
            raise ValueError(f"got {len(labels)} labels for {len(nets)} nets")
    seeds = np.random.SeedSequence(random_state).spawn(len(nets))
    rows = []
    for net, seed in zip(nets, seeds):
        S = np.asarray(net.sample(n_per_class, random_state=np.random.default_rng(seed)))
        if S.shape[1] != h * w:
            raise ValueError(f"samples have {S.shape[1]} pixels; image_shape {image_shape} needs {h * w}")
        rows.append(S.reshape(n_per_class, h, w))
    # One montage image (a 1-pixel grey gutter between samples) drawn with a single imshow:
    # far faster than one subplot per sample.
    gap = 1
    R, C = len(rows), n_per_class
    montage = np.full((R * (h + gap) - gap, C * (w + gap) - gap), 0.35)
    for r, imgs in enumerate(rows):
        for c in range(C):
            montage[r * (h + gap): r * (h + gap) + h, c * (w + gap): c * (w + gap) + w] = imgs[c]
    fig = _figure((0.55 * C + 1.0, 0.55 * R + 0.9))
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(montage, cmap="gray_r", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks([])
    if labels is not None:
        ax.set_yticks([r * (h + gap) + (h - 1) / 2.0 for r in range(R)])
        ax.set_yticklabels([str(lab) for lab in labels])
        ax.tick_params(axis="y", length=0)
    else:
        ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.suptitle(title or "Samples from each class's generative model")
    return _save(fig, path)


def plot_missing_curve(fractions, errors_by_method, path, title=None):
    """Test error against the fraction of missing pixels (the paper's Fig. 4).

    Parameters
    ----------
    fractions : sequence of float
        Fractions of pixels marked missing (x axis).
    errors_by_method : dict
        Maps a method's name to its error rates as fractions in [0, 1], one per entry of ``fractions``; plotted in percent.
    path : str or path-like
        Output image file.
    title : str, optional
        Figure title (default: "Classification error with missing pixels").

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ValueError
        If ``fractions`` is empty or an error sequence does not match it.
    ImportError
        If matplotlib is not installed.

    See Also
    --------
    plot_bound_history : The paper's Fig. 2.

    Examples
    --------
    >>> import tempfile, os
    >>> from mfengine.plot import plot_missing_curve
    >>> path = os.path.join(tempfile.mkdtemp(), "missing.png")
    >>> plot_missing_curve([0.0, 0.5], {"mean field": [0.05, 0.12]}, path) == path
    True
    """
    f = np.asarray(fractions, dtype=float)
    if f.ndim != 1 or f.size == 0:
        raise ValueError(f"fractions must be a non-empty 1-D sequence, got shape {f.shape}")
    if not isinstance(errors_by_method, dict) or not errors_by_method:
        raise ValueError("errors_by_method must be a non-empty dict {method: errors}")
    fig = _figure((6.0, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    styles = ["-", "--", "-.", ":"]
    for i, (name, err) in enumerate(errors_by_method.items()):
        err = np.asarray(err, dtype=float)
        if err.shape != f.shape:
            raise ValueError(f"errors for {name!r} have shape {err.shape}; fractions have {f.shape}")
        ax.plot(f, 100.0 * err, styles[i % len(styles)], marker="o", markersize=4, label=str(name))
    ax.set_xlabel("fraction of missing pixels")
    ax.set_ylabel("test error [%]")
    ax.set_ylim(bottom=0.0)
    ax.set_title(title or "Classification error with missing pixels")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, path)
