"""What a new user met, each fixed: the CLI's --time-limit and its default target, a time limit
kept by not beginning a step that would end past it, a problem file importing a module beside
it, the docs' problem flags as the CLI spells them, a PointSource's default width from the
wavenumber at the source, and figure titles and axes."""
import json
import pathlib
import re
import sys

import numpy as np
import pytest

import helmpinn as hp
from helmpinn import plots
from helmpinn.cli import DEFAULT_TARGET, build_parser, main
from helmpinn.geometry import Box
from helmpinn.training.trainer import Trainer

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
SMALL = ["--hidden", "8", "--layers", "1", "--fourier", "4", "--points", "40", "--eval-every", "1", "--quiet",
         "--no-plots"]


def _metrics(folder):
    return json.loads((folder / "metrics.json").read_text())


# -- the time limit ---------------------------------------------------------------------------
def test_a_step_that_would_end_past_the_time_limit_is_not_begun(monkeypatch):
    """Steps of 3 s under a 10 s limit: three steps (9 s), not a fourth that would end at 12 s;
    the longest of the last steps is the estimate, so one slow step is not forgotten at once."""
    now = [0.0]
    durations = iter([3.0] * 50)
    record = Trainer.record

    def timed(self, info):
        now[0] += next(durations)
        return record(self, info)

    monkeypatch.setattr(Trainer, "record", timed)
    p = hp.get_problem("plane1d", k=4.0)
    model = hp.Model.create(1, 4, 8, 1, dtype="float64", seed=0)
    tr = Trainer(p, model, pde_points=30, bc_points=2, eval_every=0, progress=False, time_limit=10.0,
                 clock=lambda: now[0], val_points=0)
    tr.fit(20)
    assert tr.step == 3 and now[0] <= 10.0, (tr.step, now[0])
    assert tr.stop_reason == "time limit 10 s: stopped at step 3, before a step that would end past it"
    # one slow step among fast ones: 1, 1, 5, 1, ... under 12 s stops after the fourth (8 s: a
    # fifth might take 5 s again); one step's time alone would have begun it
    now[0], durations = 0.0, iter([1.0, 1.0, 5.0] + [1.0] * 50)
    tr2 = Trainer(p, hp.Model.create(1, 4, 8, 1, dtype="float64", seed=0), pde_points=30, bc_points=2,
                  eval_every=0, progress=False, time_limit=12.0, clock=lambda: now[0], val_points=0)
    tr2.fit(20)
    assert tr2.step == 4 and now[0] == 8.0, (tr2.step, now[0])


def test_cli_time_limit(tmp_path, capsys):
    """--time-limit stops the run (a positive number of seconds, refused otherwise before any
    file is written), and may be given again with --resume."""
    out = tmp_path / "run"
    args = ["train", "--problem", "plane1d", "--k", "4", "--optimizer", "adam", *SMALL]
    assert main([*args, "--steps", "100000", "--time-limit", "0.5", "--out", str(out)]) == 0
    m = _metrics(out)
    assert m["stop_reason"].startswith("time limit 0.5 s") and 0 < m["steps"] < 100000, m["stop_reason"]
    for bad in ("0", "-1", "nan", "inf"):
        assert main([*args, "--time-limit", bad, "--out", str(tmp_path / "bad")]) == 2
        assert "--time-limit must be a positive finite number" in capsys.readouterr().err
        assert not (tmp_path / "bad").exists()
    assert main(["train", "--resume", str(out), "--steps", "200000", "--time-limit", "0.3", "--quiet",
                 "--no-plots"]) == 0
    resumed = _metrics(out)
    assert resumed["stop_reason"].startswith("time limit 0.3 s") and resumed["final_step"] > m["final_step"]
    assert "--time-limit SECONDS" in _train_help()


def _train_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["train"].format_help()


