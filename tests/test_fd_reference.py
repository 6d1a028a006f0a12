"""helmpinn.reference.fd_solve: the finite-difference reference solver converges at its order."""
import numpy as np
import pytest
from scipy.special import hankel1

import helmpinn as hp
from helmpinn.problems.geometry import Ball, Box, BoxMinusBall, Interval
from helmpinn.problems.registry import get_problem
from helmpinn.reference import MediumJumpWarning, fd_solve, stencil_weights


def _node_error(problem, h, order=4):
    sol = fd_solve(problem, h, order=order)
    exact = problem.exact_at(sol.points)
    return np.linalg.norm(sol.values.ravel() - exact) / np.linalg.norm(exact)


def test_stencil_weights_are_the_textbook_ones():
    np.testing.assert_allclose(stencil_weights(np.arange(-2, 3), 2) * 12, [-1, 16, -30, 16, -1], atol=1e-12)
    np.testing.assert_allclose(stencil_weights(np.arange(-2, 3), 1) * 12, [1, -8, 0, 8, -1], atol=1e-12)
    # the one-sided stencil next to a wall differentiates quintics exactly
    offs = np.arange(-1, 5)
    w = stencil_weights(offs, 2)
    assert abs(w @ (offs.astype(float) ** 5)) < 1e-10 and abs(w @ offs**2 - 2) < 1e-12


@pytest.mark.parametrize("order, low, high", [(4, 12, 20), (2, 3.5, 4.5)])
def test_plane_wave_with_a_sommerfeld_end_converges_at_its_order(order, low, high):
    p = get_problem("plane1d", k=20)   # Dirichlet at 0, Sommerfeld (Robin) at 1
    e1, e2 = _node_error(p, 1 / 200, order), _node_error(p, 1 / 400, order)
    assert low < e1 / e2 < high, (e1, e2)


def test_standing_wave_in_2d_converges_at_fourth_order():
    p = get_problem("dirichlet2d", n=2)
    e1, e2 = _node_error(p, 1 / 40), _node_error(p, 1 / 80)
    assert 12 < e1 / e2 < 20 and e2 < 2e-5, (e1, e2)


def test_neumann_face():
    k = 7.0
    p = hp.Problem(Interval(0.0, 1.0), k * k, bcs={"xmin": hp.Neumann(), "xmax": hp.Dirichlet(np.cos(k))},
                   exact=lambda x: np.cos(k * x[:, 0]))
    e1, e2 = _node_error(p, 1 / 100), _node_error(p, 1 / 200)
    assert 12 < e1 / e2 < 20, (e1, e2)


def test_the_interpolant_keeps_the_order():
    p = get_problem("dirichlet2d", n=2)
    x = p.test_points(37)
    errs = [np.linalg.norm(fd_solve(p, h)(x) - p.exact_at(x)) for h in (1 / 40, 1 / 80)]
    assert errs[0] / errs[1] > 11, errs


@pytest.mark.parametrize("d", [1, 2, 3])
def test_the_interpolant_is_the_not_a_knot_cubic_spline(d):
    """FDSolution's interpolant, in 1, 2 and 3 dimensions on uneven grids: it passes through the
    nodes and reproduces a (complex) tensor-product cubic exactly, as the not-a-knot spline does;
    in 3-D on a grid of 49 x 41 x 33 nodes at 4,000 points (SciPy's RegularGridInterpolator with
    a direct solve, its 3-D interpolant until then, did not finish those in 5 minutes)."""
    from helmpinn.reference import FDSolution

    rng = np.random.default_rng(d)
    n = [49, 41, 33][:d] if d == 3 else [23, 17][:d]
    axes = [np.sort(np.concatenate([[-0.3, 1.2], rng.uniform(-0.3, 1.2, m - 2)])) for m in n]
    coef = rng.normal(size=(d, 4)) + 1j * rng.normal(size=(d, 4))

    def cubic(*xs):
        out = 1.0
        for a, xa in enumerate(xs):
            out = out * np.polynomial.polynomial.polyval(xa, coef[a])
        return out

    sol = FDSolution(axes, cubic(*np.meshgrid(*axes, indexing="ij")), np.full(d, 0.05), 4)
    x = rng.uniform(-0.3, 1.2, (4000, d))
    x[:2] = [a[0] for a in axes], [a[-1] for a in axes]   # the grid's corners too
    want = cubic(*x.T)
    assert np.abs(sol(x) - want).max() < 1e-10 * np.abs(want).max()
    assert np.abs(sol(sol.points) - sol.values.ravel()).max() < 1e-12 * np.abs(sol.values).max()


