"""A PML on chosen faces (``PML(faces=...)``): a free surface (u = 0) on the others, through the
problem's sampling and conditions, fd_solve (against the image-source solution of a half-space),
a trained network, fwi's adjoint gradient, Survey.synthetic and the ``helmpinn invert`` command
line (hp.invert's joint Jacobian with a free surface: one case of tests/test_inversion.py's table)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import terminate_at

import helmpinn as hp
from helmpinn.problems.geometry import Box, BoxMinusBall, Disk, Interval, PointCloud
from helmpinn.problems.waves import free_source_field
from helmpinn.reference import fd_solve

TOP_FREE = ("xmin", "xmax", "ymax")      # the surface y = lo (z the depth) left free


# -- the spelling and its checks --------------------------------------------------------------

def test_default_faces_are_every_face_bit_for_bit():
    x = np.random.default_rng(0).uniform(-0.6, 1.6, (500, 2))
    lo, hi = np.zeros(2), np.ones(2)
    every = hp.PML(0.4, faces=("xmin", "xmax", "ymin", "ymax"))
    for a, b in zip(hp.PML(0.4).stretch(x, lo, hi, 3.0), every.stretch(x, lo, hi, 3.0)):
        assert np.array_equal(a, b)
    assert all(np.array_equal(a, b) for a, b in zip(hp.PML(0.4).outer_box(lo, hi), every.outer_box(lo, hi)))
    assert hp.PML(0.4).faces is None and hp.PML(0.4).faces_record(2) is None and every.faces_record(2) is None
    assert repr(hp.PML(0.4)) == "PML(width=0.4, strength=None, power=2.0)"


def test_faces_grow_the_box_and_stretch_only_where_named():
    pml = hp.PML(0.5, faces=["ymax", "xmin", "xmax"])
    assert pml.faces == TOP_FREE and pml.free_faces(2) == ("ymin",) and pml.faces_record(2) == list(TOP_FREE)
    lo, hi = pml.outer_box([0.0, 0.0], [2.0, 1.0])
    assert lo.tolist() == [-0.5, 0.0] and hi.tolist() == [2.5, 1.5]
    x = np.array([[1.0, 0.5], [-0.25, 0.5], [1.0, 1.25], [1.0, -0.25]])
    s, ds = pml.stretch(x, [0.0, 0.0], [2.0, 1.0], 2.0)
    assert np.all(s[0] == 1) and s[1, 0].imag > 0 and s[2, 1].imag > 0
    assert np.all(s[3] == 1) and np.all(ds[3] == 0)     # beyond the free face: no layer
    assert "faces=('xmin', 'xmax', 'ymax')" in repr(pml)
    assert hp.PML(0.5, faces="xmax").faces == ("xmax",)
    assert pml.for_medium(2.0, 1.0).faces == TOP_FREE     # the stronger default keeps its faces


@pytest.mark.parametrize("faces, error, match", [
    (("top",), ValueError, "faces: 'top' is not a face's name"),
    (("xmin", "xmin"), ValueError, r"faces names \['xmin'\] more than once"),
    ((), ValueError, "at least one face"),
    (3, TypeError, "faces must be face names"),
    ((1,), ValueError, "faces: 1 is not a face's name"),
])
def test_bad_faces_are_refused_naming_the_argument(faces, error, match):
    with pytest.raises(error, match=match):
        hp.PML(0.3, faces=faces)


def test_a_face_the_dimension_lacks_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"faces: 'zmax' is not a face of a 2-D box"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=4.0, pml=hp.PML(0.3, faces=("xmin", "zmax")))
    survey = hp.Survey([hp.PointSource([0.5, 0.5], width=0.05)], [[0.3, 0.3]], [1.0], np.ones((1, 1, 1)))
    out = tmp_path / "never.npz"
    with pytest.raises(ValueError, match="'zmax' is not a face of a 2-D box"):
        hp.Survey.synthetic(1.0, Box([0, 0], [1, 1]), survey.sources, survey.receivers, [1.0],
                            pml=hp.PML(0.3, faces="zmax"))
    assert not out.exists()


# -- the problem: sampling and conditions -----------------------------------------------------

def test_the_free_face_is_a_boundary_part_with_u_zero_by_default():
    w = 0.25
    prob = hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=9.0, pml=hp.PML(w, faces=TOP_FREE))
    assert prob.part_names == ("ymin",)
    assert isinstance(prob.bcs["ymin"], hp.Dirichlet) and prob.bcs["ymin"].value == 0
    ts = prob.sample(2000, 400, rng=2)
    assert len(ts.x_bc) == 0 and np.all(ts.y == 0)
    on_surface = np.isclose(ts.x_data[:, 1], 0.0)
    walls = ts.x_data[~on_surface]
    # the wall: the grown box's faces x = -w, x = 1 + w, y = 1 + w; nothing below y = 0
    assert np.all(np.isclose(walls[:, 0], -w) | np.isclose(walls[:, 0], 1 + w) | np.isclose(walls[:, 1], 1 + w))
    # the surface spans the layer along it; its share of the points is its share of the measure
    surf = ts.x_data[on_surface]
    assert surf[:, 0].min() < 0 and surf[:, 0].max() > 1
    assert abs(len(surf) / 400 - 1.5 / (1.5 + 1.25 + 1.25 + 1.5)) < 0.01
    assert ts.x_pde[:, 1].min() >= 0 and ts.x_pde[:, 1].max() > 1 and ts.x_pde[:, 0].min() < 0
    layer = prob.in_layer(ts.x_pde)
    assert np.all(ts.a_pde[~layer] == 1)
    # PDE points at y < w near the surface but inside the box: not stretched in y
    near = (~layer) & (ts.x_pde[:, 1] < 0.1)
    assert near.any() and np.all(ts.a_pde[near] == 1)


def test_the_free_face_takes_the_condition_bcs_gives_it():
    pml = hp.PML(0.25, faces=TOP_FREE)
    prob = hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=9.0, pml=pml, bcs={"ymin": hp.Neumann()})
    ts = prob.sample(500, 400, rng=2)
    assert len(ts.x_bc) and np.allclose(ts.x_bc[:, 1], 0.0) and np.allclose(ts.n_bc, [0.0, -1.0])
    assert not np.any(np.isclose(ts.x_data[:, 1], 0.0))     # the wall only
    star = hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=9.0, pml=pml, bcs={"*": hp.Neumann()})
    assert isinstance(star.bcs["ymin"], hp.Robin)
    with pytest.raises(ValueError, match="boundary part 'xmin' lies inside the PML"):
        hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=9.0, pml=pml, bcs={"xmin": hp.Neumann()})


def test_a_scatterer_and_a_free_surface_together():
    dom = BoxMinusBall(Box([-1.0, -1.0], [1.0, 1.0]), Disk((0.2, 0.0), 0.3))
    prob = hp.Problem(dom, kappa=4.0, bcs={"scatterer": hp.Neumann()}, pml=hp.PML(0.5, faces=TOP_FREE))
    assert prob.part_names == ("ymin", "scatterer")
    ts = prob.sample(1000, 200, rng=1)
    assert np.allclose(np.hypot(ts.x_bc[:, 0] - 0.2, ts.x_bc[:, 1]), 0.3)     # Robin: the scatterer
    surface = np.isclose(ts.x_data[:, 1], -1.0)
    assert surface.any() and np.all(ts.y == 0)
    assert ts.x_pde[:, 1].min() >= -1.0 and ts.x_pde[:, 1].max() > 1.0


def test_a_point_cloud_shrinks_its_box_on_the_layer_s_faces_only():
    rng = np.random.default_rng(0)
    pts = rng.uniform([-0.5, 0.0], [1.5, 1.5], (400, 2))   # the box [0, 1]^2, the layer on three faces
    pts[:4] = [[-0.5, 0.0], [1.5, 1.5], [-0.5, 1.5], [1.5, 0.0]]
    wall = np.array([[-0.5, 0.7], [1.5, 0.7], [0.5, 1.5], [0.5, 0.0]])
    normals = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    cloud = PointCloud(pts, wall, normals, parts="wall")
    prob = hp.Problem(cloud, kappa=4.0, bcs={"wall": hp.Dirichlet(0.0)}, pml=hp.PML(0.5, faces=TOP_FREE))
    lo, hi = prob.sampler.box
    assert lo.tolist() == [0.0, 0.0] and hi.tolist() == [1.0, 1.0]
    np.testing.assert_array_equal(prob.in_layer(pts), (pts[:, 0] < 0) | (pts[:, 0] > 1) | (pts[:, 1] > 1))


def test_a_source_near_the_free_surface_is_not_warned_about_a_pml():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=100.0, source=hp.PointSource([0.5, 0.02], width=0.02),
                   pml=hp.PML(0.3, faces=TOP_FREE))
    with pytest.warns(UserWarning, match="from the PML"):
        hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=100.0, source=hp.PointSource([0.5, 0.02], width=0.02),
                   pml=hp.PML(0.3))


# -- exact solutions: the image source ----------------------------------------------------------

def _half_space(k: float, s: float, x0, faces=TOP_FREE, power=4):
    """A Gaussian source at x0 in the half-space y > 0 with u = 0 on y = 0: the free-space field
    minus its mirror image's (sources ±, so the solution is exact)."""
    x0 = np.asarray(x0, np.float64)
    xi = x0 * [1.0, -1.0]

    def g(x, c):
        return np.exp(-np.sum((np.asarray(x) - c) ** 2, axis=1) / (2 * s * s)) / (2 * math.pi * s * s)

    def exact(x):
        x = np.asarray(x, np.float64)
        return free_source_field(x - x0, k, s) - free_source_field(x - xi, k, s)
    pml = hp.PML(2 * math.pi / k, power=power, faces=faces)
    return hp.Problem(Box([-1.0, 0.0], [1.0, 1.0]), kappa=k * k, wavenumber=k, exact=exact, pml=pml,
                      source=lambda x: -(g(x, x0) - g(x, xi)).astype(np.complex128))


