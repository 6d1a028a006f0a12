"""Domain-decomposed models (helmpinn.models.decomposition) against an independent NumPy evaluation of
u = φ Σ_j ω_j N_j: the windows and the constraint written again here, N_j by tests/reference.py,
the PDE operator by fourth-order finite differences in x, J v by central differences in θ."""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse
import pytest

import reference as ref
from helmpinn import ModelSpec
from helmpinn.models.decomposition import BoxConstraint, DecomposedModel, Level, Rows
from helmpinn.problems.pml import PML, operator_coefficients

SPECS = {1: (1, 4, 8, 1), 2: (2, 4, 6, 1), 3: (3, 3, 5, 1)}
GRIDS = {1: [(3,), (1,)], 2: [(3, 2), (1, 1)], 3: [(2, 2, 1)]}


def numpy_u(model_cfg, thetas, x):
    """u at x [N, d] from scratch: lo, hi, grids, overlap, spec, constraint scale (or None)."""
    lo, hi, grids, overlap, spec, scale = model_cfg
    d = len(lo)
    u = np.zeros(len(x), complex)
    k = 0
    for grid in grids:
        spacing = (hi - lo) / np.array(grid)
        half = 0.5 * spacing * (1 + overlap)
        bumps = []
        for a in range(d):
            c = lo[a] + (np.arange(grid[a]) + 0.5) * spacing[a]
            t = (x[None, :, a] - c[:, None]) / half[a]
            v = np.where(np.abs(t) < 1, np.exp(-1 / np.maximum(1 - t * t, 1e-300)), 0.0)
            bumps.append((v / v.sum(0), c))
        for index in np.ndindex(*grid):
            om = np.prod([bumps[a][0][i] for a, i in enumerate(index)], axis=0)
            centre = np.array([bumps[a][1][i] for a, i in enumerate(index)])
            val = ref.network(thetas[k][None], spec, (x - centre) / half, 0)[0]
            u += np.where(om > 1e-13, om, 0.0) * (val[:, 0] + 1j * val[:, 1])
            k += 1
    if scale is not None:
        u *= np.prod(np.tanh((x - lo) / scale) * np.tanh((hi - x) / scale), axis=1)
    return u


def numpy_residual(cfg, thetas, rows, h=1e-3):
    """s (Σ a u_aa + Σ b u_a + c u − f) by fourth-order central differences, as (re, im) rows."""
    x = rows.x
    u0 = numpy_u(cfg, thetas, x)
    r = rows.c * u0 - rows.f
    for a in range(x.shape[1]):
        e = np.zeros(x.shape[1])
        e[a] = h
        up, um = numpy_u(cfg, thetas, x + e), numpy_u(cfg, thetas, x - e)
        up2, um2 = numpy_u(cfg, thetas, x + 2 * e), numpy_u(cfg, thetas, x - 2 * e)
        uaa = (-(up2 + um2) + 16 * (up + um) - 30 * u0) / (12 * h * h)
        ua = (8 * (up - um) - (up2 - um2)) / (12 * h)
        r += rows.a[:, a] * uaa + rows.b[:, a] * ua
    out = np.empty(2 * len(x))
    out[0::2], out[1::2] = r.real, r.imag
    return out


