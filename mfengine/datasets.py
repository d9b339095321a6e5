"""Small image data sets for the demo, the experiments and the tests.

The paper (Saul & Jordan, section 3) used 10x10 binary NIST digits, 6000 training images per
class.  Those are not redistributable, so mfengine uses scikit-learn's bundled 8x8 digits
(1797 images, grey levels 0-16, no download) thresholded to binary.  It has about 125 training
images per class: a far smaller problem than the paper's.
"""
import numbers

import numpy as np

from mfengine._validation import (BOOLEAN, MAX_UNITS, RANDOM_STATE, Interval, Range, allocating,
                                  check_random_state, validate_args)

__all__ = [
    "load_binary_digits",
    "make_bars",
    "DIGITS_SHAPE",
    "make_continuous_bars",
    "make_stereo",
    "make_diagnosis_net",
]

#: Height and width of one image from ``load_binary_digits``.
DIGITS_SHAPE = (8, 8)

#: How many images a generator may be asked for.
_COUNT = Interval(numbers.Integral, 0, 2**40)


def _require_sklearn():
    try:
        import sklearn  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "mfengine.datasets needs scikit-learn for its bundled digit images; install it with "
            "'pip install mfengine[demo]' (or 'pip install scikit-learn')."
        ) from exc


@validate_args(threshold=[Interval(numbers.Real, 0, 16, closed="right")],
               test_size=[Interval(numbers.Real, 0, 1, closed="neither")],
               random_state=[None, Interval(numbers.Integral, 0, 2**32 - 1)])
def load_binary_digits(threshold=8, test_size=0.3, random_state=0):
    """Load scikit-learn's 8x8 handwritten digits, thresholded to {0, 1}, with a fixed split.

    Parameters
    ----------
    threshold : int, default=8
        A pixel (grey level 0-16) becomes 1 when it is ``>= threshold``.
    test_size : float, default=0.3
        Fraction of the 1797 images held out for testing; the split is stratified by digit.
    random_state : int, default=0
        Seed of the split (the same seed always gives the same split).

    Returns
    -------
    X_train : ndarray of shape (n_train, 64)
        Binary training images (float64 0/1), row-major 8x8.
    X_test : ndarray of shape (n_test, 64)
        Binary test images.
    y_train : ndarray of shape (n_train,)
        Digit labels 0-9 (int64) of the training images.
    y_test : ndarray of shape (n_test,)
        Digit labels of the test images.

    Raises
    ------
    ValueError
        If ``threshold`` or ``test_size`` is out of range.
    ImportError
        If scikit-learn is not installed.

    See Also
    --------
    make_bars : A synthetic binary data set.

    Examples
    --------
    >>> from mfengine.datasets import load_binary_digits
    >>> X_train, X_test, y_train, y_test = load_binary_digits()
    >>> X_train.shape, X_test.shape
    ((1257, 64), (540, 64))
    """
    _require_sklearn()
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X = (digits.data >= threshold).astype(np.float64)
    y = digits.target.astype(np.int64)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=test_size, stratify=y, random_state=random_state
    )
    return (
        np.ascontiguousarray(X_train),
        np.ascontiguousarray(X_test),
        np.ascontiguousarray(y_train),
        np.ascontiguousarray(y_test),
    )


@validate_args(n=[_COUNT], size=[Interval(numbers.Integral, 1, 2**15)],
               p_bar=[Interval(numbers.Real, 0, 1)], random_state=[RANDOM_STATE])
def make_bars(n, size=4, p_bar=0.5, random_state=None):
    """Draw binary bars (Bhattacharyya & Keerthi, section 6).

    ``size`` x ``size`` images whose bars are all vertical or all horizontal with probability
    1/2 each, every bar on independently with probability ``p_bar``.

    Parameters
    ----------
    n : int
        Number of images.
    size : int, default=4
        Height and width of an image.
    p_bar : float, default=0.5
        Probability that a bar is on.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the draw.

    Returns
    -------
    ndarray of shape (n, size * size)
        Row-major images, float64 0/1.

    Raises
    ------
    ValueError
        If an argument is out of range.

    See Also
    --------
    make_continuous_bars : The continuous version.

    Examples
    --------
    >>> from mfengine.datasets import make_bars
    >>> make_bars(2, size=3, random_state=0).shape
    (2, 9)
    """
    rng = check_random_state(random_state)
    with allocating(f"n={n}, size={size}"):
        on = rng.random((n, size)) < p_bar
        vertical = rng.random(n) < 0.5
        img = np.where(vertical[:, None, None], on[:, None, :], on[:, :, None])
        img = np.broadcast_to(img, (n, size, size))
        return np.ascontiguousarray(img.reshape(n, size * size), dtype=np.float64)