def test_train_stops_at_a_default_target_where_there_is_an_exact_solution(tmp_path):
    """Without --target a problem with an exact solution stops at DEFAULT_TARGET (the quick
    start ends once it has made the point); --target 0 trains to the optimiser's own stop; a
    problem without an exact solution has no target; --resume may change it."""
    args = ["train", "--problem", "plane1d", "--k", "4", "--optimizer", "lm", *SMALL]
    assert main([*args, "--steps", "60", "--out", str(tmp_path / "a")]) == 0
    a = _metrics(tmp_path / "a")
    assert a["settings"]["target"] == DEFAULT_TARGET == 1e-5
    assert a["stop_reason"].startswith("target error 1e-05 reached") and a["steps"] < 60
    assert a["final"]["relative_l2"] < DEFAULT_TARGET
    assert main([*args, "--steps", "3", "--target", "0", "--out", str(tmp_path / "b")]) == 0
    b = _metrics(tmp_path / "b")
    assert b["settings"]["target"] is None and b["steps"] == 3
    assert main(["train", "--resume", str(tmp_path / "a"), "--steps", "70", "--target", "0", "--quiet",
                 "--no-plots"]) == 0
    assert _metrics(tmp_path / "a")["settings"]["target"] is None
    assert "default 1e-05 where the problem has an exact solution" in " ".join(_train_help().split())


def test_no_default_target_without_an_exact_solution(tmp_path):
    source = tmp_path / "noexact.py"
    source.write_text("import numpy as np\nimport helmpinn as hp\nfrom helmpinn.geometry import Interval\n\n"
                      "def make(k: float = 4.0):\n"
                      "    return hp.Problem(Interval(0.0, 1.0), kappa=k * k, source=lambda x: np.ones(len(x)),\n"
                      "                      bcs={'*': hp.Dirichlet(0.0)})\n")
    out = tmp_path / "run"
    assert main(["train", "--problem", f"{source}:make", "--optimizer", "adam", "--steps", "3", *SMALL,
                 "--out", str(out)]) == 0
    assert _metrics(out)["settings"]["target"] is None