def test_fd_solve_gives_the_image_source_solution_of_a_half_space():
    """fd_solve with the free surface matches the image solution to the layer's reflection
    (6e-5 at h = λ/30); the same problem with the layer on every face (no free surface) is a
    different problem, 9e-2 away: the check can fail."""
    k = 3 * math.pi
    xt = np.random.default_rng(0).uniform([-1, 0], [1, 1], (3000, 2))
    errors = {}
    for name, faces in (("free", TOP_FREE), ("every", None)):
        prob = _half_space(k, 0.05, [0.1, 0.3], faces)
        e = prob.exact_at(xt)
        errors[name] = np.linalg.norm(fd_solve(prob, 0.02)(xt) - e) / np.linalg.norm(e)
    assert errors["free"] < 2e-4, errors
    assert errors["every"] > 3e-2, errors


def test_fd_solve_keeps_a_free_face_s_own_condition():
    """1-D: the layer on xmax only and u(0) = 1 on the free face xmin: the outgoing exp(ikx)."""
    k = 6.0
    prob = hp.Problem(Interval(0.0, 1.0), kappa=k * k, bcs={"xmin": hp.Dirichlet(1.0)},
                      pml=hp.PML(0.5, power=4, faces="xmax"), exact=lambda x: np.exp(1j * k * x[:, 0]))
    assert prob.sampling_domain.bounds[0][0] == 0.0 and prob.sampling_domain.bounds[1][0] == 1.5
    x = np.linspace(0, 1, 201)[:, None]
    assert np.max(np.abs(fd_solve(prob, 1 / 400)(x) - prob.exact_at(x))) < 2e-3