@validate_args(n=[_COUNT], noisy=[BOOLEAN], random_state=[RANDOM_STATE])
def make_continuous_bars(n, noisy=False, random_state=None):
    """Draw continuous bars (Frey & Hinton 1999, section 3.1; Hinton & Ghahramani 1997).

    Each 6x6 image has bars of one orientation, vertical or horizontal with probability 1/2;
    each of its six bars is on with probability 0.3, with an intensity drawn uniformly from
    [0, 5].  The noisy version adds unit-variance Gaussian noise to every pixel.

    Parameters
    ----------
    n : int
        Number of images.
    noisy : bool, default=False
        Add unit-variance Gaussian noise to every pixel.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the draw.

    Returns
    -------
    ndarray of shape (n, 36)
        Row-major images (float64).

    Raises
    ------
    ValueError
        If ``n`` is not a non-negative integer.

    See Also
    --------
    make_bars : The binary version.

    Examples
    --------
    >>> from mfengine.datasets import make_continuous_bars
    >>> make_continuous_bars(5, random_state=0).shape
    (5, 36)
    """
    rng = check_random_state(random_state)
    size = 6
    with allocating(f"n={n}"):
        vertical = rng.random(n) < 0.5
        on = rng.random((n, size)) < 0.3
        level = np.where(on, rng.uniform(0.0, 5.0, (n, size)), 0.0)
        img = np.where(vertical[:, None, None], level[:, None, :], level[:, :, None])
        img = np.broadcast_to(img, (n, size, size)).reshape(n, size * size).astype(np.float64)
        if noisy:
            img = img + rng.standard_normal(img.shape)
        return np.ascontiguousarray(img)


@validate_args(n=[_COUNT], noisy=[BOOLEAN], random_state=[RANDOM_STATE],
               n_dots=[Interval(numbers.Integral, 1, 2**20)],
               n_pixels=[Interval(numbers.Integral, 1, 2**20)],
               blur=[Interval(numbers.Real, 0, None, closed="neither")],
               shift=[Interval(numbers.Real, 0, None, closed="neither")])
def make_stereo(n, noisy=False, random_state=None, n_dots=4, n_pixels=12, blur=1.0, shift=1.0):
    """Draw continuous stereo pairs (Frey & Hinton 1999, sec. 3.2; after Becker & Hinton 1992).

    ``n_dots`` Gaussian dots (profile ``b exp(-(x - c)^2 / (2 blur^2))``) are placed with centres
    c uniform on [0, n_pixels] and brightness b uniform on [0, 5]; the second image is the first
    shifted left or right by ``shift`` with probability 1/2 each.  Each image has ``n_pixels``
    pixels of unit width, each holding the net activity (the integral of the profile) over its
    interval.  The noisy version adds unit-variance Gaussian noise to every pixel.  The paper
    does not give the blur width or the size of the shift; the defaults (one pixel each) are
    this library's choice.

    Parameters
    ----------
    n : int
        Number of image pairs.
    noisy : bool, default=False
        Add unit-variance Gaussian noise to every pixel.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the draw.
    n_dots : int, default=4
        Dots per image.
    n_pixels : int, default=12
        Pixels per image.
    blur : float, default=1.0
        Standard deviation of a dot, in pixels.
    shift : float, default=1.0
        The disparity, in pixels.

    Returns
    -------
    ndarray of shape (n, 2 * n_pixels)
        The left image in the first ``n_pixels`` columns, the right image in the rest
        (float64).

    Raises
    ------
    ValueError
        If an argument is out of range.

    See Also
    --------
    make_continuous_bars : The other data set of the paper.

    Examples
    --------
    >>> from mfengine.datasets import make_stereo
    >>> make_stereo(3, random_state=0).shape
    (3, 24)
    """
    from scipy.special import ndtr

    rng = check_random_state(random_state)
    with allocating(f"n={n}, n_dots={n_dots}"):
        centres = rng.uniform(0.0, n_pixels, (n, n_dots))
    bright = rng.uniform(0.0, 5.0, (n, n_dots))
    direction = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    edges = np.arange(n_pixels + 1, dtype=np.float64)
    scale = bright * blur * np.sqrt(2.0 * np.pi)

    def render(c):
        cdf = ndtr((edges[None, None, :] - c[:, :, None]) / blur)      # (n, dots, pixels + 1)
        return np.einsum("nd,ndp->np", scale, np.diff(cdf, axis=2))

    with allocating(f"n={n}, n_dots={n_dots}, n_pixels={n_pixels}"):
        img = np.concatenate([render(centres), render(centres + shift * direction[:, None])],
                             axis=1)
        if noisy:
            img = img + rng.standard_normal(img.shape)
        return np.ascontiguousarray(img, dtype=np.float64)


