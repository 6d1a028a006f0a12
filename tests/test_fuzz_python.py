"""Property-based fuzzing (hypothesis) of the Python layer's public classes and functions added
since the last round: PML and a Problem around it, Batch, LevenbergMarquardt's options,
distributed.value_and_grad, GridField, PointSource and FreeSpaceSource, fd_solve (its h, order,
ordering and domains, under a low memory limit).

Each argument starts valid and is, at random, replaced by a hostile variant (test_fuzz.hostile
for arrays; NaN, ±Inf, 0, negative, huge, wrong types for numbers). A call may only return or
raise TypeError, ValueError, MemoryError, RuntimeError, OverflowError or NotImplementedError with
a message; when it returns, what it returns is finite where the inputs were.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from test_fuzz import FUZZ, caller, hostile

import helmpinn as hp
from helmpinn.problems.geometry import Box, BoxMinusObstacle, Interval

ALLOWED = (TypeError, ValueError, MemoryError, RuntimeError, OverflowError, NotImplementedError)
NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e-300, 1e300, 2**70, "x",
                           None, True, [1.0], 0.5, 3.0])


def number(draw, valid):
    """``valid`` or, with probability ~1/2, a hostile number."""
    return valid if draw(st.booleans()) else draw(NUMBERS)


call = caller(ALLOWED)


@FUZZ
@given(data=st.data())
def test_fuzz_pml_and_problem(data):
    draw = data.draw
    how, pml = call(hp.PML, number(draw, 0.5), number(draw, None), number(draw, 2.0))
    if how != "ok":
        return
    kappa = number(draw, 16.0)
    dim = draw(st.sampled_from([1, 2]))
    domain = Interval(0.0, 1.0) if dim == 1 else Box([0, 0], [1, 1])
    how, problem = call(hp.Problem, domain, kappa, bcs={}, pml=pml)
    if how != "ok":
        return
    how, ts = call(problem.sample, 16, 4, np.random.default_rng(0))
    if how == "ok" and ts.a_pde is not None:
        assert np.all(np.isfinite(ts.a_pde)) and np.all(np.isfinite(ts.b_pde))


@FUZZ
@given(data=st.data(), dt=st.sampled_from(["float32", "float64", None, "int32"]))
def test_fuzz_batch(data, dt):
    draw = data.draw
    rng = np.random.default_rng(1)
    n = draw(st.sampled_from([0, 1, 5]))
    arrays = {"x_pde": rng.uniform(size=(n, 2)), "kappa": 4.0, "x_data": rng.uniform(size=(3, 2)),
              "y": rng.uniform(size=(3, 2)), "a_pde": rng.uniform(size=(n, 2, 2))}
    chosen = {k: (hostile(draw, v) if isinstance(v, np.ndarray) else number(draw, v))
              for k, v in arrays.items() if draw(st.booleans())}
    how, batch = call(hp.Batch, dtype=dt, **chosen)
    if how != "ok":
        return
    ws = hp.Workspace(hp.ModelSpec(2, 3, 5, 1), 8, batch.dtype.name)
    theta = hp.init_params(ws.spec, batch.dtype.name, seed=0)
    grad = np.zeros_like(theta)
    call(ws.value_and_grad, theta, grad, batch=batch)


def _tiny_residuals():
    from helmpinn.optim.lm import CoreResiduals

    problem = hp.get_problem("plane1d", k=5)
    ts = problem.sample(30, 2, np.random.default_rng(2))
    ws = hp.Workspace(hp.ModelSpec(1, 4, 8, 1), 64, "float64")
    return CoreResiduals(ws, ts.to_batch("float64"), {"pde": 1 / 25, "data": 12.5, "bc": 0.25})


@FUZZ
@given(data=st.data())
def test_fuzz_levenberg_marquardt_options(data):
    draw = data.draw
    options = {
        "solver": draw(st.sampled_from(["auto", "primal", "dual", "cg", "qr", None])),
        "damping": draw(st.sampled_from(["identity", "marquardt", "x"])),
        "update": draw(st.sampled_from(["fixed", "nielsen", "x"])),
        "lam": number(draw, 1e-3), "max_trials": number(draw, 10), "cg_tol": number(draw, 1e-8),
        "cg_maxiter": number(draw, 50), "max_matrix_bytes": number(draw, 2 << 30),
        "gram": draw(st.sampled_from(["float64", "float32", "float16"])),
        "geodesic": draw(st.booleans()), "refine_maxiter": number(draw, 20),
    }
    options = {k: v for k, v in options.items() if draw(st.booleans())}
    how, lm = call(hp.LevenbergMarquardt, _tiny_residuals(), **options)
    if how != "ok":
        return
    theta = hp.init_params(hp.ModelSpec(1, 4, 8, 1), "float64", seed=0)
    how, info = call(lm.step, theta)
    if how == "ok":
        assert math.isfinite(info.loss) and np.all(np.isfinite(theta))


@FUZZ
@given(data=st.data())
def test_fuzz_distributed_value_and_grad(data):
    mpi = pytest.importorskip("mpi4py.MPI")
    from helmpinn import distributed

    draw = data.draw
    spec = hp.ModelSpec(2, 3, 5, 1)
    ws = hp.Workspace(spec, 8, "float64")
    theta = hp.init_params(spec, "float64", seed=0)
    grad = np.zeros_like(theta)
    rng = np.random.default_rng(3)
    kw = {"x_pde": hostile(draw, rng.uniform(size=(4, 2))), "kappa": number(draw, 4.0)}
    if draw(st.booleans()):
        kw["counts"] = draw(st.sampled_from([{"pde": 4}, {"pde": 2}, {"pde": -1}, {"x": 1}, "x"]))
    if draw(st.booleans()):
        kw["batch"] = draw(st.sampled_from([{}, hp.Batch(x_pde=rng.uniform(size=(2, 2)), kappa=1.0), 3]))
    how, loss = call(distributed.value_and_grad, ws, mpi.COMM_SELF, theta, grad, **kw)
    def moderate(v) -> bool:
        try:
            a = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            return False
        return bool(np.all(np.abs(a) < 1e100))   # NaN and Inf fail this too

    # NaN in, NaN out unless check_finite=True; 1e300 overflows the loss
    if how == "ok" and moderate(kw["x_pde"]) and moderate(kw["kappa"]):
        assert math.isfinite(loss)


@FUZZ
@given(data=st.data())
def test_fuzz_media_and_sources(data):
    from helmpinn.problems.sources import FreeSpaceSource

    draw = data.draw
    values = hostile(draw, np.linspace(1.0, 2.0, 30).reshape(5, 6))
    how, field = call(hp.GridField, values, number(draw, 0.0), number(draw, 0.25))
    if how == "ok":
        x = np.random.default_rng(4).uniform(0.0, 1.0, size=(7, 2))
        how, v = call(field, x)
        if how == "ok":
            assert np.all(np.isfinite(v))
    how, src = call(hp.PointSource, [number(draw, 0.5), 0.5], number(draw, 1.0), number(draw, None))
    how, bg = call(FreeSpaceSource, [0.1, number(draw, 0.2)], number(draw, 3.0), number(draw, 1.0))
    if how == "ok":
        how, u = call(bg, np.array([[0.5, 0.5], [0.9, 0.1]]))
        if how == "ok":
            assert np.all(np.isfinite(u))


@FUZZ
@given(data=st.data())
def test_fuzz_fd_solve(data):
    from helmpinn.reference import fd_solve

    draw = data.draw
    problem = hp.get_problem("plane1d", k=draw(st.sampled_from([1.0, 5.0])))
    how, sol = call(fd_solve, problem, number(draw, 0.05), order=draw(st.sampled_from([2, 4, 3, "4"])))
    if how == "ok":
        assert np.all(np.isfinite(sol.values))


#: Spacings of grids from a few nodes a side to more than the limit allows (2-D and 3-D), and
#: hostile ones.
FD_H = st.sampled_from([1 / 12, 0.1, 0.05, 0.02, 1e-3])
FD_BAD_H = st.sampled_from([0.5, 1e-9, 1e-300, math.nan, -0.1, 0.0, math.inf, 2**70, "x", None, True, [0.1, 0.2],
                            [0.1, 0.2, 0.3, 0.4], [[0.1]], np.array([0.1, math.nan, 0.1])])
FD_FUZZ = hypothesis_settings(max_examples=30, deadline=None, derandomize=True,
                              suppress_health_check=list(HealthCheck))
#: The memory fd_solve may use under the fuzz (HELMPINN_MEMORY_LIMIT): grids of a few thousand
#: nodes at most, so that every accepted call is quick and a finer one is refused, not run.
FD_LIMIT = 16 << 20


def _fd_domain(draw, hostile_domain):
    """A domain fd_solve takes (an interval, a 2-D or 3-D box, of a drawn size) or, where
    ``hostile_domain``, one it does not (a disk, a point cloud), a degenerate box, or a box with
    a hole (taken with a Dirichlet condition on the hole, refused with a Robin one)."""
    from helmpinn.problems.geometry import Ball, BoxMinusBall, PointCloud

    dim = draw(st.sampled_from([1, 2, 3]))
    side = draw(st.sampled_from([1.0, 0.5, 2.0]))
    kind = draw(st.sampled_from(["ball", "hole", "cloud", "flat"])) if hostile_domain else "box"
    if kind == "ball":
        return dim, Ball(np.zeros(max(dim, 2)), side)
    if kind == "hole":
        return dim, BoxMinusBall(Box(np.zeros(2), side * np.ones(2)), Ball(side / 2 * np.ones(2), side / 4))
    if kind == "cloud":
        return dim, PointCloud(np.random.default_rng(0).uniform(size=(20, dim)))
    hi = side * np.ones(dim)
    if kind == "flat":
        hi[-1] = 1e-12
    return dim, Interval(0.0, hi[0]) if dim == 1 else Box(np.zeros(dim), hi)


@FD_FUZZ
@given(data=st.data())
def test_fuzz_fd_solve_arguments(data):
    """fd_solve's h (a number, one per axis, or hostile), order, ordering and domain (intervals
    and boxes in 1 to 3 dimensions, with or without a PML or walls; shapes it does not
    support), one hostile at a time, under a low HELMPINN_MEMORY_LIMIT: only Python exceptions
    with fd_solve's own message, and an accepted grid is one whose estimate is within the
    limit (issue 61: fd_solve's memory under the one limit)."""
    from helmpinn.memory import fd_memory_estimate
    from helmpinn.reference import fd_solve

    draw = data.draw
    which = draw(st.sampled_from(["none", "none", "none", "h", "h", "order", "ordering", "domain"]))
    dim, domain = _fd_domain(draw, which == "domain")
    pml = draw(st.sampled_from([None, 0.2, 0.3]))
    # walls for a domain without a PML (off every box resonance at this frequency)
    wall = draw(st.sampled_from([hp.Dirichlet(0.0), hp.Sommerfeld(1.6 * math.pi)]))
    walls = tuple(domain.part_names) if pml is None else tuple(p for p in domain.part_names if p == "scatterer")
    bcs = {walls: wall} if walls else None
    how, problem = call(hp.Problem, domain, frequency=0.8, velocity=1.0, bcs=bcs,
                        pml=None if pml is None else hp.PML(pml))
    if how != "ok":
        return
    h = draw(FD_H)
    if draw(st.booleans()):
        h = [h * draw(st.sampled_from([1.0, 1.5])) for _ in range(dim)]   # one per axis
    h = draw(FD_BAD_H) if which == "h" else h
    order = draw(st.sampled_from([3, "4", None, 4.5, 0])) if which == "order" else draw(st.sampled_from([2, 4]))
    ordering = draw(st.sampled_from(["nope", None, 4])) if which == "ordering" else \
        draw(st.sampled_from(["MMD_AT_PLUS_A", "COLAMD", "NATURAL"]))
    with _memory_limit(str(FD_LIMIT)):
        how, sol = call(fd_solve, problem, h, order=order, ordering=ordering)
    if how == "raised":   # a clear message: fd_solve's own, naming what is wrong
        assert str(sol).startswith("fd_solve"), repr(sol)
    if how == "ok":   # a box with a hole is solved where the hole is sound-soft (Dirichlet)
        assert which in ("none", "h") or (isinstance(domain, BoxMinusObstacle) and isinstance(wall, hp.Dirichlet))
        assert fd_memory_estimate(sol.values.size, dim) <= FD_LIMIT
        assert np.all(np.isfinite(sol.values))


COUNTS = st.sampled_from([1, 2, 3, 0, -1, 1.5, 2**40, "x", None, True, math.nan, [2]])
SMALL = hypothesis_settings(
    max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def _memory_limit(value):
    """helmpinn.memory's limit set to ``value`` for the block."""
    from helmpinn.memory import LIMIT_VARIABLE

    old = os.environ.get(LIMIT_VARIABLE)
    os.environ[LIMIT_VARIABLE] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[LIMIT_VARIABLE]
        else:
            os.environ[LIMIT_VARIABLE] = old


def _count(draw, valid):
    return valid if draw(st.booleans()) else draw(COUNTS)


@SMALL
@given(data=st.data())
def test_fuzz_decomposed_model(data):
    """DecomposedModel create / predict / save / load with hostile arguments and files: only
    Python exceptions with a message, never a hang or an unbounded allocation (a grid's count
    is checked against MAX_SUBDOMAINS and the parameters before anything is enumerated)."""
    import json
    import tempfile

    from helmpinn.models.decomposition import BoxConstraint, DecomposedModel

    draw = data.draw
    which = draw(st.sampled_from(["none", "none", "none", "none", "lo", "hi", "grid", "overlap", "ff", "hidden",
                                  "seed", "scale", "other box", "x", "chunk"]))

    def arg(name, valid, hostile_value):
        return hostile_value(draw) if which == name else valid

    lo = [arg("lo", 0.0, lambda d: d(NUMBERS)), 0.0]
    hi = [1.0, arg("hi", 1.0, lambda d: d(NUMBERS))]
    how, c = call(lambda: BoxConstraint(lo, [2.0, 1.0] if which == "other box" else hi,
                                        arg("scale", 0.1, lambda d: d(NUMBERS))))
    if how != "ok":
        return
    how, model = call(DecomposedModel.create, lo, hi, [(arg("grid", 2, lambda d: d(COUNTS)), 3)],
                      overlap=arg("overlap", 0.5, lambda d: d(NUMBERS)), ff_dim=arg("ff", 2, lambda d: d(COUNTS)),
                      hidden_dim=arg("hidden", 3, lambda d: d(COUNTS)), constraint=c,
                      seed=arg("seed", 0, lambda d: d(COUNTS)))
    if how != "ok":
        return
    x = np.array([[0.2, 0.3], [0.9, 0.1], [0.0, 1.0]])
    how, u = call(model.predict, hostile(draw, x) if which == "x" else x,
                  chunk=arg("chunk", 2, lambda d: d(COUNTS)))
    if how == "ok":
        assert u.dtype == np.complex128 and np.all(np.isfinite(u))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.npz")
        model.save(path)
        cfg = model.config()
        params = model.params
        field = draw(st.sampled_from(["none", "lo", "hi", "grid", "overlap", "specs", "constraint", "params",
                                      "kind", "levels"]))
        bad = draw(st.sampled_from([math.nan, math.inf, -1, 0, 2**40, "x", None, [], {}, [1, 2, 3], 1.5]))
        if field in ("lo", "hi", "kind", "levels", "constraint"):
            cfg = {**cfg, field: bad}
        elif field in ("grid", "overlap"):
            cfg["levels"] = [{**cfg["levels"][0], field: bad}]
        elif field == "specs":
            cfg["specs"] = [[2, bad, 3, 1]]
        elif field == "params":
            params = np.full(draw(st.sampled_from([0, 1, len(params)])), bad if isinstance(bad, float) else 1.0)
        with open(path, "wb") as fh:
            np.savez(fh, params=params, config=np.array(json.dumps(cfg, default=str)))
        how, back = call(DecomposedModel.load, path)
        if how == "ok":
            assert np.all(np.isfinite(back.params))
        else:
            assert isinstance(back, ValueError) and "m.npz" in str(back)


@functools.lru_cache(maxsize=1)
def _one_wavelength_box():
    return hp.get_problem("box-source", wavelengths=1.0)


@SMALL
@given(data=st.data())
def test_fuzz_solve_arguments(data):
    """hp.solve's arguments and decomposition entries, hostile: refused with a message before
    anything is trained, or a run of at most one step on a one-subdomain model; a run over the
    memory limit is refused by its estimate (helmpinn.memory), not by the machine."""
    import warnings

    draw = data.draw
    problem = _one_wavelength_box()
    hostile_values = {
        "ff_dim": COUNTS, "hidden": COUNTS, "points_per_wavelength": NUMBERS, "overlap": NUMBERS,
        "grids": st.sampled_from([[[2**20, 2**20]], [[1.5, 1]], [[0, 1]], "x", [[1]], [[400, 400]], [], 3]),
        "constraint": st.sampled_from(["no", 1, 0.0, [True]]), "coarse_level": st.sampled_from([0, "yes", None]),
        "tol": NUMBERS, "steps": st.sampled_from([-1, 1.5, "x", None, math.nan]),
        "pde_points": st.sampled_from([0, 2**40, 1e300, -3, 2.5, "x"])}
    which = draw(st.sampled_from(["none", "none", "none", *hostile_values]))
    valid = {"ff_dim": 2, "hidden": 4, "grids": None, "points_per_wavelength": 25.0, "overlap": 0.6,
             "constraint": None, "coarse_level": False, "tol": None, "steps": 1, "pde_points": 500}
    given_ = {k: draw(hostile_values[k]) if k == which else v for k, v in valid.items()}
    decomposition = {k: given_.pop(k) for k in ("ff_dim", "hidden", "grids", "points_per_wavelength", "overlap",
                                                 "constraint", "coarse_level")}
    with warnings.catch_warnings(), _memory_limit("256M"):
        warnings.simplefilter("ignore")
        how, sol = call(hp.solve, problem, progress=False, model="decomposed", decomposition=decomposition,
                        **given_)
    if how == "ok":
        assert sol.history.loss and np.all(np.isfinite(sol.history.loss))
