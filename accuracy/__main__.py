"""``python -m accuracy merge|diff``: the run bookkeeping's commands, kept at their first address
(``python -m runs``). ``python -m accuracy mutate KERNEL``: mutation testing of a kernel
(``cases.mutation``), run by its module's name: the command lives two layers above this package,
and an import of it here would run up the layers."""
import runpy
import sys

from runs.__main__ import main

MUTATE = "cases.mutation"

if __name__ == "__main__":
    if sys.argv[1:2] == ["mutate"]:
        sys.argv = ["python -m accuracy mutate", *sys.argv[2:]]
        runpy.run_module(MUTATE, run_name="__main__", alter_sys=True)
    sys.exit(main())