@validate_args(n_diseases=[Interval(numbers.Integral, 1, MAX_UNITS)],
               n_findings=[Interval(numbers.Integral, 1, MAX_UNITS)],
               parents_per_finding=[Interval(numbers.Integral, 1, MAX_UNITS)],
               prior=[Range(0, 1)], link=[Range(0, 1)], leak=[Range(0, np.inf)],
               random_state=[RANDOM_STATE])
def make_diagnosis_net(n_diseases=600, n_findings=4000, parents_per_finding=10, prior=(0.001, 0.02),
                       link=(0.05, 0.95), leak=(0.005, 0.01), random_state=None):
    """A diagnosis-style bipartite noisy-OR net, the shape of QMR-DT.

    Diseases (the first ``n_diseases`` units) are roots; each finding has
    ``parents_per_finding`` diseases drawn at random without repetition.  QMR-DT has about
    600 diseases and 4,000 findings.  The weights are stored sparse: nothing of size
    n_units**2 is allocated.

    Parameters
    ----------
    n_diseases, n_findings : int, default=600, 4000
        Numbers of hidden (disease) and visible (finding) units.
    parents_per_finding : int, default=10
        Diseases per finding (at most ``n_diseases``).
    prior : (float, float), default=(0.001, 0.02)
        Range of the diseases' prior probabilities, drawn uniformly.
    link : (float, float), default=(0.05, 0.95)
        Range of P(finding | one parent disease on, the leak aside), drawn uniformly per edge;
        the weight is ``-log(1 - link)``.
    leak : (float, float), default=(0.005, 0.01)
        Range of the findings' leak biases (P(finding | no disease) = 1 - exp(-leak)).
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the draw.

    Returns
    -------
    net : BeliefNet
        Noisy-OR, ``W`` a scipy.sparse CSR matrix, the findings visible.

    Examples
    --------
    >>> import mfengine as mf
    >>> net = mf.datasets.make_diagnosis_net(20, 50, 3, random_state=0)
    >>> net.n_hidden, net.n_visible, net.n_weights
    (20, 50, 150)
    """
    import scipy.sparse

    from mfengine.sbn import BeliefNet

    if parents_per_finding > n_diseases:
        raise ValueError(f"parents_per_finding={parents_per_finding} is more than the "
                         f"{n_diseases} diseases")
    rng = check_random_state(random_state)
    n = n_diseases + n_findings
    # each finding's parents: the first k of a random permutation, drawn in one sort
    with allocating(f"n_findings={n_findings}, n_diseases={n_diseases}"):
        keys = rng.random((n_findings, n_diseases))
    parents = np.argpartition(keys, parents_per_finding - 1, axis=1)[:, :parents_per_finding]
    rows = np.repeat(np.arange(n_diseases, n), parents_per_finding)
    w = -np.log1p(-rng.uniform(link[0], link[1], rows.size))
    W = scipy.sparse.csr_matrix((w, (rows, parents.ravel())), shape=(n, n))
    h = np.concatenate([-np.log1p(-rng.uniform(prior[0], prior[1], n_diseases)),
                        rng.uniform(leak[0], leak[1], n_findings)])
    visible = np.zeros(n, dtype=bool)
    visible[n_diseases:] = True
    return BeliefNet(W, h, visible, activation="noisy_or")
