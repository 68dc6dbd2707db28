"""No tool writes over a run, a results file or a shard; bad inputs and outputs are one line, exit 2
(exit 4 for the pytest options), and every input file is byte-identical afterwards."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]


def _pytest(*args):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:randomly", "cases/", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    results = tmp_path_factory.mktemp("tools") / "results"
    proc = _pytest("--profile", "none", "--case", "2,96,200,unit", "--backend", "torch-eager",
                   "--results-dir", str(results))
    assert proc.returncode == 0, proc.stdout[-2000:]
    folder = next((results / "runs").iterdir())
    return results, folder


def _digests(root: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def _junk(tmp_path) -> dict[str, Path]:
    files = {"junk": tmp_path / "junk.json", "binary": tmp_path / "binary.json", "empty": tmp_path / "empty-dir"}
    files["junk"].write_text(json.dumps([{"a": 1}, 3, "x"]))
    files["binary"].write_bytes(bytes(range(256)) * 4)
    files["empty"].mkdir()
    return files


def _main(module: str, argv, capsys) -> tuple[int, str]:
    if module == "accuracy":
        from accuracy.__main__ import main
    elif module == "reports":
        from reports.__main__ import main
    elif module == "drift_study":
        from cases.drift_study import main
    else:
        from cases.expectation_update import main
    code = main(argv)
    out = capsys.readouterr()
    return code, out.err + out.out


def test_no_tool_writes_over_a_run(run, tmp_path, capsys):
    results, folder = run
    before = _digests(results)
    afile = tmp_path / "a-file.txt"
    afile.write_text("x")
    for module, argv, says in [
        ("reports", ["csv", str(results), "-o", str(folder / "results.json")], "results file"),
        ("reports", ["csv", str(results), "-o", str(folder / "shards" / "x.csv")], "inside the run folder"),
        ("reports", ["csv", str(results), "-o", str(tmp_path)], "is a folder"),
        ("accuracy", ["merge", str(results), "-o", str(folder)], "holds a run"),
        ("accuracy", ["merge", str(results), "-o", str(results)], "holds a run"),
        ("accuracy", ["merge", str(results), "-o", str(afile)], "is a file"),
        ("reports", [str(results), "-o", str(folder)], "holds a run"),
        ("reports", [str(results), "-o", str(afile)], "is a file"),
        ("drift_study", ["-o", str(afile)], "is a file"),
        ("reports", ["drift", str(folder)], "no drift study"),
        ("accuracy", ["mutate", "operators.swiglu_backward.kernels.plain:plain", "--json",
                      str(folder / "results.json")], "results file"),
        ("accuracy", ["mutate", "operators.swiglu_backward.kernels.plain:plain", "--json",
                      str(folder / "shards" / "m.json")], "inside the run folder"),
    ]:
        code, text = _main(module, argv, capsys)
        assert code == 2 and says in text and "Traceback" not in text, (argv, code, text)
    assert _digests(results) == before


def test_junk_inputs_are_one_line_exit_2(run, tmp_path, capsys):
    results, _ = run
    junk = _junk(tmp_path)
    for name, path in junk.items():
        for module, argv in [("accuracy", ["merge", str(path), "-o", str(tmp_path / f"m-{name}")]),
                             ("accuracy", ["diff", str(path), str(results)]),
                             ("reports", ["csv", str(path), "-o", str(tmp_path / f"{name}.csv")]),
                             ("reports", [str(path), "-o", str(tmp_path / f"r-{name}")]),
                             ("expectations", ["update", str(path), "--dry-run"])]:
            try:
                code, text = _main(module, argv, capsys)
            except SystemExit as exc:            # argparse-style exits count as the tool's exit code
                code, text = exc.code, capsys.readouterr().err
            assert code == 2 and "Traceback" not in text, (name, argv, code, text)


def test_a_bad_baseline_loses_only_the_diff(run, tmp_path, capsys):
    results, _ = run
    code, text = _main("reports", [str(results), "-o", str(tmp_path / "report"), "--baseline", str(tmp_path / "nope")],
                       capsys)
    assert code == 2 and "--baseline" in text and "no diff" in text
    assert (tmp_path / "report" / "index.html").is_file()


def test_the_newest_run_wins_over_a_stray_results_file(run, tmp_path):
    from runs.results import resolve_results
    results, folder = run
    stray = results / "results.json"
    stray.write_text(json.dumps({"records": []}))
    try:
        assert resolve_results(results) == folder / "results.json"
    finally:
        stray.unlink()


@pytest.mark.parametrize("args, says", [(["--report-dir", "README.md"], "is a file"),
                                        (["--report-dir", "r-x", "--baseline", "/nonexistent"], "--baseline")])
def test_report_options_are_checked_before_any_case(args, says, tmp_path):
    proc = _pytest("--profile", "none", "--case", "2,96,200,unit", "--backend", "torch-eager",
                   "--results-dir", str(tmp_path / "r"), *[str(tmp_path / a) if a == "r-x" else a for a in args])
    assert proc.returncode == 4 and says in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
