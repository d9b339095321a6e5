"""Progress bars: tqdm when it is installed, otherwise a silent stand-in."""

__all__ = ["progress_bar"]


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


def progress_bar(total=None, desc=None, disable=False, **kwargs):
    """A tqdm bar, or a do-nothing object when ``disable`` is set or tqdm is missing."""
    if disable:
        return _Silent()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Silent()
    kwargs.setdefault("delay", 2.0)  # short runs print nothing
    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, **kwargs)
