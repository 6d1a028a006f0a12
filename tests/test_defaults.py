"""helmpinn.defaults: the rules that give every problem, built-in or a user's, its loss weights,
points and network (the module docstring states them)."""
import math

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.defaults import (ADAM_POINTS_PER_WAVELENGTH, BOUNDARY_SHARE, LM_POINTS_PER_WAVELENGTH, auto_weights,
                               default_settings, fourier_sigma, lm_settings, run_settings, wavelengths,
                               wavelengths_across)
from helmpinn.problems.geometry import Box, BoxMinusBall, Disk


def _mixed_problem(k):
    """[0, 1]² with every kind of condition and zero data: Dirichlet (x = 0), Neumann (x = 1),
    Sommerfeld (y = 0 and y = 1); no source, so the residuals of a field e are those of the
    error e added to an exact solution."""
    return hp.Problem(Box([0, 0], [1, 1]), kappa=k * k,
                      bcs={"xmin": hp.Dirichlet(0.0), "xmax": hp.Neumann(), ("ymin", "ymax"): hp.Sommerfeld(k)})


def _weighted_terms(p, e):
    """Each term's weighted mean square for the field e (a relative error of size 1)."""
    w = auto_weights(p)
    x = p.domain.sample_interior(2000, np.random.default_rng(1))
    pde = w["pde"] * np.mean(np.abs(p.pde_residual_fd(x, h=1e-4, u=e)) ** 2)
    bc = p.bc_residuals_fd(n=2000, h=1e-6, u=e)
    data = w["data"] * np.mean(np.abs(bc["xmin"]) ** 2)
    neumann = w["bc"] * np.mean(np.abs(bc["xmax"]) ** 2)
    sommerfeld = w["bc"] * np.mean(np.abs(np.concatenate([bc["ymin"], bc["ymax"]])) ** 2)
    return np.array([pde, data, neumann, sommerfeld])


@pytest.mark.parametrize("k", [4.0, 8.0, 32.0])
def test_weights_put_every_term_on_the_same_scale_for_the_same_error(k):
    """An error e of relative size 1 on the wavelength's scale (a plane wave at 1.5 k, off the
    axes) costs about k² in the PDE term (residual 1.25 k² e, weight 1/k²) and BOUNDARY_SHARE
    (1/2) of that in every boundary term: the Dirichlet data term (e, weight k²/2), Neumann
    (about k e, weight 1/2) and Sommerfeld (about k e, weight 1/4). With the former weights
    (data 100, bc 100/k²) the spread of these ratios is 16 at k = 4 and 8 at k = 32."""
    p = _mixed_problem(k)
    d = 1.5 * k * np.array([math.cos(0.3), math.sin(0.3)])
    terms = _weighted_terms(p, lambda x: np.exp(1j * (x @ d))) / [1, BOUNDARY_SHARE, BOUNDARY_SHARE, BOUNDARY_SHARE]
    assert terms.max() / terms.min() < 4, terms
    assert np.all((terms / k**2 > 0.2) & (terms / k**2 < 5)), terms / k**2   # about k² e² each
    w = auto_weights(p)
    assert w["pde"] == pytest.approx(1 / k**2) and w["data"] == pytest.approx(k**2 / 2)
    # ᾱ² over the Robin sides by measure: one Neumann side (|α| = 0), two Sommerfeld (|α| = k)
    assert w["bc"] == pytest.approx(0.5 / (1 + 2 / 3), rel=0.1)