def test_a_trained_network_gives_the_outgoing_wave_beside_a_free_face():
    """hp.solve on the 1-D problem above (the free face's Dirichlet data, the layer on one side):
    the network against the exact field and against fd_solve."""
    k = 6.0
    prob = hp.Problem(Interval(0.0, 1.0), kappa=k * k, bcs={"xmin": hp.Dirichlet(1.0)},
                      pml=hp.PML(0.5, faces="xmax"), exact=lambda x: np.exp(1j * k * x[:, 0]))
    sol = hp.solve(prob, tol=1e-3, time_limit=60, progress=False, seed=0)
    x = np.linspace(0, 1, 301)[:, None]
    u, e = sol.predict(x), prob.exact_at(x)
    ref = fd_solve(prob, 1 / 400)(x)
    assert np.linalg.norm(u - e) / np.linalg.norm(e) < 5e-3
    assert np.linalg.norm(u - ref) / np.linalg.norm(ref) < 5e-3


# -- the inversions: fwi's gradient, the synthetic data ------------------

def test_fwi_adjoint_gradient_with_a_free_surface():
    from helmpinn.reference.fwi import FWIObjective, _medium_axes

    box = Box([0.0, 0.0], [1.0, 1.0])
    rng = np.random.default_rng(1)
    src = [hp.PointSource([0.2, 0.3], width=0.08), hp.PointSource([0.8, 0.6], amplitude=1j, width=0.08)]
    rec = rng.uniform(0.1, 0.9, (6, 2))
    survey = hp.Survey(src, rec, [1.0, 1.5], rng.normal(size=(2, 2, 6)) + 1j * rng.normal(size=(2, 2, 6)))
    axes = _medium_axes(box, 0.2)
    m0 = 1 + 0.2 * rng.uniform(size=tuple(len(a) for a in axes))
    objectives = [FWIObjective(survey, [1.0, 1.5], domain=box, pml=pml, medium_axes=axes, m_initial=m0,
                               h=1 / 16, regularization=1e-3, m_scale=1.0)
                  for pml in (hp.PML(0.3, faces=TOP_FREE), hp.PML(0.3))]
    x = m0.ravel() * (1 + 0.1 * rng.uniform(size=m0.size))
    obj = objectives[0]
    f, g, _ = obj(x)
    assert objectives[1](x)[0] != f                      # the surface changes the misfit
    for _ in range(2):
        d = rng.normal(size=x.size)
        eps = 1e-5
        fd = (obj(x + eps * d)[0] - obj(x - eps * d)[0]) / (2 * eps)
        assert abs(fd - g @ d) < 1e-6 * abs(g @ d), (fd, g @ d)