def test_point_source_in_a_pml_matches_the_free_space_field():
    """A Gaussian source (s = 0.05) in [-1, 1]² with a PML: the field far from the source is
    -(i/4) exp(-k²s²/2) H0(kr) (the Gaussian's Fourier transform times the Green's function of
    Δ + k²); the grid converges at fourth order with a smooth layer profile (power 4)."""
    k, s = 2 * np.pi, 0.05
    src = lambda x: np.exp(-np.sum(x**2, 1) / (2 * s * s)) / (2 * np.pi * s * s)  # noqa: E731
    p = hp.Problem(Box([-1, -1], [1, 1]), k * k, source=src, bcs={}, pml=hp.PML(0.5, power=4))
    g = np.stack(np.meshgrid(*2 * [np.linspace(-1, 1, 41)], indexing="ij"), -1).reshape(-1, 2)
    g = g[np.linalg.norm(g, axis=1) > 0.4]
    far = -0.25j * np.exp(-k * k * s * s / 2) * hankel1(0, k * np.linalg.norm(g, axis=1))
    u = [fd_solve(p, 3 / n)(g) for n in (50, 100, 200)]
    rel = lambda a, b: np.linalg.norm(a - b) / np.linalg.norm(b)  # noqa: E731
    assert rel(u[2], far) < 3e-4           # the PML's reflection and the grid
    assert rel(u[0], u[2]) / rel(u[1], u[2]) > 10


def test_bad_input_is_named():
    p = get_problem("dirichlet2d", n=2)
    with pytest.raises(ValueError, match="h must be positive"):
        fd_solve(p, -1.0)
    with pytest.raises(ValueError, match="fewer than 6 intervals"):
        fd_solve(p, 0.5)
    with pytest.raises(ValueError, match="order must be 2 or 4"):
        fd_solve(p, 0.1, order=3)
    with pytest.raises(ValueError, match="outside the grid"):
        fd_solve(p, 0.1)(np.array([[2.0, 0.5]]))
    ring = hp.Problem(BoxMinusBall(Box([-1, -1], [1, 1]), Ball((0, 0), 0.3)), 4.0,
                      bcs={"*": hp.Dirichlet(0), "scatterer": None})
    with pytest.raises(NotImplementedError, match="scatterer has no boundary condition"):
        fd_solve(ring, 0.1)
    free = hp.Problem(Box([0, 0], [1, 1]), 4.0, bcs={"*": None})
    with pytest.raises(NotImplementedError, match="no condition"):
        fd_solve(free, 0.1)


def test_scattered_field_form_matches_a_gaussian_source_over_two_layers():
    """A point source over a two-layer medium in a PML, solved twice: in the scattered-field form
    (background=FreeSpaceSource, the unknown u - u0) and with a narrow Gaussian source scaled by
    its Fourier factor (the same far field). The total fields agree away from the source; in a
    homogeneous medium the scattered part is only the PML's reflection."""
    from helmpinn.problems.sources import FreeSpaceSource

    k, s, x0 = 2 * np.pi, 0.04, np.array([0.013, -0.021])
    layered = lambda x: np.where(x[:, 1] < -0.4, (1.5 * k) ** 2, k * k)  # noqa: E731
    gauss = lambda x: (-np.exp(-np.sum((x - x0) ** 2, 1) / (2 * s * s)) / (2 * np.pi * s * s)  # noqa: E731
                       * np.exp(k * k * s * s / 2))
    src = FreeSpaceSource(x0, k)
    box, pml = Box([-1, -1], [1, 1]), hp.PML(0.5, power=4)
    scattered = hp.Problem(box, layered, bcs={}, pml=pml, background=src)
    gaussian = hp.Problem(box, layered, source=gauss, bcs={}, pml=pml)
    g = np.stack(np.meshgrid(*2 * [np.linspace(-1, 1, 41)], indexing="ij"), -1).reshape(-1, 2)
    g = g[np.linalg.norm(g - x0, axis=1) > 0.3]
    with pytest.warns(MediumJumpWarning, match="the medium jumps"):   # κ averaged beside the jump
        total = scattered.total_field(g, fd_solve(scattered, 3 / 100)(g))
    with pytest.warns(MediumJumpWarning, match="the medium jumps"):
        reference = fd_solve(gaussian, 3 / 100)(g)
    assert np.linalg.norm(total - reference) / np.linalg.norm(reference) < 1e-4
    homogeneous = hp.Problem(box, k * k, bcs={}, pml=pml, background=src)
    assert np.linalg.norm(fd_solve(homogeneous, 3 / 100)(g)) / np.linalg.norm(src(g)) < 1e-3
