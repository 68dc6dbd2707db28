"""Mutation testing of a kernel: single-point edits of its function, each judged by the real gate.

``mutator``: the edits; ``source``: the kernel's definition and the namespace its mutants compile
into; ``worker``: the child process that runs them case by case; ``judge``: the parent's clock
over it; ``score``: triage and the score; ``report``: markdown and JSON;
``python -m accuracy mutate KERNEL`` (``cases.mutation.__main__``): the command.
"""
