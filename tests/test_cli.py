"""The ``mfengine`` command: ``demo --quick`` and ``config``."""
import os
import subprocess
import sys

import pytest

import mfengine

# Run from outside the source tree so that the installed package is what gets imported.
_ENV = dict(os.environ, MPLBACKEND="Agg")


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "mfengine", *args], cwd=cwd, env=_ENV,
                          capture_output=True, text=True, timeout=300)


def test_demo_quick(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    out = tmp_path / "figs"
    r = _run(["demo", "--quick", "--out", str(out), "--no-progress"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    for needle in ("Test error", "mean-field SBN", "kNN, k=1", "kNN, k=5", "Bernoulli mixture",
                   "paper", "missing at random", "Total time"):
        assert needle in text, (needle, text)
    names = ("bound_per_epoch.png", "samples.png", "missing_pixels.png")
    for name in names:
        p = out / name
        assert p.is_file() and p.stat().st_size > 1000
        with open(p, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
        assert str(p) in text
    # the missing-pixel table has one row per fraction
    for f in ("0.0", "0.1", "0.2", "0.3", "0.4", "0.5"):
        assert any(line.strip().startswith(f) for line in text.splitlines()), f
    assert "it/s" not in r.stderr  # --no-progress hides the bar


def test_config_prints_openmp(tmp_path):
    r = _run(["config"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "openmp" in r.stdout
    assert mfengine.__version__ in r.stdout


def test_no_command_prints_help(capsys):
    from mfengine.cli import main

    assert main([]) == 1
    assert "demo" in capsys.readouterr().out


def test_bad_option_exits_with_usage(capsys):
    from mfengine.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["demo", "--seed", "notanint"])
    assert exc.value.code == 2


def test_plot_functions_write_files(tmp_path):
    pytest.importorskip("matplotlib")
    import numpy as np

    from mfengine.plot import plot_bound_history, plot_missing_curve, plot_samples

    net = mfengine.SigmoidBeliefNet([2, 4, 16], random_state=0)
    p1 = plot_bound_history(np.array([[-10.0, -9.0, -8.5], [-11.0, -9.5, -9.0]]),
                            tmp_path / "a" / "h.png", labels=["x", "y"], n_visible=16)
    p2 = plot_samples([net, net], tmp_path / "s.png", n_per_class=3, image_shape=(4, 4),
                      labels=["x", "y"])
    p3 = plot_missing_curve([0.0, 0.5], {"m": [0.1, 0.2], "n": [0.15, 0.3]}, tmp_path / "m.png")
    for p in (p1, p2, p3):
        assert os.path.getsize(p) > 1000
    with pytest.raises(ValueError, match="shape"):
        plot_missing_curve([0.0, 0.5], {"m": [0.1]}, tmp_path / "bad.png")
    with pytest.raises(ValueError, match="image_shape"):
        plot_samples([net], tmp_path / "bad.png", image_shape=(3, 3))
