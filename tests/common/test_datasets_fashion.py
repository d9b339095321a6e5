"""mf.datasets.load_fashion_mnist on tiny IDX files written here (gzipped and plain), and its
errors for missing and malformed files; the real data are not needed."""
import gzip
import struct

import numpy as np
import pytest

from mfengine.datasets import FASHION_MNIST_DIR, load_fashion_mnist

STEMS = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def idx_bytes(arr, type_code=0x08):
    arr = np.asarray(arr, dtype=np.uint8)
    head = bytes([0, 0, type_code, arr.ndim]) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    return head + arr.tobytes()


def write(path, data, compress):
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def make_set(folder, compress, n_train=5, n_test=3, rows=4, cols=3, seed=0):
    rng = np.random.default_rng(seed)
    data = {
        "train_images": rng.integers(0, 256, (n_train, rows, cols)),
        "test_images": rng.integers(0, 256, (n_test, rows, cols)),
        "train_labels": rng.integers(0, 10, n_train),
        "test_labels": rng.integers(0, 10, n_test),
    }
    for key, arr in data.items():
        write(folder / STEMS[key], idx_bytes(arr), compress)
    return data


@pytest.mark.parametrize("compress", [True, False])
def test_round_trip(tmp_path, compress):
    data = make_set(tmp_path, compress)
    X_train, X_test = load_fashion_mnist(tmp_path)
    assert X_train.shape == (5, 12) and X_test.shape == (3, 12)
    assert X_train.dtype == np.float64
    np.testing.assert_array_equal(X_train, (data["train_images"].reshape(5, -1) > 127))
    np.testing.assert_array_equal(X_test, (data["test_images"].reshape(3, -1) > 127))
    out = load_fashion_mnist(str(tmp_path), threshold=10, return_labels=True)
    assert len(out) == 4
    np.testing.assert_array_equal(out[0], data["train_images"].reshape(5, -1) > 10)
    np.testing.assert_array_equal(out[2], data["train_labels"])
    np.testing.assert_array_equal(out[3], data["test_labels"])
    assert out[2].dtype == np.int64


def test_threshold_is_strict(tmp_path):
    img = np.array([[[126, 127], [128, 255]]])
    for key in ("train_images", "test_images"):
        write(tmp_path / STEMS[key], idx_bytes(img), compress=False)
    X, _ = load_fashion_mnist(tmp_path)
    np.testing.assert_array_equal(X, [[0.0, 0.0, 1.0, 1.0]])
    X, _ = load_fashion_mnist(tmp_path, threshold=0)
    np.testing.assert_array_equal(X, [[1.0, 1.0, 1.0, 1.0]])


def test_gz_preferred_and_gzip_told_by_content(tmp_path):
    """A plain file and a .gz side by side: the .gz is read; a gzipped file without the .gz
    suffix is still read as gzip."""
    data = make_set(tmp_path, compress=True)
    other = make_set(tmp_path, compress=False, seed=1)
    X_train, _ = load_fashion_mnist(tmp_path)
    np.testing.assert_array_equal(X_train, data["train_images"].reshape(5, -1) > 127)
    assert not np.array_equal(X_train, other["train_images"].reshape(5, -1) > 127)
    for p in tmp_path.glob("*.gz"):
        p.unlink()
    (tmp_path / STEMS["train_images"]).write_bytes(
        gzip.compress(idx_bytes(data["train_images"])))
    X_train, _ = load_fashion_mnist(tmp_path)
    np.testing.assert_array_equal(X_train, data["train_images"].reshape(5, -1) > 127)


def test_missing_files_name_folder_and_package(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_fashion_mnist(tmp_path)
    msg = str(err.value)
    assert str(tmp_path) in msg and "apt-get install dataset-fashion-mnist" in msg
    assert FASHION_MNIST_DIR in msg
    # images present, labels asked for but missing
    make_set(tmp_path, compress=False)
    (tmp_path / STEMS["test_labels"]).unlink()
    load_fashion_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        load_fashion_mnist(tmp_path, return_labels=True)


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("damage, match", [
    (lambda b: b"\x12\x34" + b[2:], "not an IDX file"),                 # wrong magic
    (lambda b: b[:2] + b"\x0d" + b[3:], "unsigned-byte"),                # float type code
    (lambda b: b[:3] + b"\x02" + b[4:], "3 dimension"),                  # wrong rank
    (lambda b: b[:-5], "truncated"),                                     # data cut short
    (lambda b: b[:10], "truncated IDX header"),                          # header cut short
    (lambda b: b + b"\x00", "longer than"),                              # trailing bytes
    (lambda b: b[:2], "not an IDX file"),                                # hardly anything
])
def test_malformed_image_file(tmp_path, compress, damage, match):
    make_set(tmp_path, compress)
    bad = damage(idx_bytes(np.zeros((5, 4, 3))))
    name = STEMS["train_images"]
    for p in tmp_path.glob(name + "*"):
        p.unlink()
    path = write(tmp_path / name, bad, compress)
    with pytest.raises(ValueError, match=match) as err:
        load_fashion_mnist(tmp_path)
    assert str(path) in str(err.value)


def test_broken_gzip(tmp_path):
    make_set(tmp_path, compress=True)
    path = tmp_path / (STEMS["test_images"] + ".gz")
    path.write_bytes(path.read_bytes()[:-12])        # cut inside the stream
    with pytest.raises(ValueError, match="gzip") as err:
        load_fashion_mnist(tmp_path)
    assert str(path) in str(err.value)


def test_label_count_mismatch(tmp_path):
    make_set(tmp_path, compress=False)
    write(tmp_path / STEMS["train_labels"], idx_bytes(np.zeros(4)), compress=False)
    load_fashion_mnist(tmp_path)
    with pytest.raises(ValueError, match="4 labels for the 5 images"):
        load_fashion_mnist(tmp_path, return_labels=True)


@pytest.mark.parametrize("threshold", [-1, 255, 300, True, "127", None])
def test_bad_threshold(tmp_path, threshold):
    make_set(tmp_path, compress=False)
    with pytest.raises(ValueError, match="threshold"):
        load_fashion_mnist(tmp_path, threshold=threshold)