def test_weights_of_each_boundary_kind():
    box = Box([0, 0], [2, 2])
    k = 5.0
    neumann = hp.Problem(box, kappa=k * k, bcs={"*": hp.Neumann()})
    sommerfeld = hp.Problem(box, kappa=k * k, bcs={"*": hp.Sommerfeld(k)})
    local = hp.Problem(box, kappa=k * k, bcs={"*": hp.Sommerfeld(lambda x: np.full(len(x), k))})
    dirichlet = hp.Problem(box, kappa=k * k, bcs={"*": hp.Dirichlet(0)})
    assert auto_weights(neumann) == pytest.approx({"pde": 1 / k**2, "data": k**2 / 2, "bc": 0.5})
    assert auto_weights(sommerfeld)["bc"] == pytest.approx(0.25)
    assert auto_weights(local)["bc"] == pytest.approx(0.25)      # α given as a callable
    assert auto_weights(dirichlet)["data"] == pytest.approx(k**2 / 2)
    # scatter-hard takes the rule's weights (half its former hand-set hints data k², bc 1)
    assert auto_weights(hp.get_problem("scatter-hard", k=3.0)) == pytest.approx({"pde": 1 / 9, "data": 4.5, "bc": 0.5})
    # hints still replace an entry
    hinted = hp.Problem(box, kappa=k * k, bcs={"*": hp.Neumann()}, hints={"weights": {"bc": 0.1}})
    assert auto_weights(hinted)["bc"] == 0.1


def test_wavelengths_count_the_sampled_domain_with_its_layer():
    k = 2 * math.pi                          # wavelength 1
    box = Box([-1, -1], [1, 1])
    plain = hp.Problem(box, kappa=k * k, bcs={"*": hp.Dirichlet(0)})
    layered = hp.Problem(box, kappa=k * k, pml=hp.PML(1.0))
    np.testing.assert_allclose(wavelengths(plain), [2, 2])
    np.testing.assert_allclose(wavelengths(layered), [4, 4])
    # a wavenumber too small for the domain counts as half a wave across it
    tiny = hp.Problem(box, kappa=1e-6, bcs={"*": hp.Dirichlet(0)})
    np.testing.assert_allclose(wavelengths(tiny), [0.5, 0.5])
    assert fourier_sigma(plain) == pytest.approx(k / (2 * math.pi * math.sqrt(2)))


def test_wavelengths_across_is_the_geometric_mean_and_sizes_lms_network():
    """An elongated box counts by its area in square wavelengths: a 2.4 × 0.6 duct at
    wavelength 1/2.2 (5.28 × 1.32 wavelengths) is 2.64 across, and gets the network of a square
    of 2.64 (m 16, 2 × 32 without a PML), not that of a square of 5.28 (m 32, 2 × 64: a dense LM
    system over the memory budget, so Adam and matrix-free LM; 0.23 against 1.3e-4 after 120 s
    with m 24, 2 × 48, docs/benchmarks-archive.md "Elongated domains"; m 16, 2 × 32 reached
    8.7e-5 in 119 s on busy cores where m 24, 2 × 48 was at 0.27 after 101)."""
    k = 2.2 * 2 * math.pi
    duct = hp.Problem(Box([0, 0], [2.4, 0.6]), kappa=k * k, bcs={"*": hp.Sommerfeld(k)})
    np.testing.assert_allclose(wavelengths(duct), [5.28, 1.32])
    assert wavelengths_across(duct) == pytest.approx(math.sqrt(5.28 * 1.32))
    s = run_settings(duct, "auto")
    assert (s["ff_dim"], s["hidden"], s["warm_start"]) == (16, 32, 0) and s["lm"]["solver"] != "cg"
    assert s["pde_points"] == 5500        # 27² × 6.97 square wavelengths, to a multiple of 500
    cube = hp.Problem(Box([0, 0, 0], [2, 1, 0.5]), kappa=k * k, bcs={"*": hp.Dirichlet(0)})
    assert wavelengths_across(cube) == pytest.approx(2.2)
    assert wavelengths_across(_square(k, side=3.0, dim=1)) == pytest.approx(6.6)
    strip = hp.Problem(Box([0, 0], [9.0, 0.1]), kappa=k * k, bcs={"*": hp.Sommerfeld(k)})   # 19.8 × 0.22
    assert wavelengths_across(strip) == pytest.approx(math.sqrt(19.8))          # the thin side counts as 1


