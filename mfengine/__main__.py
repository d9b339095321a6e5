"""``python -m mfengine``: the same as the ``mfengine`` console command."""
import sys

from mfengine.cli import main

if __name__ == "__main__":
    sys.exit(main())
