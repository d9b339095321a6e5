"""The README's examples run as written, and the numbers its comments quote are what they
compute."""
import pathlib
import re
import warnings

import numpy as np

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_readme_examples_run_and_quote_their_own_numbers():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 3
    ns = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # progress bars' and convergence chatter only
        for i, code in enumerate(blocks):
            exec(compile(code, f"README.md block {i + 1}", "exec"), ns)
    # the diagnosis example: exact posteriors and ln P, then the certified bound below it
    n_d, e, r = ns["n_d"], ns["e"], ns["r"]
    np.testing.assert_array_equal(np.round(e.mu[0, :n_d], 3), [0.204, 0.004, 0.736])
    np.testing.assert_array_equal(np.round(r.mu[0, :n_d], 3), [0.621, 0.004, 0.185])
    assert round(float(r.bound[0]), 2) == -8.08 and round(float(e.bound[0]), 2) == -6.95
    exact = ns["dx"].exact_log_likelihood(ns["case"], missing=np.isnan(ns["case"]))
    np.testing.assert_allclose(e.bound, exact, rtol=1e-12)
    assert r.bound[0] <= exact[0]