def _square(k, side=1.0, dim=2):
    lo, hi = [0.0] * dim, [side] * dim
    dom = hp.geometry.Interval(0.0, side) if dim == 1 else Box(lo, hi)
    return hp.Problem(dom, kappa=k * k, bcs={"*": hp.Dirichlet(0)})


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_points_and_network_grow_with_the_wavelengths(dim):
    """Points: ppw^d per cubic wavelength (ppw by dimension, stated in the module), never below
    the floor; LM's network never shrinks as the wavelengths grow; the same k on a larger domain
    gets more points."""
    ks = [1.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0][: 7 if dim < 3 else 5]
    adam = [default_settings(_square(k, dim=dim))["pde_points"] for k in ks]
    lm = [lm_settings(_square(k, dim=dim)) for k in ks]
    sizes = [hp.ModelSpec(dim, s["ff_dim"], s["hidden"], s["layers"]).num_params for s in lm]
    assert adam == sorted(adam) and [s["pde_points"] for s in lm] == sorted(s["pde_points"] for s in lm)
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
    assert adam[-1] > adam[0] and lm[-1]["pde_points"] > lm[0]["pde_points"]
    for k, a, s in zip(ks, adam, lm):
        cells = (k / (2 * math.pi)) ** dim
        assert a >= ADAM_POINTS_PER_WAVELENGTH[dim] ** dim * cells
        assert s["pde_points"] >= LM_POINTS_PER_WAVELENGTH[dim] ** dim * cells
        if dim > 1:   # R = 2 × points residuals above the P parameters
            assert 2 * s["pde_points"] > 2 * hp.ModelSpec(dim, s["ff_dim"], s["hidden"], s["layers"]).num_params
    k = 20.0
    assert lm_settings(_square(k, side=2.0, dim=dim))["pde_points"] > lm_settings(_square(k, dim=dim))["pde_points"]


def test_no_built_in_carries_hints():
    """Every built-in trains on the defaults derived from it, as a user's problem does."""
    names = [name for name, _ in hp.list_problems()]
    assert {"scatter-hard", "scatter-soft", "box-source", "free-source"} <= set(names)
    assert {name: hp.get_problem(name).hints for name in names} == {name: {} for name in names}


def test_a_users_problem_gets_what_the_built_in_gets():
    """The sound-hard cylinder written by hand with Problem (no hints) gets every setting the
    built-in gets: the built-ins carry no hints."""
    k, radius = 2.0, math.pi / 4
    dom = BoxMinusBall(Box([-math.pi, -math.pi], [math.pi, math.pi]), Disk((0.0, 0.0), radius))
    user = hp.Problem(dom, kappa=k * k, pml=hp.PML(1.0),
                      bcs={"scatterer": hp.Neumann(lambda x, n: -1j * k * n[:, 0] * np.exp(1j * k * x[:, 0]))})
    built = hp.get_problem("scatter-hard")
    assert built.hints == {} and user.hints == {}
    assert auto_weights(user) == auto_weights(built)
    for optimizer in ("adam", "lm", "auto"):
        assert run_settings(user, optimizer) == run_settings(built, optimizer)
    u = run_settings(user, "lm")
    assert (u["ff_dim"], u["hidden"]) == (24, 48)    # 2.6 wavelengths across the box and its layer
    assert u["lm"]["gram"] == "float32" and run_settings(user, "adam")["steps"] == 10000   # the PML's rules
    plain = hp.get_problem("dirichlet2d")
    assert run_settings(plain, "lm")["lm"]["gram"] == "float64" and run_settings(plain, "adam")["steps"] == 2000


def test_lm_defaults_is_the_rule():
    p = hp.get_problem("dirichlet2d")
    assert hp.optim.lm.lm_defaults(p) == lm_settings(p)


def test_levenberg_marquardt_weights_its_boundary_rows_at_the_pde_cost():
    """LM's runs weight every boundary term at the PDE term's cost for the same error (share 1),
    Adam's at half of it: scatter-hard's LM run gets data k², bc 1 (its weights when LM was
    measured below 1e-3 after 47 iterations; half of them took 59), dirichlet2d's Adam run k²/2."""
    import helmpinn as hp
    from helmpinn.defaults import BOUNDARY_SHARE, LM_BOUNDARY_SHARE, auto_weights, run_settings

    assert (BOUNDARY_SHARE, LM_BOUNDARY_SHARE) == (0.5, 1.0)
    scatter = hp.get_problem("scatter-hard")
    k = scatter.wavenumber
    assert run_settings(scatter, "lm")["weights"] == pytest.approx({"pde": 1 / k**2, "data": k**2, "bc": 1.0})
    box = hp.get_problem("dirichlet2d")
    assert run_settings(box, "adam")["weights"] == pytest.approx(auto_weights(box))
    assert run_settings(box, "lm")["weights"]["data"] == pytest.approx(2 * auto_weights(box)["data"])


