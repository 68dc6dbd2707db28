"""``python -m accuracy merge|diff``: the run bookkeeping's commands, kept at their first address
(``python -m runs``)."""
import sys

from runs.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
