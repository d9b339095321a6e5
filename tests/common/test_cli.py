"""The ``mfengine`` command: ``demo --quick``, ``config`` and ``diagnose``."""
import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mfengine
from mfengine._progress import progress_bar, progress_delay

# Run from outside the source tree so that the installed package is what gets imported.  Bars
# are shown at once (no 2 s delay), so a run that should print none would show one if it did.
_ENV = dict(os.environ, MPLBACKEND="Agg", MFENGINE_PROGRESS_DELAY="0")

# A tqdm bar in any of its forms ("fit:  40%|####      | 4/10 [00:01<00:01, 3.1it/s]", or
# "fit: 4pattern [00:01, 3.1pattern/s]" without a total) carries its elapsed-time bracket.
_BAR = re.compile(r"\[\d\d:\d\d")


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "mfengine", *args], cwd=cwd, env=_ENV,
                          capture_output=True, text=True, timeout=300)


# slow: the whole demo (training and figures); the other commands are checked by default
@pytest.mark.slow
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
    # --no-progress hides every bar, even with bars shown at once
    assert not _BAR.search(r.stderr), r.stderr
    assert not _BAR.search(text)


def test_bar_pattern_matches_tqdm():
    pytest.importorskip("tqdm")
    for total, unit in ((10, "it"), (None, "pattern")):
        buf = io.StringIO()
        with progress_bar(total=total, desc="fit", file=buf, delay=0, unit=unit) as bar:
            bar.update(3)
        assert _BAR.search(buf.getvalue()), buf.getvalue()


def test_bar_appears_only_after_the_delay(monkeypatch):
    pytest.importorskip("tqdm")

    def shown(**kwargs):
        buf = io.StringIO()
        with progress_bar(total=5, desc="fit", file=buf, **kwargs) as bar:
            bar.update(5)
        return bool(_BAR.search(buf.getvalue()))

    monkeypatch.delenv("MFENGINE_PROGRESS_DELAY", raising=False)
    assert progress_delay() == 2.0
    assert not shown()  # a run shorter than 2 s prints nothing
    monkeypatch.setenv("MFENGINE_PROGRESS_DELAY", "0")
    assert progress_delay() == 0.0
    assert shown()
    assert not shown(disable=True)
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("MFENGINE_PROGRESS_DELAY", bad)
        with pytest.raises(ValueError, match="MFENGINE_PROGRESS_DELAY"):
            progress_delay()


@pytest.mark.parametrize("progress", [True, False])
def test_fit_shows_a_bar_only_when_asked(monkeypatch, capsys, progress):
    pytest.importorskip("tqdm")
    monkeypatch.setenv("MFENGINE_PROGRESS_DELAY", "0")
    X = (np.random.default_rng(0).random((40, 16)) < 0.5).astype(np.float64)
    net = mfengine.SigmoidBeliefNet([2, 6, 16], max_iter=1, progress=progress, random_state=0)
    net.fit(X)
    err = capsys.readouterr().err
    assert bool(_BAR.search(err)) == progress, err


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


# ---------------------------------------------------------------- mfengine diagnose
def _exact_disease_posterior(result, n_diseases):
    """Disease marginals and ln P(findings) by enumerating every disease configuration."""
    bits = ((np.arange(2 ** n_diseases)[:, None] >> np.arange(n_diseases)) & 1).astype(np.float64)
    S = np.hstack([bits, np.tile(result["findings"], (bits.shape[0], 1))])
    lj = result["net"].log_joint(S)
    w = np.exp(lj - lj.max())
    return (w / w.sum()) @ bits, lj.max() + np.log(w.sum())


@pytest.mark.parametrize("observe, seed", [(1.0, 0), (0.5, 0), (0.5, 2)])
def test_diagnose_posterior_matches_enumeration(observe, seed):
    from mfengine.cli import run_diagnose

    lines = []
    r = run_diagnose(12, 150, 3, present=2, observe=observe, seed=seed, top=4, out=lines.append)
    exact, log_p = _exact_disease_posterior(r, 12)
    post = r["posterior"]
    assert post.shape == (12,) and np.all((post >= 0) & (post <= 1))
    # on these cases the factorised posterior is close to the exact one (elsewhere mean field
    # can miss a mode: examples/diagnosis_workload.py measures how often)
    assert np.abs(post - exact).max() < 0.02, (post, exact)
    assert exact[r["ranking"][0]] >= exact.max() - 0.01
    assert np.all(exact[r["present"]] > 0.9)
    assert r["bound"] <= log_p + 1e-9                 # sjj is a strict lower bound
    assert r["bound"] > log_p - 5.0
    # the printed ranking: the header, then `top` rows, the present diseases marked
    rows = [ln for ln in lines if ln.strip()[:1].isdigit()]
    assert len(rows) == 4
    assert [int(ln.split()[1]) for ln in rows] == list(r["ranking"][:4])
    for ln in rows:
        assert ("* present" in ln) == (int(ln.split()[1]) in r["present"])


def test_diagnose_command(capsys):
    from mfengine.cli import main

    assert main(["diagnose", "--diseases", "30", "--findings", "200", "--parents", "3",
                 "--present", "1", "--top", "3", "--seed", "4"]) == 0
    text = capsys.readouterr().out
    for needle in ("30 diseases, 200 findings", "1 present disease", "mean field (sjj)",
                   "ms", "posterior", "* present"):
        assert needle in text, (needle, text)
    assert main(["diagnose", "--diseases", "30", "--findings", "200", "--observe", "1.5"]) == 2
    assert "observe" in capsys.readouterr().err
    assert main(["diagnose", "--diseases", "30", "--findings", "200", "--present", "31"]) == 2
    assert "present" in capsys.readouterr().err
