"""``python -m accuracy merge|diff``: the run bookkeeping's commands, kept at their first address
(``python -m runs``). ``python -m accuracy mutate KERNEL``: mutation testing of a kernel
(``cases.mutation``), looked up by its module's name when asked for: the command lives two layers
above this package, and an import statement of it here would run up the layers."""
import importlib
import sys

from runs.__main__ import main as runs_main

MUTATE = "cases.mutation.__main__"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["mutate"]:
        return importlib.import_module(MUTATE).main(argv[1:])
    return runs_main(argv)


if __name__ == "__main__":
    sys.exit(main())