def test_synthetic_data_and_the_inversions_carry_the_faces():
    """Survey.synthetic with a free surface is fd_solve's field with that surface; fwi and
    hp.invert record the faces, and a run continues only with its own."""
    from helmpinn.reference import fwi

    box = Box([0.0, 0.0], [1.0, 1.0])
    src = [hp.PointSource([0.5, 0.3], width=0.08)]
    rec = np.array([[0.2, 0.1], [0.8, 0.1], [0.5, 0.05]])
    pml = hp.PML(0.4, faces=TOP_FREE)
    survey = hp.Survey.synthetic(1.0, box, src, rec, [1.5], pml=pml, h=1 / 40)
    prob = hp.Problem(box, frequency=1.5, velocity=1.0, source=survey.sources[0], pml=pml)
    direct = fd_solve(prob, 1 / 40)(rec)
    assert np.allclose(survey.data[0, 0], direct, rtol=1e-10, atol=0)
    every = hp.Survey.synthetic(1.0, box, src, rec, [1.5], pml=hp.PML(0.4), h=1 / 40)
    assert np.max(np.abs(every.data - survey.data)) > 0.1 * np.max(np.abs(survey.data))
    stopped = fwi(survey, 1.0, domain=box, pml=pml, bounds=(0.8, 1.3), max_iter=2, callback=lambda info: True)
    assert stopped.resume["settings"]["pml_faces"] == list(TOP_FREE)
    survey.free_surface = None          # past the survey's own check (next test), to the record's
    with pytest.raises(ValueError, match="pml_faces"):
        fwi(survey, 1.0, domain=box, pml=hp.PML(0.4), bounds=(0.8, 1.3), start=stopped)
    json.dumps(stopped.resume["settings"])