def test_lms_smallest_network_reaches_three_wavelengths_without_a_pml():
    """LM's network of 2 × 32 on 16 frequencies up to 3 wavelengths across without a PML (the
    waveguide, 1.5 × 6 wavelengths, 3 across; heterogeneous2d, 2.8), 2.5 with one (the
    cylinders, 2.6 across, keep 2 × 48 on 24): on the first two the larger network's steps cost
    4.5 times as much and lowered the error no faster."""
    from helmpinn.defaults import wavelengths_across

    guide = hp.get_problem("waveguide")
    assert wavelengths_across(guide) == pytest.approx(3.0)
    for name in ("waveguide", "heterogeneous2d", "scatter-hard"):
        s = run_settings(hp.get_problem(name), "lm")
        assert (s["ff_dim"], s["hidden"]) == ((24, 48) if name == "scatter-hard" else (16, 32)), name
    longer = run_settings(hp.get_problem("waveguide", length=1.1), "lm")   # 3.1 across
    assert (longer["ff_dim"], longer["hidden"]) == (24, 48)


def test_the_lm_memory_rule():
    """defaults.lm_memory_rule: the smaller dense system first (primal over MPI), the other where
    the first does not fit, else matrix-free CG."""
    from helmpinn.defaults import lm_memory_rule

    need = {"primal": 10, "dual": 20}.get
    assert lm_memory_rule(5, 8, need, 10) == "primal"         # R >= P: primal first
    assert lm_memory_rule(5, 8, need, 9) == "cg"
    assert lm_memory_rule(8, 5, need, 20) == "dual"           # R < P: dual first
    assert lm_memory_rule(8, 5, need, 19) == "primal"         # ... the other where it does not fit
    assert lm_memory_rule(8, 5, need, 9) == "cg"
    assert lm_memory_rule(8, 5, {"primal": 10, "dual": 1}.get, 5, ranks=2) == "cg"   # over MPI primal only


def test_lm_and_the_plan_take_their_solver_by_the_one_rule():
    """LM's "auto" (optim.lm.choose_solver) is the rule with LM's memory estimate; the plan's
    "auto" (run_settings) is the rule with the whole dense system, 8 (P·R + P²) bytes: dense LM
    at exactly that budget, the Adam warm start and CG one byte below."""
    from helmpinn.defaults import ADAM_STEPS, lm_memory_rule, run_settings
    from helmpinn.optim.lm import choose_solver, memory_estimate

    rng = np.random.default_rng(5)
    for _ in range(300):
        P, R, budget, ranks = int(rng.integers(1, 5000)), int(rng.integers(1, 30000)), int(2 ** rng.uniform(16, 32)), \
            int(rng.choice([1, 2]))
        assert choose_solver(P, R, "auto", max_matrix_bytes=budget, ranks=ranks, gram="float32") == lm_memory_rule(
            P, R, lambda s: memory_estimate(P, R, s, ranks=ranks, gram="float32"), budget, ranks)
    p = hp.get_problem("dirichlet2d")
    lm = run_settings(p, "lm")
    P = hp.ModelSpec(2, lm["ff_dim"], lm["hidden"], lm["layers"]).num_params
    R = 2 * (lm["pde_points"] + lm["bc_points"])
    dense = 8 * (P * R + P * P)
    fits, over = run_settings(p, "auto", dense), run_settings(p, "auto", dense - 1)
    assert (fits["warm_start"], fits["lm"]["solver"]) == (0, "auto")
    assert (over["warm_start"], over["lm"]["solver"]) == (ADAM_STEPS, "cg")
