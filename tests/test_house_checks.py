"""Checks the read of the Python layer found missing: when the decomposition imposes u = 0 by
its hard constraint, that an L-BFGS polish does not follow a reached target, that
Levenberg-Marquardt's per-term losses read the right rows, and fd_solve's order on 2-D Robin
faces and at corners where two kinds of condition meet."""
import json

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.training import dd_driver
from helmpinn.cli import main
from helmpinn.geometry import Box
from helmpinn.reference import fd_solve

K = 3 * np.pi   # 1.5 wavelengths across the unit square


def _box(**kw):
    opts = dict(kappa=K ** 2, source=lambda x: np.ones(len(x), complex), bcs={"*": hp.Dirichlet(0.0)})
    return hp.Problem(Box([0, 0], [1, 1]), **{**opts, **kw})


def _constrained(problem):
    return dd_driver.decomposed_settings(problem)["decomposition"]["constraint"]


def test_the_hard_constraint_only_where_every_wall_is_dirichlet_zero_and_there_is_no_data():
    """u = φ Σ ω_j N_j vanishes on every wall: right for a box whose walls are all Dirichlet(0),
    wrong (an error the training cannot remove) for a nonzero or callable value, a wall of
    another kind, a PML, or data points, which the plan must then fit by rows."""
    assert _constrained(_box()) and _constrained(_box(bcs={"*": hp.Dirichlet(0j)}))
    assert not _constrained(_box(bcs={"*": hp.Dirichlet(0.5)}))
    assert not _constrained(_box(bcs={"*": hp.Dirichlet(1e-3j)}))
    assert not _constrained(_box(bcs={"*": hp.Dirichlet(lambda x: np.zeros(len(x), complex))}))
    assert not _constrained(_box(bcs={"xmax": hp.Neumann(), "*": hp.Dirichlet(0.0)}))
    assert not _constrained(_box(bcs={"xmin": hp.Dirichlet(0.0), "*": hp.Dirichlet(2.0)}))
    data = (np.array([[0.5, 0.5]]), np.array([0.1 + 0j]))
    assert not _constrained(_box(data=data))
    # the plan without the constraint samples boundary rows; with it, none
    assert dd_driver.decomposed_settings(_box())["bc_points"] == 0
    assert dd_driver.decomposed_settings(_box(bcs={"*": hp.Dirichlet(0.5)}))["bc_points"] > 0


TINY = dict(ff_dim=4, hidden=8, layers=1, pde_points=60, sigma=0.6, eval_every=1)


def test_solve_does_not_polish_after_reaching_tol():
    """hp.solve's L-BFGS polish (``lbfgs=N``) runs after the optimiser, but not once ``tol``
    was reached: the run ends at the step that reached it."""
    p = hp.get_problem("plane1d", k=4.0)
    opts = dict(progress=False, lm={"blas_threads": 1, "stall_window": 100}, **TINY)
    reached = hp.solve(p, tol=10.0, steps=5, lbfgs=4, **opts)   # the first evaluation is below 10
    assert reached.stop_reason.startswith("target") and reached.history.step == [1], reached.history.step
    missed = hp.solve(p, tol=1e-12, steps=2, lbfgs=4, **opts)     # not reached: the polish runs
    assert missed.history.step[:2] == [1, 2] and len(missed.history.step) > 2


def test_cli_does_not_polish_after_reaching_its_target(tmp_path):
    """``--target`` reached: no ``--lbfgs`` polish (metrics' "lbfgs" is None, the history ends
    at the optimiser's last step); not reached: the polish's iterations follow."""
    args = ["train", "--problem", "plane1d", "--k", "4", "--optimizer", "adam", "--hidden", "8", "--layers", "1",
            "--fourier", "4", "--points", "40", "--eval-every", "1", "--quiet", "--lbfgs", "4"]
    assert main([*args, "--steps", "5", "--target", "10", "--out", str(tmp_path / "hit")]) == 0
    hit = json.loads((tmp_path / "hit" / "metrics.json").read_text())
    assert hit["lbfgs"] is None and len(hit["history"]["loss"]) == 1, (hit["lbfgs"], hit["history"]["loss"])
    assert main([*args, "--steps", "2", "--target", "1e-12", "--out", str(tmp_path / "miss")]) == 0
    miss = json.loads((tmp_path / "miss" / "metrics.json").read_text())
    assert miss["lbfgs"]["iterations"] >= 1
    assert len(miss["history"]["loss"]) == 2 + miss["lbfgs"]["iterations"]


