"""The wave benchmarks of helmpinn.problems.waves: exact solutions against their PDE (fourth-order finite
differences, written here independently of Problem.pde_residual_fd), free-source against the
far-field closed form, and box-source's error with the resonant modes removed."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import load_benchmark
from scipy.special import hankel1

import helmpinn as hp
from helmpinn import waves


def _lap4(u, x, h):
    """Fourth-order central-difference Laplacian of u at x."""
    out = np.zeros(len(x), complex) - 2.5 * x.shape[1] * u(x)
    for i in range(x.shape[1]):
        e = np.zeros(x.shape[1])
        e[i] = h
        out += (4.0 / 3.0) * (u(x + e) + u(x - e)) - (1.0 / 12.0) * (u(x + 2 * e) + u(x - 2 * e))
    return out / h ** 2


def test_registered():
    names = hp.registry.problem_names()
    assert "box-source" in names and "free-source" in names
    p = hp.get_problem("box-source", wavelengths=5)
    assert p.options["wavelengths"] == 5 and math.isclose(p.wavenumber, 10 * math.pi)
    q = hp.get_problem("free-source", wavelengths=5, s=0.05)
    assert q.pml is not None and math.isclose(q.wavenumber, 5 * math.pi)


@pytest.mark.parametrize("W", [2.5, 5.0])
def test_box_source_satisfies_pde(W):
    p = waves.box_source(W)
    w = 2 * math.pi * W
    x = np.random.default_rng(0).uniform(0.02, 0.98, (300, 2))
    r = _lap4(p.exact_at, x, 2e-3) + w * w * p.exact_at(x) - p.source_at(x)
    assert np.abs(r).max() < 2e-5 * np.abs(p.source_at(x)).max() + 1e-4
    # u = 0 on the boundary
    t = np.linspace(0, 1, 50)
    edge = np.concatenate([np.stack([t, 0 * t], 1), np.stack([t, 1 + 0 * t], 1),
                           np.stack([0 * t, t], 1), np.stack([1 + 0 * t, t], 1)])
    assert np.abs(p.exact_at(edge)).max() < 1e-12


def test_box_source_is_not_trivial():
    """The series is not the zero function and changes with sd (a wrong DST scale or sign fails
    the PDE test above; this guards against an all-zero series passing it with f ≈ 0 nowhere)."""
    x = np.random.default_rng(5).uniform(0, 1, (100, 2))
    u1 = waves.box_source_solution(5, 0.05)(x)
    u2 = waves.box_source_solution(5, 0.03)(x)
    assert np.abs(u1).max() > 1e-2 and np.abs(u1 - u2).max() > 1e-3


@pytest.mark.parametrize("W", [2.0, 5.0])
def test_free_source_satisfies_pde(W):
    q = waves.free_source(W, s=0.05)
    k = math.pi * W
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-1, 1, (200, 2)), rng.normal(0, 0.05, (100, 2))])
    x = x[np.hypot(*x.T) > 1e-2]   # 4th-order differences straddle r = 0 badly (log singularity of H0 pieces)
    r = _lap4(q.exact_at, x, 1e-3) + k * k * q.exact_at(x) - q.source_at(x)
    assert np.abs(r).max() < 1e-5 * np.abs(q.source_at(x)).max()


def test_free_source_far_field():
    k, s = 5 * math.pi, 0.05
    x = np.random.default_rng(2).uniform(-1, 1, (400, 2))
    x = x[np.hypot(*x.T) > 12 * s]
    r = np.hypot(*x.T)
    ref = 0.25j * math.exp(-k * k * s * s / 2) * hankel1(0, k * r)
    u = waves.free_source_field(x, k, s)
    assert np.abs(u - ref).max() < 1e-12 * np.abs(ref).max()
    # continuous through the origin and at the quadrature's outer radius
    u0 = waves.free_source_field(np.array([[0.0, 0.0], [1e-9, 0.0]]), k, s)
    assert abs(u0[0] - u0[1]) < 1e-7 * abs(u0[0])
    uR = waves.free_source_field(np.array([[12 * s * (1 - 1e-12), 0.0], [12 * s * (1 + 1e-12), 0]]), k, s)
    assert abs(uR[0] - uR[1]) < 1e-9 * abs(uR[0])


def test_resonant_modes():
    x = np.random.default_rng(3).uniform(0, 1, (50, 2))
    Z = waves.resonant_modes(x, 10 * math.pi)       # 5 wavelengths: (6, 8), (8, 6)
    assert Z.shape == (50, 2)
    assert np.allclose(Z[:, 0], np.sin(6 * np.pi * x[:, 0]) * np.sin(8 * np.pi * x[:, 1]))
    assert waves.resonant_modes(x, 10.0).shape == (50, 0)


def test_box_source_error_removes_modes():
    p = waves.box_source(5)
    x = np.random.default_rng(4).uniform(0, 1, (2000, 2))
    ue = p.exact_at(x)
    Z = waves.resonant_modes(x, 10 * math.pi)
    wrong = ue + 0.3 * Z[:, 0] - 0.1j * Z[:, 1]
    e = waves.box_source_error(wrong, ue, x, 10 * math.pi)
    assert e["raw"] > 0.5 and e["modes_removed"] < 1e-12
    other = ue * 1.01
    e = waves.box_source_error(other, ue, x, 10 * math.pi)
    assert math.isclose(e["raw"], 0.01, rel_tol=1e-9) and e["modes_removed"] <= e["raw"]
    with pytest.raises(ValueError, match="u and exact"):
        waves.box_source_error(ue[:3], ue, x, 10 * math.pi)


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_options_checked(bad):
    with pytest.raises(ValueError, match="wavelengths"):
        waves.box_source(bad)
    with pytest.raises(ValueError, match="s: expected"):
        waves.free_source(5, s=bad)


def _mode_function(problem, mode):
    """The eigenmode of −Δ the docstring of waves.BoxMode describes, written here from the
    boundary conditions: sin for Dirichlet at both ends, cos for Neumann at both, the quarter-wave
    sine (or its mirror) for one of each."""
    lo, hi = problem.domain.bounds

    def phi(x):
        out = np.ones(len(x))
        for axis, m in enumerate(mode):
            s = (x[:, axis] - lo[axis]) / (hi[axis] - lo[axis])
            ends = tuple(type(problem.bcs["xyz"[axis] + side]).__name__ for side in ("min", "max"))
            out = out * {("Dirichlet", "Dirichlet"): lambda: np.sin(m * np.pi * s),
                         ("Robin", "Robin"): lambda: np.cos(m * np.pi * s),
                         ("Dirichlet", "Robin"): lambda: np.sin((m + 0.5) * np.pi * s),
                         ("Robin", "Dirichlet"): lambda: np.cos((m + 0.5) * np.pi * s)}[ends]()
        return out.astype(complex)
    return phi


def test_box_resonances_of_box_source():
    modes = waves.box_resonances(waves.box_source(5), within=0.005)
    assert sorted(m.mode for m in modes) == [(6, 8), (8, 6)]
    assert all(math.isinf(m.amplification) for m in modes)
    near = waves.box_resonances(hp.get_problem("dirichlet2d", n=8))   # κ = (16π)², modes m² + n² = 257
    assert sorted(m.mode for m in near) == [(1, 16), (16, 1)]
    assert math.isclose(near[0].amplification, 256, rel_tol=1e-9)


@pytest.mark.parametrize("ends", [("D", "D"), ("N", "N"), ("D", "N"), ("N", "D")])
def test_box_resonances_are_eigenmodes(ends):
    """Each mode found is an eigenfunction of −Δ with its eigenvalue (finite differences) and
    meets the boundary conditions; the amplification is κ/|κ − λ|."""
    bc = {"D": hp.Dirichlet(0.0), "N": hp.Neumann()}
    lam = (3.5 * math.pi / 2) ** 2 + (2 * math.pi) ** 2
    p = hp.Problem(hp.geometry.Box([0.0, -0.5], [2.0, 0.5]), kappa=lam * 1.001,
                   bcs={"xmin": bc[ends[0]], "xmax": bc[ends[1]], ("ymin", "ymax"): bc["N"]})
    modes = waves.box_resonances(p, within=0.2)
    assert modes and all(abs(m.eigenvalue - p.kappa) <= 0.2 * p.kappa for m in modes)
    assert [m.amplification for m in modes] == sorted((m.amplification for m in modes), reverse=True)
    rng = np.random.default_rng(5)
    x = rng.uniform([0.2, -0.3], [1.8, 0.3], (40, 2))
    for m in modes:
        phi = _mode_function(p, m.mode)
        assert np.allclose(-_lap4(phi, x, 1e-3), m.eigenvalue * phi(x), rtol=1e-6, atol=1e-6 * m.eigenvalue)
        assert math.isclose(m.amplification, p.kappa / abs(p.kappa - m.eigenvalue), rel_tol=1e-12)
        for axis, (a, b) in enumerate(zip(*p.domain.bounds)):
            for side, wall in (("min", a), ("max", b)):
                y = x.copy()
                y[:, axis] = wall
                e = np.zeros(2)
                e[axis] = 1e-6
                value = phi(y) if isinstance(p.bcs["xyz"[axis] + side], hp.Dirichlet) \
                    else (phi(y + e) - phi(y - e)) / 2e-6
                assert np.max(np.abs(value)) < 1e-6
    if ends == ("D", "N"):   # the mode κ was put next to: x quarter-wave index 3, y cosine index 2
        assert modes[0].mode == (3, 2) and math.isclose(modes[0].amplification, 1001, rel_tol=1e-9)


def test_box_resonances_only_for_closed_boxes():
    assert waves.box_resonances(waves.free_source(5)) is None                 # a PML
    box = hp.geometry.Box([0, 0], [1, 1])
    assert waves.box_resonances(hp.Problem(box, kappa=100.0, bcs={"*": hp.Sommerfeld(10.0)})) is None
    assert waves.box_resonances(hp.Problem(box, kappa=lambda x: 100 + x[:, 0], bcs={"*": hp.Dirichlet()})) is None
    assert waves.box_resonances(hp.Problem(box, kappa=100 + 1j, bcs={"*": hp.Dirichlet()})) is None
    assert waves.box_resonances(hp.Problem(box, kappa=2 * math.pi ** 2 * 1.5, bcs={"*": hp.Dirichlet()})) == []
    with pytest.raises(ValueError, match="within"):
        waves.box_resonances(waves.box_source(5), within=0)


#: Green's rows' cases by dimension: a box off the origin, the mode κ lies 0.4% above, the modes
#: taken, the Gauss-Legendre nodes per axis of the independent projection.
GREEN_CASES = {
    1: ([0.5], [1.7], (7,), 1, 200),
    2: ([0.5, -0.2], [1.7, 0.8], (7, 3), 3, 160),
    3: ([0.5, -0.2, 0.1], [1.7, 0.8, 0.9], (3, 3, 2), 5, 44),
}


@pytest.mark.parametrize("d", sorted(GREEN_CASES))
def test_green_mode_rows_are_the_residuals_projection(d):
    """resonance_green_rows: for u that vanishes on the walls, ``Σ_j C[j, m] (u(z_j) − y_j)`` is
    ``sqrt(a² − 1) ⟨Δu + κu − f, ψ̂_m⟩ / sqrt(|Ω|)``, the residual (fourth-order differences)
    projected on a fine Gauss-Legendre grid, on a box off the origin with a complex source, in
    1, 2 and 3 dimensions; the rows of box-source's exact solution are zero."""
    lo, hi, top, count, nodes = GREEN_CASES[d]
    lo, hi = np.array(lo), np.array(hi)
    L = hi - lo
    lam = sum((m * math.pi / La) ** 2 for m, La in zip(top, L))
    centre, plane = lo + 0.4 * L, np.array([3.0, 2.0, 1.0])[:d]
    src = lambda x: np.exp(-20 * ((x - centre) ** 2).sum(1)) * (1 + 0.5j)   # noqa: E731
    domain = hp.geometry.Interval(lo[0], hi[0]) if d == 1 else hp.geometry.Box(lo, hi)
    p = hp.Problem(domain, kappa=lam * 1.004, source=src, bcs={"*": hp.Dirichlet()})
    modes = [m for m in waves.box_resonances(p, 0.05) if m.amplification > 1][:waves.RESONANCE_MOST]
    assert len(modes) == count and modes[0].mode == top
    z, C, y = waves.resonance_green_rows(p)
    assert C.shape == (len(z), len(modes)) and y.shape == (len(z),)

    def u(x):
        t = (x - lo) / L
        return np.prod(t * (1 - t), 1) * np.exp(1j * (x @ plane))

    t, w = np.polynomial.legendre.leggauss(nodes)
    x = np.stack([g.ravel() for g in np.meshgrid(*[lo[a] + L[a] * (t + 1) / 2 for a in range(d)],
                                                 indexing="ij")], 1)
    wx = np.ones(1)
    for a in range(d):
        wx = np.multiply.outer(wx, w * L[a] / 2).ravel()
    r = _lap4(u, x, 1e-3) + p.kappa * u(x) - src(x)
    for i, m in enumerate(modes):
        psi = _mode_function(p, m.mode)(x)
        proj = wx @ (r * psi) / math.sqrt(np.prod(L) / 2 ** d)
        expected = math.sqrt(min(m.amplification, waves.RESONANCE_CAP) ** 2 - 1) * proj / math.sqrt(np.prod(L))
        got = C[:, i] @ (u(z) - y)
        assert abs(got - expected) < 1e-7 * abs(expected), (m.mode, got, expected)
    if d != 2:
        return
    b = waves.box_source(10)
    z, C, y = waves.resonance_green_rows(b)
    assert np.abs(C.T @ (b.exact_at(z) - y)).max() < 1e-10 * np.abs(C.T @ y).max()
    neumann = hp.Problem(hp.geometry.Box(lo, hi), kappa=lam, bcs={"xmin": hp.Neumann(), "*": hp.Dirichlet()})
    with pytest.raises(ValueError, match="every wall"):
        waves.resonance_green_rows(neumann)
    assert waves.resonance_green_rows(waves.free_source(5)) is None


