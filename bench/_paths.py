"""bench/ and its folders on ``sys.path``.

The scripts live in folders by purpose (see README.md) and share modules across them: the
helpers here at bench/ (``_common``, ``dag_cases``), the peers (``peers/``), and scripts whose
functions other scripts reuse (``speed/hmm_speed``, ``speed/dag_compare``,
``studies/hmm_starts``, ``accuracy/plefka_tables``).  A script in a folder puts bench/ first
on ``sys.path`` and imports this module, which puts every folder there too, so that each
module imports the others by name (module names are unique across the folders)::

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import _paths  # noqa: E402,F401
"""
import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
FOLDERS = ("peers", "speed", "accuracy", "studies", "tools")

for _path in [BENCH] + [os.path.join(BENCH, f) for f in FOLDERS]:
    if _path not in sys.path:
        sys.path.insert(0, _path)