def test_a_survey_records_its_free_surface_and_refuses_another_boundary(tmp_path):
    """Survey.synthetic records the faces its data had free (u = 0), the file keeps them, and
    fwi and hp.invert refuse a layer that leaves other faces free (pml=None: none), naming the
    faces to use, before any work; a survey that records nothing is not checked."""
    from helmpinn.reference import fwi

    box = Box([0.0, 0.0], [1.0, 1.0])
    src = [hp.PointSource([0.5, 0.3], width=0.08)]
    rec = np.array([[0.2, 0.1], [0.8, 0.1]])
    free = hp.Survey.synthetic(1.0, box, src, rec, [1.5], pml=hp.PML(0.4, faces=TOP_FREE), h=1 / 20)
    every = hp.Survey.synthetic(1.0, box, src, rec, [1.5], pml=hp.PML(0.4), h=1 / 20)
    assert free.free_surface == ("ymin",) and every.free_surface == ()
    assert hp.Survey.load(free.save(tmp_path / "free.npz")).free_surface == ("ymin",)
    assert hp.Survey.load(every.save(tmp_path / "every.npz")).free_surface == ()
    assert "free_surface=('ymin',)" in repr(free)
    said = r"free surface \(u = 0\) on \['ymin'\].*faces=\('xmin', 'xmax', 'ymax'\).*--pml-faces xmin xmax ymax"
    for pml in (hp.PML(0.4), None, hp.PML(0.4, faces=("xmin", "xmax"))):
        with pytest.raises(ValueError, match=said):
            fwi(free, 1.0, domain=box, pml=pml, bounds=(0.8, 1.3), max_iter=1)
        with pytest.raises(ValueError, match=said):
            hp.invert(free, 1.0, domain=box, pml=pml, bounds=(0.8, 1.3), max_steps=1)
    with pytest.raises(ValueError, match=r"on \[\] .*PML\(width\) on every face"):
        fwi(every, 1.0, domain=box, pml=hp.PML(0.4, faces=TOP_FREE), bounds=(0.8, 1.3), max_iter=1)
    every.validate(box, None)                   # first-order absorbing faces: every face absorbs
    free.validate(box, hp.PML(0.4, faces=("ymax", "xmax", "xmin")))   # the order does not matter
    free.free_surface = None
    free.validate(box, hp.PML(0.4))


@pytest.mark.parametrize("surface, error, match", [
    (("top",), ValueError, "free_surface: 'top' is not a face's name"),
    (("ymin", "ymin"), ValueError, r"free_surface names \['ymin'\] more than once"),
    (("zmin",), ValueError, "free_surface: 'zmin' is not a face of a 2-D box"),
    (3, TypeError, "free_surface must be face names"),
])
def test_a_bad_free_surface_is_refused_naming_it(surface, error, match):
    with pytest.raises(error, match=match):
        hp.Survey([hp.PointSource([0.5, 0.5], width=0.1)], [[0.3, 0.3]], [1.0], np.ones((1, 1, 1)),
                  free_surface=surface)


# -- the command line: helmpinn invert --pml-faces -----------------------------------------------

@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    """A survey with a free surface at y = 0 (2 sources, 8 receivers, one frequency) and a
    homogeneous start on an 11 x 11 grid of the unit square."""
    d = tmp_path_factory.mktemp("inputs")
    src = [hp.PointSource([0.3, 0.4], width=0.1), hp.PointSource([0.7, 0.4], width=0.1)]
    rec = np.stack([np.linspace(0.15, 0.85, 8), np.full(8, 0.1)], axis=1)
    true = lambda x: 1.0 + 0.1 * np.exp(-((x[:, 0] - 0.5) ** 2 + (x[:, 1] - 0.6) ** 2) / 0.02)  # noqa: E731
    hp.Survey.synthetic(true, Box([0, 0], [1, 1]), src, rec, [1.0], pml=hp.PML(0.3, faces=TOP_FREE),
                        h=1 / 24).save(d / "survey.npz")
    np.save(d / "v0.npy", np.ones((11, 11)))
    return d


def _cli(files, out, *extra):
    return ["invert", "--survey", str(files / "survey.npz"), "--initial", str(files / "v0.npy"), "--spacing", "0.1",
            "--pml", "0.3", "--bounds", "0.8", "1.3", "--time-limit", "20", "--method", "fwi", "--out", str(out),
            "--max-steps", "4", "--no-plots", *extra]