def test_solve_warns_near_resonance():
    """hp.solve names the mode and its amplification; a box away from resonance is quiet (the
    test suite turns warnings into errors)."""
    small = {"model": "network", "optimizer": "adam", "steps": 1, "pde_points": 64, "bc_points": 16,
             "hidden": 8, "layers": 1, "ff_dim": 4}
    k = 2 * math.pi * 6 / 1.6     # 6 wavelengths along x
    near = hp.Problem(hp.geometry.Box([0, 0], [1.6, 1]), kappa=k * k, bcs={"*": hp.Dirichlet()},
                      source=lambda x: np.ones(len(x), complex))
    with pytest.warns(waves.ResonanceWarning, match=r"mode \(11, 3\).*amplified 3,600 times"):
        hp.solve(near, progress=False, **small)
    k = 2 * math.pi * 6 / 1.75    # the nearest mode 1.6% away: amplified 64 times
    far = hp.Problem(hp.geometry.Box([0, 0], [1.75, 1]), kappa=k * k, bcs={"*": hp.Dirichlet()},
                     source=lambda x: np.ones(len(x), complex))
    hp.solve(far, progress=False, **small)


@pytest.mark.parametrize("problem,within", [
    (hp.Problem(hp.geometry.Interval(0.0, 3.0), kappa=40.0, bcs={"xmin": hp.Dirichlet(), "xmax": hp.Neumann()}), 0.3),
    (hp.get_problem("dirichlet2d", n=8), 0.05),
    (hp.get_problem("cube3d", k=8 * math.pi), 0.035),
])
def test_box_resonances_finds_every_mode(problem, within):
    """Every mode within the window, counted by brute force over indices to 40 per axis (1-D,
    2-D, 3-D), is listed once."""
    lo, hi = problem.domain.bounds
    axes = []
    for a in range(problem.dim):
        kinds = tuple(isinstance(problem.bcs["xyz"[a] + s], hp.Dirichlet) for s in ("min", "max"))
        shift, first = (0.0, 1) if kinds == (True, True) else (0.0, 0) if kinds == (False, False) else (0.5, 0)
        axes.append([(m, ((m + shift) * math.pi / (hi[a] - lo[a])) ** 2) for m in range(first, 41)])
    expect = set()
    for combo in itertools.product(*axes):
        lam = sum(ev for _, ev in combo)
        if abs(lam - problem.kappa) <= within * problem.kappa:
            expect.add(tuple(m for m, _ in combo))
    found = waves.box_resonances(problem, within)
    assert expect and sorted(m.mode for m in found) == sorted(expect)