def make_case(d, *, pml=False, hard=False, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = -np.ones(d), np.ones(d) * 1.5
    grids = GRIDS[d]
    spec = ModelSpec(*SPECS[d])
    scale = 0.4 if hard else None
    constraint = BoxConstraint(lo, hi, scale) if hard else None
    model = DecomposedModel.create(lo, hi, grids, overlap=0.6, ff_dim=spec.ff_dim, hidden_dim=spec.hidden_dim,
                                   num_hidden_layers=spec.num_hidden_layers, wavenumber=4.0,
                                   constraint=constraint, seed=seed)
    n = {1: 40, 2: 50, 3: 40}[d]
    margin = 0.01
    x = rng.uniform(lo + margin, hi - margin, (n, d))
    k = 3.0
    if pml:
        a, b = operator_coefficients(x, pml=PML(0.6), box=(lo + 0.6, hi - 0.6), k=k)
    else:
        a, b = np.ones((n, d)), np.zeros((n, d))
    pde = Rows(x, 0.7 * a, 0.7 * b, 0.7 * k * k, 0.7 * (rng.normal(size=n) + 1j * rng.normal(size=n)), "pde")
    parts = [pde]
    if d >= 2:   # value rows (a = b = 0, a complex c: Dirichlet's c = s, Green's rows' too) and
        # Robin rows (b = s n, c = s α)
        xd = rng.uniform(lo + margin, hi - margin, (7, d))
        parts.append(Rows(xd, 0.0, 0.0, 2.0 - 0.7j, 2.0 * rng.normal(size=7), "data"))
        xb = rng.uniform(lo + margin, hi - margin, (6, d))
        nb = rng.normal(size=(6, d))
        nb /= np.linalg.norm(nb, axis=1, keepdims=True)
        parts.append(Rows(xb, 0.0, 1.5 * nb, 1.5 * (0.3 - 2j), 0.0, "bc"))
    rows = Rows.concat(parts)
    cfg = (lo, hi, grids, 0.6, spec, scale)
    return model, rows, cfg


def thetas_of(model):
    return [model.params[sd["slice"]] for sd in model.subdomains]


CASES = [(1, False, False), (1, True, True), (2, False, False), (2, True, False), (2, False, True),
         (2, True, True), (3, True, True)]


@pytest.mark.parametrize("d,pml,hard", CASES)
def test_residuals_match_numpy(d, pml, hard):
    model, rows, cfg = make_case(d, pml=pml, hard=hard)
    res = model.residuals_for(rows)
    r = res.residuals(model.params)
    r_np = numpy_residual(cfg, thetas_of(model), rows)
    assert np.abs(r - r_np).max() < 1e-6 * max(1.0, np.abs(r_np).max())
    # predict is the same u
    u = model.predict(rows.x)
    assert np.allclose(u, numpy_u(cfg, thetas_of(model), rows.x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("d,pml,hard", CASES)
def test_jvp_vjp_jacobian(d, pml, hard):
    model, rows, cfg = make_case(d, pml=pml, hard=hard, seed=1)
    res = model.residuals_for(rows)
    theta = model.params
    rng = np.random.default_rng(5)
    v = rng.normal(size=model.num_params)
    Jv = res.jvp(theta, v)
    # central differences along v of the independent NumPy residual
    eps = 1e-4

    def rn(t):
        return numpy_residual(cfg, [t[sd["slice"]] for sd in model.subdomains], rows)
    fd = (8 * (rn(theta + eps * v) - rn(theta - eps * v)) - (rn(theta + 2 * eps * v) - rn(theta - 2 * eps * v))) / (12 * eps)
    assert np.abs(Jv - fd).max() < 1e-5 * max(1.0, np.abs(fd).max())
    # the dense Jacobian: its columns are central differences of the (checked) residuals
    J = res.jacobian(theta)
    Jfd = ref.fd_jacobian(lambda T: np.array([res.residuals(t) for t in T]), theta)
    assert np.abs(J - Jfd).max() < 1e-7 * max(1.0, np.abs(J).max())
    assert np.allclose(J @ v, Jv, rtol=0, atol=1e-11 * max(1.0, np.abs(Jv).max()))
    w = rng.normal(size=res.num_residuals)
    JTw = res.vjp(theta, w)
    assert np.allclose(JTw, J.T @ w, rtol=0, atol=1e-11 * max(1.0, np.abs(J).max() * len(w)))
    # the float32 products (MatrixFreeGN(products="core32")): the same, within float32 rounding
    Jv32, JTw32 = res.jvp(theta, v, "float32"), res.vjp(theta, w, "float32")
    assert Jv32.dtype == JTw32.dtype == np.float64
    assert np.abs(Jv32 - Jv).max() < 1e-5 * np.abs(Jv).max()
    assert np.abs(JTw32 - JTw).max() < 1e-5 * np.abs(JTw).max()


@pytest.mark.parametrize("d,pml", [(2, False), (2, True), (3, True)])
def test_subnetworks_take_the_cheapest_form_of_the_operator(d, pml, monkeypatch):
    """A subnetwork's points are kept by the form their operator takes in the core: value rows
    (a = b = 0: the data term, one stream, times C), those that only carry mode rows (term
    "modes") before the others, then the points with the same a on every axis (outside the PML,
    where its half-width is the same on every axis: the scalar form, a_lap, d + 2 streams), then
    the rest (the diagonal form); one core batch per form present. The residuals, J v, Jᵀw and
    the Jacobian blocks are the diagonal form's everywhere, to rounding."""
    import helmpinn.models.decomposition as dm

    _, rows, (lo, hi, _, overlap, spec, scale) = make_case(d, pml=pml, hard=True, seed=3)
    xc = np.random.default_rng(4).uniform(lo, hi, (9, d))
    rows = Rows.concat([Rows(xc, 0.0, 0.0, 1e-3, 1e-3 * (1 + 2j), "modes"), rows])
    model = DecomposedModel.create(lo, hi, [(3,) * d, (1,) * d, (3, 2, 1)[:d]], overlap=overlap,
                                   ff_dim=spec.ff_dim, hidden_dim=spec.hidden_dim,
                                   num_hidden_layers=spec.num_hidden_layers, wavenumber=4.0,
                                   constraint=BoxConstraint(lo, hi, scale), seed=3)
    res = model.residuals_for(rows)
    value = np.all(rows.a == 0, axis=1) & np.all(rows.b == 0, axis=1)   # written again here
    alike = np.all(rows.a == rows.a[:, :1], axis=1)
    forms = set()
    for p in res.parts:
        half = model.subdomains[p["j"]]["half"]
        form = np.where(value[p["idx"]], np.where(rows.term[p["idx"]] == "modes", 0, 1),
                        np.where(alike[p["idx"]] & bool(np.all(half == half[0])), 2, 3))
        assert np.all(np.diff(form) >= 0)   # kept in that order
        assert p["counted"] == 2 * np.sum(form == 0)
        want = [(int(np.searchsorted(form, k)), int(np.searchsorted(form, k, "right"))) for k in range(4)]
        assert [(g.lo, g.hi) for g in p["batches"]] == [b for b in want if b[1] > b[0]]
        for g in p["batches"]:
            k = form[g.lo]
            assert (g.c is not None, "a_lap" in g.batch, "a_pde" in g.batch) == (k <= 1, k == 2, k == 3)
            assert ("x_data" in g.batch) == (k <= 1) and ("x_pde" in g.batch) == (k > 1)
            forms.add(int(k))
    assert forms == {0, 1, 2, 3}   # every form in every case (the grid (3, 2, 1) has unequal half-widths)
    monkeypatch.setattr(dm, "operator_a", lambda a: {"a_pde": a})
    monkeypatch.setattr(dm, "_row_kinds", lambda a, b, same, carrier: np.full(len(a), dm.GENERAL, np.int8))
    diag = model.residuals_for(rows)
    assert all("a_pde" in g.batch for p in diag.parts for g in p["batches"])
    theta = model.params
    rng = np.random.default_rng(7)
    v, w = rng.normal(size=model.num_params), rng.normal(size=res.num_residuals)
    pairs = [(res.residuals(theta), diag.residuals(theta)), (res.jvp(theta, v), diag.jvp(theta, v)),
             (res.vjp(theta, w), diag.vjp(theta, w)), (res.jacobian(theta), diag.jacobian(theta)),
             (res.jvp(theta, v, "float32"), diag.jvp(theta, v, "float32")),
             (res.vjp(theta, w, "float32"), diag.vjp(theta, w, "float32"))]
    for k, (got, want) in enumerate(pairs):
        assert np.abs(got - want).max() <= (1e-12 if k < 4 else 1e-5) * np.abs(want).max(), k
    j = next(j for j, p in enumerate(res.parts) if p["counted"])
    B32, B = res.block(theta, j, "float32"), res.block(theta, j)   # (B is the Jacobian's above)
    assert B32.dtype == np.float32 and np.abs(B32 - B).max() <= 1e-5 * np.abs(B).max()


@pytest.mark.parametrize("d", [1, 2, 3])
def test_windows_sum_to_one(d):
    model, rows, cfg = make_case(d)
    x = np.random.default_rng(3).uniform(model.lo, model.hi, (500, d))
    x[:d] = model.lo   # the box's corners and faces too
    x[d:2 * d] = model.hi
    s = model.window_sums(x)
    assert s.shape == (len(model.levels), 500)
    assert np.abs(s - 1).max() < 1e-14
    # every point is covered by at least one subdomain of each level
    covered = np.zeros(500, int)
    for _, idx, *_ in model.pieces(x, derivatives=False):
        covered[idx] += 1
    assert covered.min() >= len(model.levels)


def test_assembled_gram_product_equals_dense():
    model, rows, cfg = make_case(2, pml=True, hard=True, seed=2)
    res = model.residuals_for(rows)
    theta = model.params
    v = np.random.default_rng(0).normal(size=model.num_params)
    J = res.jacobian(theta)
    assert np.allclose(res.vjp(theta, res.jvp(theta, v)), J.T @ (J @ v), rtol=1e-12, atol=1e-10)
    # block by block from the overlaps: JᵀJ's block (i, j) = J_i[shared]ᵀ J_j[shared]
    blocks = [res.block(theta, j) for j in range(len(res.parts))]
    G = np.zeros((model.num_params,) * 2)
    for i, j, pi, pj in res.overlaps():
        ri = np.stack([2 * pi, 2 * pi + 1], 1).ravel()
        rj = np.stack([2 * pj, 2 * pj + 1], 1).ravel()
        Bij = blocks[i][ri].T @ blocks[j][rj]
        si, sj = res.parts[i]["slice"], res.parts[j]["slice"]
        G[si, sj] += Bij
        if i != j:
            G[sj, si] += Bij.T
    assert np.allclose(G, J.T @ J, rtol=1e-12, atol=1e-10)


def test_save_load_predict(tmp_path):
    model, rows, cfg = make_case(2, hard=True)
    model.metadata["note"] = "x"
    p = tmp_path / "m.npz"
    model.save(p)
    back = DecomposedModel.load(p)
    assert np.array_equal(back.params, model.params) and back.metadata == {"note": "x"}
    assert np.array_equal(back.predict(rows.x), model.predict(rows.x))
    assert [f.name for f in tmp_path.iterdir()] == ["m.npz"]
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.npz"):
        DecomposedModel.load(tmp_path / "bad.npz")


def test_errors_name_the_argument():
    model, rows, cfg = make_case(2)
    with pytest.raises(ValueError, match="outside"):
        model.predict(np.array([[5.0, 0.0]]))
    with pytest.raises(ValueError, match="x: expected points"):
        model.predict(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="grid"):
        Level([0, 0], [1, 1], (2,))
    with pytest.raises(ValueError, match="overlap"):
        Level([0, 0], [1, 1], (2, 2), overlap=0)
    with pytest.raises(ValueError, match="params"):
        model.predict(rows.x, params=np.zeros(3))
    with pytest.raises(ValueError, match="scale"):
        BoxConstraint([0], [1], -1)


def test_subnetwork_shares_params():
    model, rows, cfg = make_case(1)
    net = model.subnetwork(1)
    net.params[0] += 1.0
    assert model.params[model.subdomains[1]["slice"]][0] == net.params[0]
    assert math.isfinite(float(np.abs(model.predict(rows.x)).max()))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_fourier_scale_is_a_single_networks_at_the_local_wavenumber(d):
    """Each subnetwork's B ~ N(0, σ²) with σ = k h / (2π sqrt(d)), h its level's mean half-width:
    the draws of init_params at that σ and the seeds the model draws, level by level; and
    build_decomposed_model(sigma=s) gives the first level exactly s."""
    from helmpinn import init_params
    from helmpinn.training.dd_driver import build_decomposed_model
    from helmpinn.params import sigma_for

    lo, hi, grids, k = np.zeros(d), np.arange(1, d + 1, dtype=float), [(3,) * d, (1,) * d], 7.0
    spec = ModelSpec(d, 4, 6, 1)
    model = DecomposedModel.create(lo, hi, grids, overlap=0.5, ff_dim=4, hidden_dim=6, num_hidden_layers=1,
                                   wavenumber=k, seed=5)
    rng = np.random.default_rng(5)
    for sd in model.subdomains:
        h = np.mean(Level(lo, hi, grids[sd["level"]], 0.5).half)
        sigma = k * h / (2 * math.pi * math.sqrt(d))
        want = init_params(spec, "float64", seed=int(rng.integers(1 << 31)), fourier_sigma=sigma)
        np.testing.assert_array_equal(model.params[sd["slice"]], want)
    dd = {"lo": lo, "hi": hi, "grids": grids, "overlap": 0.5, "wavenumber": k, "constraint": False}
    built = build_decomposed_model(None, dd, 4, 6, 1, seed=5, sigma=0.3)
    B = next(slice(off, off + int(np.prod(shape))) for name, shape, off in spec.layout() if name == "B")
    rng = np.random.default_rng(5)
    want = init_params(spec, "float64", seed=int(rng.integers(1 << 31)), fourier_sigma=0.3)
    np.testing.assert_allclose(built.params[built.subdomains[0]["slice"]][B], want[B], rtol=1e-12)
    for bad, name in ((-1.0, "wavenumber"), (math.nan, "wavenumber"), ("7", "wavenumber")):
        with pytest.raises((TypeError, ValueError), match=name):
            sigma_for(bad, d)
    with pytest.raises(ValueError, match="dim"):
        sigma_for(k, 0)


def test_rows_from_problem_match_the_core_loss():
    """Rows of a problem's draw, on a one-subdomain model with ω = 1, give the core's own
    residuals of that network on the same TrainingSet (PML coefficients, wall data rows)."""
    import helmpinn as hp
    prob = hp.get_problem("free-source", wavelengths=1.0, s=0.2)
    ts = prob.sample(60, 16, 0, "uniform")
    rows = Rows.from_training_set(ts, {"pde": 1.0, "data": 3.0})
    lo, hi = prob.sampling_domain.bounds
    model = DecomposedModel.create(lo, hi, [(1, 1)], ff_dim=4, hidden_dim=6, wavenumber=prob.wavenumber)
    r = model.residuals_for(rows).residuals(model.params)
    # the same network in global coordinates: x = c + h ξ, so B_global = B / h, the rest equal
    sd = model.subdomains[0]
    spec = model.specs[0]
    theta = model.params.copy()
    v = spec.views(theta)
    v["B"][...] = v["B"] / sd["half"][:, None]
    # and shift the phase: sin(2π (x − c)·B) needs the centre at 0 here
    assert np.allclose(sd["centre"], 0.0)
    ws = hp.Workspace(spec, 256, dtype="float64")
    r_core = np.asarray(ws.residuals(theta, batch=ts.to_batch("float64"), w_data=3.0))
    assert np.allclose(r, r_core, rtol=1e-10, atol=1e-10 * np.abs(r_core).max())
    assert len(Rows.from_problem(prob, 10, 4, 0)) == 14


@pytest.mark.parametrize("d,pml,hard,sparse", [(1, False, False, False), (2, True, True, False), (3, True, True, False),
                                               (2, True, False, True)])
def test_mode_rows_extend_the_residuals(d, pml, hard, sparse):
    """Mode rows (``modes=M [N, q]``, dense or scipy.sparse): the residuals are the point rows' with
    ``Mᵀ r_re, Mᵀ r_im`` after them; J v (against central differences), the dense Jacobian and Jᵀw
    agree with them; the term losses count the point rows only; ``J_jᵀ F_j`` of
    ``mode_columns(j)`` is subnetwork j's share of the mode rows' Jacobian (in the columns it
    names: sparse columns local to a part of the domain read only some parts)."""
    model, rows, _ = make_case(d, pml=pml, hard=hard, seed=2)
    rng = np.random.default_rng(7)
    M = rng.normal(size=(len(rows), 3))
    M[rows.term != "pde"] = 0.0
    if sparse:   # columns local to the left or the right of the domain, as the radiation rows' windows
        M[rows.x[:, 0] > np.median(rows.x[:, 0]), 0] = 0.0
        M[rows.x[:, 0] <= np.median(rows.x[:, 0]), 1] = 0.0
    plain = model.residuals_for(rows)
    res = model.residuals_for(rows, modes=scipy.sparse.csr_matrix(M) if sparse else M)
    if sparse:
        assert any(len(res.mode_columns(j)[1]) < 6 for j in range(len(res.parts)))
    theta = model.params
    r0, r = plain.residuals(theta), res.residuals(theta)
    n = len(r0)
    assert res.num_residuals == len(r) == n + 6 and res.num_points == n and res.num_modes == 3
    np.testing.assert_array_equal(r[:n], r0)
    np.testing.assert_allclose(r[n:], np.concatenate([M.T @ r0[0::2], M.T @ r0[1::2]]), rtol=1e-12, atol=1e-12)
    v = rng.normal(size=model.num_params)
    eps = 1e-5
    fd = (res.residuals(theta + eps * v) - res.residuals(theta - eps * v)) / (2 * eps)
    Jv = res.jvp(theta, v)
    assert np.abs(Jv - fd).max() < 1e-6 * np.abs(fd).max()
    J = res.jacobian(theta)
    assert J.shape == (n + 6, model.num_params)
    np.testing.assert_allclose(J @ v, Jv, rtol=0, atol=1e-11 * np.abs(Jv).max())
    w = rng.normal(size=res.num_residuals)
    np.testing.assert_allclose(res.vjp(theta, w), J.T @ w, rtol=0, atol=1e-11 * np.abs(J).max() * len(w))
    assert np.abs(res.jvp(theta, v, "float32") - Jv).max() < 1e-5 * np.abs(Jv).max()
    assert res.term_losses(r) == plain.term_losses(r0)
    for j, p in enumerate(res.parts):
        F, cols = res.mode_columns(j)   # the mode rows that read part j; the others are 0 in it
        Uj = np.zeros((len(range(*p["slice"].indices(res.num_params))), 2 * res.num_modes))
        Uj[:, cols] = res.block(theta, j).T @ F
        np.testing.assert_allclose(Uj, J[n:, p["slice"]].T, rtol=0, atol=1e-11 * max(1.0, np.abs(Uj).max()))
    for bad in (M[:-1], M[:, :, None], np.where(M == M.max(), np.nan, M), scipy.sparse.csr_matrix(M[:-1])):
        with pytest.raises(ValueError, match=r"modes: expected finite numbers \[%d, q\]" % len(rows)):
            model.residuals_for(rows, modes=bad)
    assert model.residuals_for(rows, modes=M[:, :0]).num_modes == 0   # no columns: no mode rows


# -- hostile inputs (issue 61) ------------------------------------------------------------------
def _small(grid=(9, 9), **kw):
    return DecomposedModel.create([0, 0], [1, 1], [grid], ff_dim=2, hidden_dim=4, wavenumber=10.0, **kw)


def _peak_bytes(fn):
    """``fn()``'s result and the peak of the memory NumPy allocated meanwhile (tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_predict_memory_is_bounded_by_the_chunk_and_the_output():
    """Finding 4: predict took the windows of all points at once ([grid, N] arrays several
    times over: 2 M points on 9 x 9 took 1.6 GB); chunked, the peak is the chunk's, and the
    result the same whatever the chunk."""
    model = _small((20, 20))
    x = np.random.default_rng(0).random((40_000, 2))
    u, peak = _peak_bytes(lambda: model.predict(x))
    assert peak < 16 << 20   # the windows of all points at once: [20, 40000] arrays, about 60 MB
    assert np.array_equal(model.predict(x, chunk=len(x)), u)
    assert np.array_equal(model.predict(x, chunk=1001), u)


def test_residual_builder_windows_are_bounded_by_the_chunk():
    """Finding 4, the residual builder: pieces() held [grid, N] windows of every point for every
    axis; now its scratch is a chunk's and the rest the output it yields."""
    model = _small((30, 30))
    x = np.random.default_rng(1).random((60_000, 2))

    def consume():
        return sum(len(idx) for _, idx, *_ in model.pieces(x))
    covered, peak = _peak_bytes(consume)
    output = covered * (8 + 8 + 3 * 16)   # idx, ψ, ∂ψ, ∂²ψ, ξ per covered point
    assert peak < 2 * output + (8 << 20)


def test_windows_are_the_dense_ones():
    """The candidate windows (Level.axis_candidates) hold exactly the nonzero entries of the
    dense ones (Level.axis_windows), with the same numbers."""
    rng = np.random.default_rng(2)
    for overlap in (0.05, 0.6, 2.5):
        lv = Level([-0.7, 0.2], [1.3, 0.9], (7, 3), overlap)
        x = np.concatenate([[lv.lo, lv.hi], lv.lo + (lv.hi - lv.lo) * rng.random((3000, 2))])
        dense = lv.axis_windows(x)
        for a in range(2):
            i, *w = lv.axis_candidates(x[:, a], a)
            for m in range(3):
                sparse = np.zeros_like(dense[a][m])
                np.add.at(sparse, (np.where(i >= 0, i, 0), np.broadcast_to(np.arange(len(x)), i.shape)),
                          np.where(i >= 0, w[m], 0.0))
                assert np.array_equal(sparse, dense[a][m])


def _write(path, params, cfg):
    import json

    np.savez(path, params=np.asarray(params), config=np.array(json.dumps(cfg)))


def test_load_checks_the_grid_against_the_parameters_before_enumerating(tmp_path, monkeypatch):
    """Finding 5: a 1 KB file with grid [200000, 200000] made load enumerate 4e10 subdomains."""
    import helmpinn.models.decomposition as dec

    model = _small((2, 2))
    cfg = model.config()
    cfg["levels"][0]["grid"] = [200000, 200000]
    _write(tmp_path / "huge.npz", model.params, cfg)
    with pytest.raises(ValueError, match=r"huge\.npz.*subdomains, more than"):
        DecomposedModel.load(tmp_path / "huge.npz")

    def no_level(*args, **kwargs):
        raise AssertionError("a Level was made before the parameters were counted")
    cfg["levels"][0]["grid"] = [300, 300]   # within the bound, but not these parameters' grid
    _write(tmp_path / "wrong.npz", model.params, cfg)
    monkeypatch.setattr(dec, "Level", no_level)
    with pytest.raises(ValueError, match=r"wrong\.npz.*need a float vector of [0-9,]+ parameters"):
        DecomposedModel.load(tmp_path / "wrong.npz")


def test_load_refuses_a_fifo_without_blocking(tmp_path):
    """Finding 6: load opened a FIFO and waited for a writer forever; Model.load's check."""
    import os
    import threading

    fifo = tmp_path / "model.npz"
    os.mkfifo(fifo)
    got = []

    def load():
        try:
            DecomposedModel.load(fifo)
        except ValueError as exc:
            got.append(str(exc))
    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():   # unblock it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail("DecomposedModel.load blocked on a FIFO")
    assert got and "not a regular file" in got[0] and "model.npz" in got[0]


def test_load_checks_what_model_load_checks(tmp_path):
    """Finding 17: NaN parameters, an infinite box, a constraint on another box or of an
    unknown kind were accepted."""
    model = _small((2, 2), constraint=BoxConstraint([0, 0], [1, 1], 0.1))
    cfg = model.config()
    bad = model.params.copy()
    bad[3] = np.nan
    cases = {"nan": (bad, cfg, "NaN"),
             "inf": (model.params, {**cfg, "hi": [math.inf, 1.0]}, "finite"),
             "other": (model.params, {**cfg, "constraint": {**cfg["constraint"], "hi": [2.0, 1.0]}}, "not the model's"),
             "kind": (model.params, {**cfg, "constraint": {**cfg["constraint"], "kind": "ball"}},
                      "unknown kind 'ball'"),
             "spec": (model.params, {**cfg, "specs": [[2, 2.5, 4, 1]]}, "integer"),
             "overlap": (model.params, {**cfg, "levels": [{"grid": [2, 2], "overlap": "0.5"}]}, "overlap")}
    for name, (params, c, why) in cases.items():
        _write(tmp_path / f"{name}.npz", params, c)
        with pytest.raises(ValueError, match=rf"{name}\.npz.*{why}"):
            DecomposedModel.load(tmp_path / f"{name}.npz")
    with pytest.raises(ValueError, match="not the model's"):
        DecomposedModel.create([0, 0], [1, 1], [(2, 2)], constraint=BoxConstraint([0, 0], [2, 1], 0.1))
    model.save(tmp_path / "good.npz")   # the checks pass a model's own file
    assert np.array_equal(DecomposedModel.load(tmp_path / "good.npz").params, model.params)


def test_pickle_and_deepcopy_after_predict():
    """Finding 12: the cached Workspace made a model that had predicted unpicklable."""
    import copy
    import pickle

    model = _small((2, 2))
    x = np.random.default_rng(3).random((50, 2))
    u = model.predict(x)
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert np.array_equal(other.predict(x), u)
    assert model._ws   # the original keeps its cache


def test_receivers_record_a_plain_decomposed_model():
    """Finding 13: record read model.in_dim, which only the run loop's wrapper had."""
    from helmpinn.receivers import receiver_line, record

    model = _small((2, 2))
    rec = record(model, receiver_line((0.1, 0.5), (0.9, 0.5), 11))
    assert np.array_equal(rec["u"], model.predict(rec["x"]))


@pytest.mark.parametrize("entry, value, why", [
    ("constraint", "no", "constraint must be True, False or None"),
    ("coarse_level", 1, "coarse_level must be True or False"),
    ("ff_dim", 1.5, "ff_dim must be an integer"),
    ("hidden", 0, "hidden must be an integer >= 1"),
    ("grids", [[3.5, 2]], r"grids\[0\] must be an integer"),
    ("grids", [[3]], r"grids\[0\]: expected 2 counts"),
    ("grids", [[200000, 200000]], r"grids\[0\]: 200000 x 200000 = .* subdomains, more than"),
    ("points_per_wavelength", -1, "points_per_wavelength must be a finite number > 0"),
    ("subdomains_per_wavelength", math.nan, "subdomains_per_wavelength must be a finite number"),
    ("overlap", "0.5", "overlap must be a real number"),
    ("overlap", 5, "overlap must be a finite number >= 0.01 and <= 4"),
])
def test_solve_checks_each_decomposition_entry(entry, value, why):
    """Finding 16: hp.solve(decomposition={...}) converted its entries ("no" became True, 1.5
    became 1, grids were truncated, a negative density was taken); each is checked and named,
    before anything is trained."""
    import helmpinn as hp

    with pytest.raises((TypeError, ValueError), match=f"decomposition: {why}"):
        hp.solve("box-source", model="decomposed", progress=False, decomposition={entry: value})


def test_solve_refuses_the_hard_constraint_on_nonzero_boundary_data():
    """Finding 16: constraint=True forced u = 0 on walls whose data is not zero."""
    import helmpinn as hp
    from helmpinn.training.dd_driver import decomposed_settings

    with pytest.raises(ValueError, match="constraint=True .* boundary condition 'xmin' is Dirichlet"):
        hp.solve("heterogeneous2d", model="decomposed", progress=False, decomposition={"constraint": True})
    with pytest.raises(TypeError, match="decomposition: expected a dict"):
        hp.solve("box-source", model="decomposed", progress=False, decomposition=[("constraint", True)])
    assert decomposed_settings(hp.get_problem("box-source"), constraint=True)["decomposition"]["constraint"] is True
    assert decomposed_settings(hp.get_problem("free-source"), constraint=True)["decomposition"]["constraint"] is True