@pytest.mark.parametrize("extra, match", [
    (["--pml-faces", "top"], "--pml-faces: PML: faces: 'top' is not a face's name"),
    (["--pml-faces", "xmin", "zmax"], "--pml-faces: PML: faces: 'zmax' is not a face of a 2-D box"),
    (["--pml-faces", "xmin", "xmin"], "more than once"),
    (["--pml", "0", "--pml-faces", "xmin"], "--pml-faces: given without a PML"),
])
def test_cli_refuses_bad_faces_and_writes_nothing(cli_files, tmp_path, capsys, extra, match):
    from helmpinn.cli import main

    out = tmp_path / "run"
    assert main(_cli(cli_files, out, *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err
    assert not out.exists()


def test_cli_takes_the_survey_s_free_surface_without_pml_faces(cli_files, tmp_path, capsys):
    """Without --pml-faces the layer goes on the faces the survey file records as absorbing, and
    the run's settings record them; --pml-faces naming another boundary is refused, naming it."""
    from helmpinn.cli import main

    out = tmp_path / "run"
    assert main(_cli(cli_files, out, "--max-steps", "1")) == 0
    assert json.loads((out / "metrics.json").read_text())["settings"]["pml_faces"] == list(TOP_FREE)
    capsys.readouterr()
    assert main(_cli(cli_files, tmp_path / "other", "--pml-faces", "xmin", "xmax", "ymin", "ymax")) == 2
    err = capsys.readouterr().err
    assert "free surface (u = 0) on ['ymin']" in err and "--pml-faces xmin xmax ymax" in err, err
    assert not (tmp_path / "other").exists()


def test_cli_records_the_faces_and_a_resumed_run_keeps_them(cli_files, tmp_path, capsys, monkeypatch):
    """fwi with --pml-faces, stopped by SIGTERM at iteration 2 and resumed: the report records
    the faces, the resumed run continues with them (fwi's start= refuses other settings)."""
    from helmpinn.cli import invert as cli_invert
    from helmpinn.cli import main

    out = tmp_path / "run"
    terminate_at(monkeypatch, 2)
    assert main(_cli(cli_files, out, "--pml-faces", *TOP_FREE)) == 143
    stopped = json.loads((out / "metrics.json").read_text())
    assert stopped["settings"]["pml_faces"] == list(TOP_FREE) and stopped["resumable"]
    saved = hp.reference.FWIResult.load(out / "fwi.npz").resume["settings"]
    assert saved["pml_faces"] == list(TOP_FREE)
    monkeypatch.setattr(cli_invert, "_progress", lambda entry: None)
    assert main(["invert", "--resume", str(out)]) == 0
    done = json.loads((out / "metrics.json").read_text())
    assert done["resumed"] and done["settings"]["pml_faces"] == list(TOP_FREE) and done["steps"] == 4
    # a record from before the faces (no "pml_faces") reads as every face: same settings as
    # an all-faces call's, which records None
    from helmpinn._checks import same_settings
    from helmpinn.cli.invert_options import parser
    assert parser().parse_args(["invert"]).pml_faces is None
    old = {k: v for k, v in saved.items() if k != "pml_faces"}
    same_settings("fwi", old, {**old, "pml_faces": hp.PML(0.3).faces_record(2)})
    with pytest.raises(ValueError, match="pml_faces None there"):
        same_settings("fwi", old, {**old, "pml_faces": list(TOP_FREE)})


def test_the_halfspace_source_built_in():
    """halfspace-source: its exact field solves the PDE, vanishes on the free surface, and
    fd_solve reaches it; bad options are refused naming them."""
    prob = hp.get_problem("halfspace-source")
    assert prob.pml.faces == TOP_FREE and prob.part_names == ("ymin",)
    assert math.isclose(prob.wavenumber, 3 * math.pi)
    surface = np.stack([np.linspace(-1.5, 1.5, 50), np.zeros(50)], axis=1)
    assert np.max(np.abs(prob.exact_at(surface))) < 1e-12
    x = np.random.default_rng(1).uniform([-0.9, 0.05], [0.9, 0.95], (300, 2))
    res = prob.pde_residual_fd(x, h=1e-3)
    assert np.max(np.abs(res)) < 1e-3 * prob.wavenumber ** 2 * np.max(np.abs(prob.exact_at(x)))
    xt = np.random.default_rng(0).uniform([-1, 0], [1, 1], (2000, 2))
    e = prob.exact_at(xt)
    assert np.linalg.norm(fd_solve(prob, 0.02)(xt) - e) / np.linalg.norm(e) < 5e-3
    with pytest.raises(ValueError, match="depth: expected a depth below 1"):
        hp.get_problem("halfspace-source", depth=1.2)
    with pytest.raises(ValueError, match="wavelengths: expected a positive"):
        hp.get_problem("halfspace-source", wavelengths=-1)