def test_lm_records_each_term_from_its_own_rows():
    """LMDriver splits the residual rows into the PDE, data and boundary terms by the batch's
    sizes (in that order): the terms it records equal the core's own breakdown at the same
    parameters and points. Counts, weights and residual sizes differ between the terms, so rows
    read from another term's range give other numbers."""
    g = lambda x, n: 0.3 + 0.1j * x[:, 0]   # noqa: E731
    p = hp.Problem(Box([0, 0], [1, 1]), kappa=9.0, source=lambda x: 5.0 * np.exp(1j * x[:, 0]),
                   bcs={"xmin": hp.Dirichlet(2.0), "xmax": hp.Robin(1.0 + 1j, g), "*": hp.Neumann()},
                   data=(np.array([[0.3, 0.4], [0.6, 0.2], [0.5, 0.5]]), np.array([1j, -4.0, 0.5])))
    model = hp.Model.create(2, 4, 8, 1, dtype="float64", seed=1)
    tr = hp.Trainer(p, model, pde_points=50, bc_points=24, resample_every=0, eval_every=0, progress=False,
                    weights={"pde": 0.5, "data": 3.0, "bc": 2.0})
    tr.fit(2, optimizer="lm")
    sizes = tr.batch.sizes
    assert list(sizes) == ["pde", "data", "bc"] and len(set(sizes.values())) == 3, sizes
    loss, terms = tr.value_and_grad()
    h = tr.history
    recorded = {"pde": h.pde[-1], "data": h.data[-1], "bc": h.bc[-1]}
    assert len({round(v, 6) for v in recorded.values()}) == 3, recorded
    for t in ("pde", "data", "bc"):
        assert recorded[t] == pytest.approx(terms[t], rel=1e-9), (t, recorded, terms)
    assert h.loss[-1] == pytest.approx(loss, rel=1e-9)


def _robin_box_problem(bcs_kind):
    """A plane wave u = exp(i(k₁x + k₂y)) on the unit square; on a Robin face
    ∂u/∂n + αu = g with g from u (α varies along the face); ``bcs_kind``: "mixed" (Dirichlet on
    xmin, Robin, Neumann and Sommerfeld on the others: corners where Dirichlet meets Robin and
    where two Robin faces meet) or "robin" (every face Robin: four Robin-Robin corners)."""
    k1, k2 = 5.0, 3.0
    k = np.hypot(k1, k2)
    u = lambda x: np.exp(1j * (k1 * x[:, 0] + k2 * x[:, 1]))   # noqa: E731

    def g_for(alpha):
        a = alpha if callable(alpha) else (lambda x: alpha + 0 * x[:, 0])
        return lambda x, n: (1j * (k1 * n[:, 0] + k2 * n[:, 1]) + a(x)) * u(x)

    vary = lambda x: 1.0 + 0.5j + x[:, 0] * x[:, 1]   # noqa: E731
    bcs = {"xmax": hp.Robin(vary, g_for(vary)), "ymin": hp.Neumann(g_for(0.0)),
           "ymax": hp.Sommerfeld(k, g_for(-1j * k))}
    bcs["xmin"] = hp.Dirichlet(u) if bcs_kind == "mixed" else hp.Robin(2.0 - 1j, g_for(2.0 - 1j))
    return hp.Problem(Box([0, 0], [1, 1]), kappa=k * k, bcs=bcs, exact=u)


@pytest.mark.parametrize("kind", ["mixed", "robin"])
def test_fd_solve_is_fourth_order_on_2d_robin_faces_and_mixed_corners(kind):
    """Halving h divides the nodes' error by about 16 with Robin faces (a one-sided fourth-order
    normal derivative) on two or four sides and corners where Dirichlet meets Robin or two Robin
    faces meet; a third-order wall derivative would show as a ratio near 8."""
    p = _robin_box_problem(kind)
    errors = []
    for h in (1 / 24, 1 / 48):
        sol = fd_solve(p, h)
        exact = p.exact_at(sol.points)
        errors.append(np.linalg.norm(sol.values.ravel() - exact) / np.linalg.norm(exact))
    assert 12 < errors[0] / errors[1] < 20 and errors[1] < 1e-4, errors
