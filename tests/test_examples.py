"""The examples run: each script under examples/ (the tutorials of the documentation) in a
subprocess at a reduced size (HELMPINN_EXAMPLES_QUICK=1: a few steps on few points), checking
its exit status and the result line it prints. The Python quick start of README.md runs too.

examples/cpp (embedding in C++) is built and run by tests/test_cpp.py (test_example_plane1d).
The MPI example needs mpi4py and mpiexec (the [mpi] extra): without them it skips, saying why,
except under CI (CI=true), where it fails.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import mpiexec_command

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TIMEOUT = 120  # seconds per script; each takes a few on a 2-core machine


def _env() -> dict[str, str]:
    env = dict(os.environ, HELMPINN_EXAMPLES_QUICK="1", MPLBACKEND="Agg")
    env.setdefault("OMP_NUM_THREADS", "1")
    # The scripts run in a temporary folder: a relative PYTHONPATH (PYTHONPATH=python in a source
    # checkout) must name the same folders there, or they would import another helmpinn.
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else p
                                            for p in env["PYTHONPATH"].split(os.pathsep))
    return env


def _run(cmd: list[str], cwd: Path) -> str:
    try:
        res = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(map(str, cmd))} did not finish in {TIMEOUT} s")
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res.stdout


# script -> a pattern its output must contain
SCRIPTS = {
    "own_problem.py": r"relative L2 error \d\.\d\de[-+]\d\d after 20 Adam steps",
    "layered_pml.py": r"hp.solve \(decomposed, gn\): (.|\n)*relative difference from fd_solve \d\.\d\de[-+]\d\d "
                      r"on the physical domain",
    "many_wavelengths.py": r"plan: decomposed model, .* optimizer gn\n(.|\n)*relative difference from fd_solve "
                           r"\d\.\d\de[-+]\d\d on the physical domain",
    "scattering.py": r"relative L2 error \d\.\d\de[-+]\d\d after 20 Adam steps",
    "levenberg_marquardt.py": r"relative L2 error \d\.\d\de[-+]\d\d after 3 iterations",
    "fit_data_1d.py": r"relative L2 error \d\.\d\de[-+]\d\d after 50 steps",
    "inversion.py": r"velocity error \d\.\d\d\d after 2 steps",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_example(script, tmp_path):
    out = _run([sys.executable, str(EXAMPLES / script)], cwd=tmp_path)
    assert re.search(SCRIPTS[script], out), f"{script}: no result line in its output:\n{out}"
    assert not any(tmp_path.iterdir()), f"{script} wrote files in quick mode: {list(tmp_path.iterdir())}"


def test_every_example_is_tested():
    scripts = {p.name for p in EXAMPLES.glob("*.py")}
    assert scripts == set(SCRIPTS) | {"mpi_train.py"}, "add new examples to tests/test_examples.py"


def test_example_mpi(tmp_path):
    out = _run([*mpiexec_command(2), sys.executable, str(EXAMPLES / "mpi_train.py")], cwd=tmp_path)
    assert re.search(r"^2 ranks: relative L2 error \d\.\d\de[-+]\d\d after 20 steps$", out, re.M), out
    assert out.count("relative L2 error") == 1, f"only rank 0 prints:\n{out}"


def test_readme_quick_start(tmp_path):
    """README's Python quick start runs as written (with 2 steps on few points)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    quick, n = re.subn(r"hp\.solve\(problem, tol=1e-4\)",
                       "hp.solve(problem, tol=1e-4, steps=2, pde_points=200, bc_points=40)", code)
    assert n == 1, "README's quick start no longer calls hp.solve(problem, tol=1e-4): update this test"
    (tmp_path / "quick_start.py").write_text(quick, encoding="utf-8")
    out = _run([sys.executable, "quick_start.py"], cwd=tmp_path)
    assert re.search(r"relative L2 error \d\.\d\de[-+]\d\d", out), out


def test_readme_links():
    """Every relative link of README.md names a file of the repository (the docs build checks
    the links between the documentation's pages)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "README.md links to no page"
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_api_index_names_exist():
    """Every name docs/api/index.md lists as ``helmpinn.<name>`` is one, and every name it lists
    in parentheses after a module (``geometry`` (``Box``, ...)) is that module's."""
    import helmpinn as hp

    text = (REPO / "docs" / "api" / "index.md").read_text(encoding="utf-8")
    cells = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `")][1:]   # not the header
    missing, count = [], 0
    for cell in cells:
        grouped = re.fullmatch(r"\s*`(\w+)` \((.*)\)\s*", cell)
        owner, names = (getattr(hp, grouped[1], None), grouped[2]) if grouped else (hp, cell)
        if grouped and owner is None:
            missing.append(grouped[1])
            continue
        for name in re.findall(r"`([^`]+)`", names):
            count += 1
            if not hasattr(owner, name):
                missing.append(name if owner is hp else f"{grouped[1]}.{name}")
    assert count > 40, cells
    assert not missing, f"docs/api/index.md lists names helmpinn does not have: {missing}"
