"""Run the Python code blocks of Markdown and reStructuredText pages, as a reader would.

    python docs/_ext/run_code_blocks.py README.md docs/user_guide/*.rst

Each page's blocks (```` ```python ```` fences in Markdown, ``.. code-block:: python`` in
reStructuredText) run in order in one namespace, in a scratch directory (so files a page
saves land there); the script stops at the first exception, naming the page. Progress bars
are turned off. ``docs/user_guide/large_data.rst`` needs the ``dask`` extra.
"""
import os
import re
import sys
import tempfile
import textwrap

os.environ.setdefault("MFENGINE_PROGRESS_DELAY", "1e9")
os.environ.setdefault("MPLBACKEND", "Agg")

MD = re.compile(r"```python\n(.*?)```", re.S)
RST = re.compile(r"\.\. code-block:: python\n\n((?:(?:   .*)?\n)+)")


def blocks(path):
    text = open(path, encoding="utf-8").read()
    if path.endswith(".md"):
        return MD.findall(text)
    return [textwrap.dedent(b) for b in RST.findall(text)]


def main(paths):
    pages = [(p, os.path.abspath(p)) for p in paths]
    os.chdir(tempfile.mkdtemp(prefix="code_blocks_"))
    for name, page in pages:
        found = blocks(page)
        namespace = {"__name__": "__main__"}
        for code in found:
            exec(compile(code, page, "exec"), namespace)
        print(f"{name}: {len(found)} code blocks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