@pytest.mark.parametrize("ends", [("D", "D"), ("N", "N"), ("D", "N"), ("N", "D")])
def test_box_mode_values_are_the_modes(ends):
    """box_mode_values is the eigenmode written here from the boundary conditions (_mode_function)."""
    bc = {"D": hp.Dirichlet(0.0), "N": hp.Neumann()}
    p = hp.Problem(hp.geometry.Box([0.0, -0.5], [2.0, 0.5]), kappa=30.0,
                   bcs={"xmin": bc[ends[0]], "xmax": bc[ends[1]], ("ymin", "ymax"): bc["D"]})
    x = np.random.default_rng(2).uniform([0, -0.5], [2, 0.5], (50, 2))
    for mode in [(0, 1), (3, 2), (2, 5)]:
        np.testing.assert_allclose(waves.box_mode_values(p, mode, x), _mode_function(p, mode)(x).real,
                                   rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="closed box"):
        waves.box_mode_values(waves.free_source(5), (1, 1), x)
    with pytest.raises(ValueError, match="x, mode"):
        waves.box_mode_values(p, (1,), x)


def test_resonance_rows():
    """One column per near-resonant mode with a finite amplification a (the exactly resonant ones
    left out), the mode at the PDE points scaled to norm sqrt(min(a, cap)² − 1), zero elsewhere."""
    p = waves.box_source(10)
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1, (400, 2))
    pde = rng.uniform(size=400) < 0.8
    modes = [m for m in waves.box_resonances(p, within=0.02) if math.isfinite(m.amplification)]
    assert (12, 16) not in [m.mode for m in modes] and (20, 1) in [m.mode for m in modes]
    M = waves.resonance_rows(p, x, pde, within=0.02, cap=300.0)
    assert M.shape == (400, len(modes))
    assert np.all(M[~pde] == 0)
    for col, m in zip(M.T, modes):
        a = min(m.amplification, 300.0)
        assert math.isclose(np.linalg.norm(col), math.sqrt(a * a - 1), rel_tol=1e-12)
        phi = np.sin(m.mode[0] * np.pi * x[pde, 0]) * np.sin(m.mode[1] * np.pi * x[pde, 1])
        np.testing.assert_allclose(col[pde], phi * math.sqrt(a * a - 1) / np.linalg.norm(phi), rtol=0,
                                   atol=1e-12 * a)
    assert waves.resonance_rows(waves.free_source(5), x) is None          # not a closed box
    assert waves.resonance_rows(p, x, within=1e-4) is None                 # only the exactly resonant ones
    with pytest.raises(ValueError, match="cap"):
        waves.resonance_rows(p, x, cap=-1.0)
    # the most amplified first, up to `most` of them
    few = waves.resonance_rows(p, x, pde, within=0.02, cap=300.0, most=3)
    np.testing.assert_array_equal(few, M[:, :3])
    assert [m.amplification for m in modes[:3]] == sorted((m.amplification for m in modes), reverse=True)[:3]
    assert waves.resonance_rows(p, x).shape[1] == 25 <= waves.RESONANCE_MOST   # all 25 within 5% at 10 wavelengths
    assert waves.resonance_rows(waves.box_source(20), x).shape[1] == waves.RESONANCE_MOST
    with pytest.raises(ValueError, match="most"):
        waves.resonance_rows(p, x, most=0)


