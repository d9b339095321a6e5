"""Small image data sets for the demo, the experiments and the tests.

The paper (Saul & Jordan, section 3) used 10x10 binary NIST digits, 6000 training images per
class.  Those are not redistributable, so mfengine uses scikit-learn's bundled 8x8 digits
(1797 images, grey levels 0-16, no download) thresholded to binary.  It has about 125 training
images per class: a far smaller problem than the paper's.
"""
import gzip
import numbers
import os
import zlib

import numpy as np

from mfengine._validation import (BOOLEAN, MAX_UNITS, RANDOM_STATE, Interval, Range, allocating,
                                  check_random_state, validate_args)

__all__ = [
    "load_binary_digits",
    "load_fashion_mnist",
    "FASHION_MNIST_DIR",
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

#: Where Debian's ``dataset-fashion-mnist`` package puts the Fashion-MNIST IDX files.
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


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
        Seed of the draw.  NumPy 1.x and 2.x give different nets for one seed (the
        same parent sets, the weights on other edges: ``np.argpartition``'s order).

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


# The IDX header: two zero bytes, a type code (0x08: unsigned byte) and the number of
# dimensions, then one big-endian uint32 per dimension.
_IDX_UBYTE = 0x08
_FASHION_STEMS = {
    "train_images": ("train-images-idx3-ubyte", 3),
    "train_labels": ("train-labels-idx1-ubyte", 1),
    "test_images": ("t10k-images-idx3-ubyte", 3),
    "test_labels": ("t10k-labels-idx1-ubyte", 1),
}


def _find_idx(directory, stem):
    """The path of ``stem`` in ``directory``, gzipped (``.gz``) or plain, or None."""
    for name in (stem + ".gz", stem):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return None


def _read_idx(path, ndim):
    """An unsigned-byte IDX array of ``ndim`` dimensions from ``path`` (gzip told by content)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise ValueError(f"{path}: not a readable gzip file ({exc})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (its first bytes {raw[:4].hex()!r} are not "
                         f"the IDX magic number 0000{_IDX_UBYTE:02x}{ndim:02x})")
    if raw[2] != _IDX_UBYTE or raw[3] != ndim:
        raise ValueError(f"{path}: expected an unsigned-byte IDX file of {ndim} dimension(s) "
                         f"(magic 0000{_IDX_UBYTE:02x}{ndim:02x}), got magic {raw[:4].hex()}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes, {header} needed)")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    need = int(np.prod(shape, dtype=np.int64))
    have = len(raw) - header
    if have != need:
        what = "truncated" if have < need else "longer than its header says"
        raise ValueError(f"{path}: IDX file {what}: shape {shape} needs {need} data bytes, "
                         f"the file has {have}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


@validate_args(threshold=[Interval(numbers.Real, 0, 255, closed="left")],
               return_labels=[BOOLEAN])
def load_fashion_mnist(path=None, threshold=127, return_labels=False):
    """Load Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) from its IDX files, binarised to {0, 1}.

    The four files ``train-images-idx3-ubyte``, ``t10k-images-idx3-ubyte`` (and, with
    ``return_labels``, ``train-labels-idx1-ubyte``, ``t10k-labels-idx1-ubyte``) are read from
    ``path``, each gzipped (``.gz``) or plain; gzip is recognised by the file's content.
    Nothing is downloaded: on Debian, ``apt-get install dataset-fashion-mnist`` installs the
    files in `FASHION_MNIST_DIR`.  A pixel (grey level 0-255) becomes 1 when it is
    ``> threshold``: a fixed binarisation, not a random one.

    Parameters
    ----------
    path : str or path-like, optional
        The folder holding the files.  Default: `FASHION_MNIST_DIR`
        (``/usr/share/datasets/fashion-mnist``).
    threshold : int or float, default=127
        A pixel becomes 1 when its grey level is greater than this; in [0, 255).
    return_labels : bool, default=False
        Also return the class labels (0-9).

    Returns
    -------
    X_train : ndarray of shape (60000, 784)
        Binary training images (float64 0/1), each row a 28x28 image in row-major order;
        for IDX files of other sizes, of shape (n_train, rows * cols).
    X_test : ndarray of shape (10000, 784)
        Binary test images.
    y_train : ndarray of shape (60000,)
        With ``return_labels`` only: labels 0-9 (int64) of the training images.
    y_test : ndarray of shape (10000,)
        With ``return_labels`` only: labels of the test images.

    Raises
    ------
    FileNotFoundError
        If a file is missing from ``path`` (the message names the folder and the package
        that installs the files).
    ValueError
        If a file is not an unsigned-byte IDX file of the right rank (wrong magic number),
        is truncated or too long, is a broken gzip file, or if the images and labels of a
        split differ in number; or if ``threshold`` is out of range.

    See Also
    --------
    load_binary_digits : Small 8x8 binary digits that need no files.

    Examples
    --------
    The files are not shipped with mfengine, so this example is not run as a test:

    >>> from mfengine.datasets import load_fashion_mnist
    >>> X_train, X_test = load_fashion_mnist()  # doctest: +SKIP
    >>> X_train.shape, X_test.shape  # doctest: +SKIP
    ((60000, 784), (10000, 784))
    >>> X_train, X_test, y_train, y_test = load_fashion_mnist(return_labels=True)  # doctest: +SKIP
    """
    directory = os.fspath(FASHION_MNIST_DIR if path is None else path)
    wanted = ["train_images", "test_images"]
    if return_labels:
        wanted += ["train_labels", "test_labels"]
    found = {key: _find_idx(directory, _FASHION_STEMS[key][0]) for key in wanted}
    missing = [_FASHION_STEMS[k][0] for k, v in found.items() if v is None]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST not found in {directory!r}: no {', '.join(missing)} (.gz or plain). "
            f"On Debian, 'apt-get install dataset-fashion-mnist' installs the files in "
            f"{FASHION_MNIST_DIR}; or pass path= the folder that holds them.")
    arrays = {key: _read_idx(found[key], _FASHION_STEMS[key][1]) for key in wanted}
    out = []
    for split in ("train", "test"):
        img = arrays[split + "_images"]
        X = (img.reshape(img.shape[0], -1) > threshold).astype(np.float64)
        out.append(X)
    if return_labels:
        for split in ("train", "test"):
            n_img = arrays[split + "_images"].shape[0]
            y = arrays[split + "_labels"]
            if y.shape[0] != n_img:
                raise ValueError(f"{found[split + '_labels']}: {y.shape[0]} labels for the "
                                 f"{n_img} images of {found[split + '_images']}")
            out.append(y.astype(np.int64))
    return tuple(out)
