"""A user's own problem as a first-class citizen (issue #23): ``get_problem("file.py:make")`` and
``get_problem("package.module:make")``, their options from the factory's signature, the CLI
unchanged, and clear errors for every way the spec can be wrong."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.cli import main
from helmpinn.problems.registry import get_problem, problem_options

FACTORY = '''
import numpy as np
import helmpinn as hp

CALLS = []

def make(k: float = 3.0, side: int = 1):
    """A 1-D plane wave of my own."""
    CALLS.append(k)
    return hp.Problem(hp.geometry.Interval(0, side), kappa=k * k,
                      bcs={"xmin": hp.Dirichlet(1.0), "xmax": hp.Sommerfeld(k)},
                      exact=lambda x: np.exp(1j * k * x[:, 0]))

def needs(k):
    return make(k)

def wrong():
    return 42

NOT_CALLABLE = 3
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_problem.py"
    path.write_text(FACTORY)
    return path


def test_a_file_factory_is_loaded_with_its_options(user_file, monkeypatch, tmp_path):
    spec = f"{user_file}:make"
    assert problem_options(spec) == {"k": 3.0, "side": 1}
    p = get_problem(spec, k=4.5)
    assert isinstance(p, hp.Problem) and p.wavenumber == 4.5
    assert p.name == spec and p.options == {"k": 4.5, "side": 1}
    assert p.description == "A 1-D plane wave of my own."
    # a relative path is made absolute (so that --resume from elsewhere finds the same file)
    monkeypatch.chdir(tmp_path)
    assert get_problem("my_problem.py:make").name == spec
    assert hp.get_problem is get_problem


def test_a_module_factory_is_loaded(tmp_path, monkeypatch):
    pkg = tmp_path / "userpkg_for_helmpinn"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "waves.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "userpkg_for_helmpinn", raising=False)
    p = get_problem("userpkg_for_helmpinn.waves:make", k=2.0)
    assert p.name == "userpkg_for_helmpinn.waves:make" and p.wavenumber == 2.0
    assert problem_options("userpkg_for_helmpinn.waves:make") == {"k": 3.0, "side": 1}


@pytest.mark.parametrize("spec, exc, match", [
    ("{dir}/missing.py:make", ValueError, "missing.py does not exist"),
    ("{dir}:make", ValueError, "is not a file"),
    ("{file}:nothing", ValueError, "has no attribute 'nothing'"),
    ("{file}:NOT_CALLABLE", TypeError, "NOT_CALLABLE is a int, expected a factory"),
    ("{file}:", ValueError, "expected path/to/file.py:factory"),
    ("{file}:1x", ValueError, "expected path/to/file.py:factory"),
    ("no_such_module_for_helmpinn.sub:make", ValueError, "no module named 'no_such_module_for_helmpinn'"),
    ("json:nothing", ValueError, "json has no attribute 'nothing'"),
    ("plane2d", ValueError, "unknown problem 'plane2d'.*path/to/file.py:make"),
])
def test_spec_errors_are_clear(user_file, spec, exc, match):
    spec = spec.format(dir=user_file.parent, file=user_file)
    with pytest.raises(exc, match=match):
        get_problem(spec)


def test_factory_result_and_options_are_checked(user_file):
    with pytest.raises(TypeError, match="the factory returned int, expected a helmpinn.Problem"):
        get_problem(f"{user_file}:wrong")
    with pytest.raises(ValueError, match="needs option k"):
        get_problem(f"{user_file}:needs")
    assert get_problem(f"{user_file}:needs", k=2.0).wavenumber == 2.0
    with pytest.raises(ValueError, match="takes no option n; it takes k, side"):
        get_problem(f"{user_file}:make", n=2)


def test_the_file_is_run_once_until_it_changes(user_file):
    spec = f"{user_file}:make"
    get_problem(spec)
    get_problem(spec, k=2.0)
    from helmpinn.problems.registry import load_factory

    factory = load_factory(spec)[0]
    assert factory.__globals__["CALLS"] == [3.0, 2.0]  # one module: both calls recorded there
    user_file.write_text(FACTORY.replace("A 1-D plane wave", "Edited"))
    os.utime(user_file, ns=(1, 10**18))  # a new mtime, whatever the clock's resolution
    assert get_problem(spec).description == "Edited of my own."


def test_cli_trains_a_user_problem_and_resumes_it(user_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    rc = main(["train", "--problem", "my_problem.py:make", "--k", "4", "--steps", "3",
               "--no-plots", "--quiet", "--out", str(out)])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["problem"] == f"{user_file}:make"
    assert metrics["settings"]["problem_options"] == {"k": 4.0, "side": 1}
    assert np.isfinite(metrics["final"]["relative_l2"])
    # resumed from another directory, the factory named again (a run folder's is never loaded
    # on its word alone): the absolute path finds the same file
    monkeypatch.chdir(user_file.anchor)
    assert main(["train", "--resume", str(out), "--steps", "5", "--no-plots", "--quiet",
                 "--problem", f"{user_file}:make"]) == 0
    assert json.loads((out / "metrics.json").read_text())["final_step"] == 5
    # a bad spec is one line and exit status 2
    with pytest.raises(SystemExit) as info:
        sys.exit(main(["train", "--problem", "nothere.py:make", "--steps", "3", "--no-plots",
                       "--quiet", "--out", str(tmp_path / "bad")]))
    assert info.value.code == 2


OLD_PATHS_FACTORY = '''
import numpy as np
import helmpinn as hp
from helmpinn.geometry import Interval
from helmpinn.problems import Dirichlet, Problem, Sommerfeld
from helmpinn.registry import register_problem

def make(k: float = 3.0):
    return Problem(Interval(0, 1), kappa=k * k, bcs={"xmin": Dirichlet(1.0), "xmax": Sommerfeld(k)},
                   exact=lambda x: np.exp(1j * k * x[:, 0]))
'''


@pytest.fixture
def forget_old_paths():
    """The old module names unimported before and after (an import is cached: it warns once)."""
    from helmpinn._compat import MOVED_MODULES

    def forget():
        for old in MOVED_MODULES:
            sys.modules.pop(old, None)
    forget()
    yield
    forget()


def test_a_problem_file_written_for_the_old_module_paths_still_loads(tmp_path, forget_old_paths):
    # helmpinn.geometry and helmpinn.registry moved into helmpinn.problems: a file written before
    # loads, each old name the moved module itself, with a DeprecationWarning naming the new path
    path = tmp_path / "old_style.py"
    path.write_text(OLD_PATHS_FACTORY)
    with pytest.warns(DeprecationWarning) as caught:
        p = get_problem(f"{path}:make", k=2.0)
    assert sorted(str(w.message).split(":")[0] for w in caught) == [
        "helmpinn.geometry moved to helmpinn.problems.geometry",
        "helmpinn.registry moved to helmpinn.problems.registry"]
    assert isinstance(p, hp.Problem) and p.wavenumber == 2.0
    assert isinstance(p.domain, hp.geometry.Interval)
    assert sys.modules["helmpinn.geometry"] is hp.geometry
    assert sys.modules["helmpinn.registry"] is hp.registry
    assert hp.geometry.__name__ == "helmpinn.problems.geometry"
    assert hp.geometry.__spec__.name == "helmpinn.problems.geometry"   # its own spec, kept


@pytest.mark.parametrize("old, new", [("helmpinn.model", "helmpinn.models.model"),
                                      ("helmpinn.decomposition", "helmpinn.models.decomposition"),
                                      ("helmpinn.waves", "helmpinn.problems.waves"),
                                      ("helmpinn.batch", "helmpinn.problems.batch"),
                                      ("helmpinn.trainer", "helmpinn.training.trainer"),
                                      ("helmpinn.cli_invert", "helmpinn.cli.invert")])
def test_an_old_module_path_imports_the_moved_module_with_a_warning(old, new, forget_old_paths):
    import importlib

    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    with pytest.raises(ModuleNotFoundError):   # only the listed names: no module of that name otherwise
        importlib.import_module("helmpinn.no_such_module")