def test_box_error_modes_finds_the_mode_an_error_lies_in():
    """benchmarks/box_error_modes.py's spectrum: an error put in the mode (20, 1) of box-source at
    10 wavelengths (amplified 400 times) is found there, whole, at its distance to resonance."""
    module = load_benchmark("box_error_modes")
    p = waves.box_source(10)
    bump = lambda x: 1e-3 * np.sin(20 * np.pi * x[:, 0]) * np.sin(np.pi * x[:, 1])   # noqa: E731
    s = module.spectrum(p, lambda x: p.exact_at(x) + (1 + 2j) * bump(x), 127)
    E, gap = s["error"], s["gap"]
    assert math.isclose(E[19, 0] / E.sum(), 1.0, rel_tol=1e-9) and math.isclose(gap[19, 0], 1 / 400, rel_tol=1e-12)
    t = np.arange(1, 128) / 128
    X, Y = np.meshgrid(t, t, indexing="ij")
    x = np.stack([X.ravel(), Y.ravel()], 1)
    ratio = np.linalg.norm(5 ** 0.5 * bump(x)) / np.linalg.norm(p.exact_at(x))   # |1 + 2i| = √5
    assert math.isclose(math.sqrt(E.sum() / s["exact"]), ratio, rel_tol=1e-9)
    # in 3-D: cube3d at k = 8π, an error in (1, 3, 7) (λ = 59π², 5/64 of κ from it)
    c = hp.get_problem("cube3d", k=8 * np.pi)
    bump3 = lambda x: 1e-3j * np.sin(np.pi * x[:, 0]) * np.sin(3 * np.pi * x[:, 1]) * np.sin(7 * np.pi * x[:, 2])  # noqa: E731
    s = module.spectrum(c, lambda x: c.exact_at(x) + bump3(x), 31)
    E, gap = s["error"], s["gap"]
    assert E.shape == (31, 31, 31) and math.isclose(E[0, 2, 6] / E.sum(), 1.0, rel_tol=1e-9)
    assert math.isclose(gap[0, 2, 6], 5 / 64, rel_tol=1e-12)