# -- a problem file beside its modules ---------------------------------------------------------
def test_a_problem_file_imports_a_module_beside_it(tmp_path, monkeypatch):
    """The file's folder is on the import path while it runs (as under `python file.py`), from
    any working directory; the path is as it was afterwards; a module found nowhere is refused
    naming the spec (ValueError; exit status 2 from the CLI)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "house_helper_medium.py").write_text("K = 5.0\n")
    (folder / "wave.py").write_text(
        "import numpy as np\nimport helmpinn as hp\nfrom helmpinn.geometry import Interval\n"
        "from house_helper_medium import K\n\n"
        "def make(scale: float = 1.0):\n"
        "    exact = lambda x: np.exp(1j * K * scale * x[:, 0])\n"
        "    return hp.Problem(Interval(0.0, 1.0), kappa=(K * scale) ** 2, bcs={'*': hp.Dirichlet(exact)},\n"
        "                      exact=exact)\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delitem(sys.modules, "house_helper_medium", raising=False)
    path_before = list(sys.path)
    p = hp.get_problem(f"{folder / 'wave.py'}:make")
    assert p.wavenumber == 5.0 and sys.path == path_before
    sys.modules.pop("house_helper_medium", None)

    (folder / "broken.py").write_text("import house_no_such_module_anywhere\n\ndef make():\n    pass\n")
    with pytest.raises(ValueError, match=r"problem '.*broken\.py:make': .*broken\.py imports "
                                         r"'house_no_such_module_anywhere', which is neither installed nor a "
                                         r"module beside the file"):
        hp.get_problem(f"{folder / 'broken.py'}:make")
    assert sys.path == path_before


def test_cli_refuses_a_problem_file_whose_import_is_missing(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("import house_no_such_module_anywhere\n\ndef make():\n    pass\n")
    assert main(["train", "--problem", f"{tmp_path / 'broken.py'}:make", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "house_no_such_module_anywhere" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


# -- the docs spell the flags as the CLI takes them --------------------------------------------
def test_every_flag_the_problems_guide_names_is_a_train_option():
    """docs/guide/problems.md named --pml-width where the CLI takes --pml_width."""
    text = (DOCS / "guide" / "problems.md").read_text()
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", text))
    assert "--pml_width" in flags
    known = {s for a in build_parser()._subparsers._group_actions[0].choices["train"]._actions
             for s in a.option_strings}
    assert flags <= known, sorted(flags - known)


# -- a PointSource's default width ---------------------------------------------------------------
def test_a_point_sources_default_width_is_a_tenth_of_the_wavelength_at_the_source():
    """In a medium with a slow region (v = 0.5) and the source where v = 1, σ = λ/10 with the
    local λ at the source, not the shortest wavelength anywhere; a constant medium as before."""
    f = 2.0
    slow = lambda x: np.where(x[:, 0] > 0.6, 0.5, 1.0)   # noqa: E731
    p = hp.Problem(Box([0, 0], [1, 1]), frequency=f, velocity=slow, source=hp.PointSource((0.25, 0.5)),
                   bcs={"*": hp.Dirichlet(0.0)})
    assert p.wavenumber == pytest.approx(2 * np.pi * f / 0.5)
    assert p.point_sources[0].width == pytest.approx((1.0 / f) / 10)   # λ = v / f at the source
    inside = hp.Problem(Box([0, 0], [1, 1]), frequency=f, velocity=slow, source=hp.PointSource((0.8, 0.5)),
                        bcs={"*": hp.Dirichlet(0.0)})
    assert inside.point_sources[0].width == pytest.approx((0.5 / f) / 10)
    given = hp.Problem(Box([0, 0], [1, 1]), frequency=f, velocity=slow,
                       source=hp.PointSource((0.25, 0.5), width=0.07), bcs={"*": hp.Dirichlet(0.0)})
    assert given.point_sources[0].width == 0.07
    k = 9.0
    const = hp.Problem(Box([0, 0], [1, 1]), kappa=k * k, source=hp.PointSource((0.5, 0.5)),
                       bcs={"*": hp.Dirichlet(0.0)})
    assert const.point_sources[0].width == pytest.approx(2 * np.pi / k / 10)


# -- figures ---------------------------------------------------------------------------------------
def test_figure_titles_name_a_user_file_without_its_folder(tmp_path, monkeypatch):
    """solution.png's and error.png's titles carried the file's absolute path (and were cut off):
    they name the file and the factory."""
    folder = tmp_path / ("a-long-folder-name-" * 4)
    folder.mkdir()
    (folder / "plane.py").write_text(
        "import numpy as np\nimport helmpinn as hp\nfrom helmpinn.geometry import Box\n\n"
        "def make():\n    exact = lambda x: np.exp(2j * x[:, 0])\n"
        "    return hp.Problem(Box([0, 0], [1, 1]), kappa=4.0, bcs={'*': hp.Dirichlet(exact)}, exact=exact)\n")
    p = hp.get_problem(f"{folder / 'plane.py'}:make")
    assert str(folder) in p.name
    model = hp.Model.create(2, 4, 8, 1, seed=0)
    titles = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: titles.append(fig._suptitle.get_text()) or path)
    plots.plot_solution(p, model, tmp_path / "s.png", n=8)
    plots.plot_error(p, model, tmp_path / "e.png", n=8)
    assert titles[0] == "plane.py:make: solution" and titles[1].startswith("plane.py:make: error ("), titles
    assert plots._display_name(hp.get_problem("dirichlet2d")) == "dirichlet2d"


def test_history_figure_has_a_time_axis():
    """history.png: the training seconds along the top of each panel, from the evaluations'
    times; none when there are not two evaluations to read them from."""
    h = {"step": [1, 2, 3, 4], "loss": [4.0, 3.0, 2.0, 1.0], "pde": [1.0] * 4, "data": [0.5] * 4,
         "bc": [0.0] * 4, "eval_step": [2, 4], "eval_time": [1.5, 3.0], "eval_error": [0.1, 0.01],
         "eval_val_loss": [3.0, 1.0]}
    fig = plots.history_figure(h)
    tops = [c for a in fig.axes for c in a.child_axes if c.get_xlabel() == "training time (s)"]
    assert len(tops) == 2   # over the loss and over the error
    top = tops[0]
    assert top._functions[0](np.array([0.0, 2.0, 3.0]))[1:].tolist() == [1.5, 2.25]
    one = plots.history_figure({**h, "eval_step": [4], "eval_time": [3.0], "eval_error": [0.1],
                                "eval_val_loss": [1.0]})
    assert not [c for a in one.axes for c in a.child_axes]
