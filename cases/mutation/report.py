"""A mutation score as markdown (stdout) and JSON (``--json``): the same content."""
from __future__ import annotations

import json
import math
from pathlib import Path

from cases.mutation.score import MutationScore


def _number(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def markdown(result: MutationScore) -> str:
    c = result.counts
    lines = [f"# Mutation score of `{result.kernel}` ({result.operator})", "",
             f"{len(result.mutants)} mutants over {len(result.cases)} cases; {result.seconds:.0f} s "
             f"({result.seconds / max(len(result.mutants), 1):.2f} s a mutant)", ""]
    if result.baseline_failures:
        lines += ["The unmutated kernel fails its baseline; a mutant is killed only by what it passed:", "",
                  "| case | unmutated kernel |", "|---|---|"]
        lines += [f"| {case} | {why} |" for case, why in result.baseline_failures.items()]
        lines.append("")
    lines += ["| killed by the contract | killed by the gate | equivalent | survived | score |",
              "|---|---|---|---|---|",
              f"| {c['contract']} | {c['gate']} | {c['equivalent']} | {c['survived']} | {100 * result.score:.1f}% |",
              "", f"Largest error of the unmutated kernel against FP64: {_number(result.baseline_fp64_ulp_max)} BF16 ULP.",
              "", "Kills per case (the first case to kill each mutant; cases smallest first):", "",
              "| case | killed |", "|---|---|"]
    lines += [f"| {case} | {n} |" for case, n in result.kills_per_case.items()]
    lines += ["", "Killed:", "", "| # | line | edit | by | cheapest case | detail |", "|---|---|---|---|---|---|"]
    lines += [f"| {m.index} | {m.line} | {m.edit} | {m.verdict} | {m.killed_at} | {m.detail.partition(': ')[2][:120]} |"
              for m in result.mutants if m.verdict in ("contract", "gate")]
    lines += ["", "Equivalent:", "", "| # | line | edit | why |", "|---|---|---|---|"]
    lines += [f"| {m.index} | {m.line} | {m.edit} | {m.detail} |" for m in result.mutants if m.verdict == "equivalent"]
    lines += ["", "Survivors:", "", "| # | line | edit | largest error vs FP64 (BF16 ULP) | detail |",
              "|---|---|---|---|---|"]
    lines += [f"| {m.index} | {m.line} | {m.edit} | {_number(m.fp64_ulp_max)} | {m.detail} |"
              for m in result.mutants if m.verdict == "survived"]
    return "\n".join(lines)


def _finite(value):
    """JSON has no inf or NaN: they are written as the strings Python prints."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_json(result: MutationScore, path: str | Path) -> None:
    Path(path).write_text(json.dumps(_finite(result.as_json()), indent=1))
