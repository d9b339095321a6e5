"""Progress bars: tqdm when it is installed, otherwise a silent stand-in.

A bar appears only once its run has lasted ``MFENGINE_PROGRESS_DELAY`` seconds (2 by default),
so short runs print nothing; setting the variable to 0 shows every bar at once (the tests use
that to check that a bar is, or is not, shown).
"""
import math
import os

__all__ = ["progress_bar"]

DEFAULT_DELAY = 2.0
DELAY_VARIABLE = "MFENGINE_PROGRESS_DELAY"


class _Silent:
    def __init__(self, *args, **kwargs):
        pass

    def update(self, n=1):
        pass

    def set_postfix(self, *args, **kwargs):
        pass

    def set_description(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress_delay():
    """Seconds a run lasts before its bar appears: ``MFENGINE_PROGRESS_DELAY``, else 2.

    Returns
    -------
    float
        The delay, a finite number of seconds >= 0.

    Raises
    ------
    ValueError
        If ``MFENGINE_PROGRESS_DELAY`` is set to something other than a finite number >= 0.
    """
    raw = os.environ.get(DELAY_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_DELAY
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{DELAY_VARIABLE} must be a number of seconds >= 0, got {raw!r}")
    return value


def progress_bar(total=None, desc=None, disable=False, **kwargs):
    """A tqdm bar, or a do-nothing object when ``disable`` is set or tqdm is missing.

    Parameters
    ----------
    total : int, optional
        Number of steps, when known.
    desc : str, optional
        Label printed before the bar.
    disable : bool, default=False
        Return the silent stand-in (for ``progress=False``).
    **kwargs
        Passed to ``tqdm``; ``delay`` defaults to :func:`progress_delay`.

    Returns
    -------
    object
        A context manager with ``update``, ``set_postfix``, ``set_description`` and ``close``.
    """
    if disable:
        return _Silent()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Silent()
    kwargs.setdefault("delay", progress_delay())  # short runs print nothing
    bar = tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, **kwargs)
    # tqdm's set_postfix redraws at once by default, which would show the bar before its delay
    set_postfix = bar.set_postfix
    bar.set_postfix = lambda *args, refresh=False, **kw: set_postfix(*args, refresh=refresh, **kw)
    return bar
