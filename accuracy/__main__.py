"""``python -m accuracy merge|diff``: the run bookkeeping's commands, kept at their first address
(``python -m runs``). ``python -m accuracy mutate KERNEL``: mutation testing of a kernel
(``cases.mutation``) and ``python -m accuracy shrink RESULTS CELL``: a failing cell shrunk to its
smallest failing case (``cases.shrink``), each looked up by its module's name when asked for: the
commands live two layers above this package, and an import statement of them here would run up
the layers."""
import importlib
import sys

from runs.__main__ import main as runs_main

MUTATE = "cases.mutation.__main__"
SHRINK = "cases.shrink.__main__"
COMMANDS = {"mutate": MUTATE, "shrink": SHRINK}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in COMMANDS:
        return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])
    return runs_main(argv)


if __name__ == "__main__":
    sys.exit(main())
