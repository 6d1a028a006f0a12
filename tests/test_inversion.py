"""helmpinn.invert: the joint residual's exact Jacobian (network and medium columns) against
central differences in float64, the arrowhead LM step against the dense one, the spline medium
against GridField, bad input, and save/load."""
from __future__ import annotations

import types

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.geometry import Box
from helmpinn.inversion import ArrowheadLM, JointResiduals, SplineMedium, WavefieldRows
from helmpinn.inversion.api import FIRST_STAGE_SHARE, _stage_deadline
from helmpinn.optim import StepStatus

DOMAIN = Box([0.0, 0.0], [1.0, 1.0])


def _problem(pml, f: float = 1.2):
    """pml: False (Sommerfeld faces), True (a PML all round) or the faces that carry it (the
    others free surfaces, u = 0)."""
    source = hp.PointSource((0.5, 0.45), width=0.1)
    if pml:
        faces = None if pml is True else pml
        return hp.Problem(DOMAIN, frequency=f, velocity=1.0, source=source, pml=hp.PML(0.3, faces=faces))
    return hp.Problem(DOMAIN, frequency=f, velocity=1.0, source=source,
                      bcs={"*": hp.Sommerfeld(2 * np.pi * f)})


def _rows(pml, medium: SplineMedium, seed: int = 1, n: int = 30):
    rng = np.random.default_rng(seed)
    rec = rng.uniform(0.1, 0.9, (6, 2))
    data = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    return WavefieldRows(_problem(pml), medium, (2 * np.pi * 1.2) ** 2, rec, data, rng.uniform(0.5, 1.5, 6),
                         pde_points=n, boundary_points=10, lambda_data=3.0, scale=0.7, rng=rng)


def _central(fun, x, h=1e-6):
    cols = []
    for i in range(len(x)):
        e = np.zeros_like(x)
        e[i] = h
        cols.append((fun(x + e) - fun(x - e)) / (2 * h))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("pml", [False, True, ("xmin", "xmax", "ymax")], ids=["robin", "pml", "free-surface"])
def test_joint_jacobian_matches_central_differences(pml):
    medium = SplineMedium([0, 0], [1, 1], (5, 6))
    w = _rows(pml, medium)
    model = hp.Model.create(2, 3, 5, 1, dtype="float64", seed=0, fourier_sigma=1.0)
    ws = JointResiduals([w], model.spec, medium, None).workspace
    theta = model.params.copy()
    c = medium.fit(lambda x: 1 + 0.2 * np.sin(3 * x[:, 0]) * x[:, 1])
    assert (w.sizes["wall"] > 0) == bool(pml) and (w.sizes["bc"] > 0) != bool(pml)   # a free surface: wall rows
    J = w.jacobian(ws, theta, c)
    Jm = w.medium_jacobian(ws, theta).toarray()
    Ft = _central(lambda t: w.residuals(ws, t, c), theta)
    Fm = _central(lambda cc: w.residuals(ws, theta, cc), c)
    assert np.abs(Jm).max() > 0
    assert np.abs(J - Ft).max() < 1e-7 * np.abs(Ft).max()
    assert np.abs(Jm - Fm).max() < 1e-7 * np.abs(Fm).max()


def test_arrowhead_step_is_the_dense_lm_step():
    """Eliminating the wavefield blocks gives the step of the whole damped system."""
    medium = SplineMedium([0, 0], [1, 1], (4, 5))
    rows = [_rows(True, medium, seed=s, n=25) for s in (1, 2)]
    model = hp.Model.create(2, 3, 5, 1, dtype="float64", seed=0, fourier_sigma=1.0)
    reg = 0.1 * medium.gradient_rows(1.0)
    joint = JointResiduals(rows, model.spec, medium, reg)
    thetas = [model.params.copy(), model.params.copy() * 1.01]
    c = medium.fit(1.0)
    lm = ArrowheadLM(joint)
    blocks, C, gm, loss, _, _ = lm._linearize(thetas, c)
    D, Dm = lm._damping(blocks, C)
    dthetas, dc, pred_m, pred_w = lm._solve(0.01, blocks, C, gm, D, Dm)
    pred = pred_m + pred_w
    # the dense system from the full Jacobian
    P, M = model.num_params, medium.size
    ws = joint.workspace
    r = np.concatenate([w.residuals(ws, t, c) for w, t in zip(rows, thetas)] + [reg @ c])
    J = np.zeros((len(r), 2 * P + M))
    start = 0
    for i, (w, t) in enumerate(zip(rows, thetas)):
        n = w.num_residuals
        J[start:start + n, i * P:(i + 1) * P] = w.jacobian(ws, t, c)
        J[start:start + n, 2 * P:] = w.medium_jacobian(ws, t).toarray()
        start += n
    J[start:, 2 * P:] = reg.toarray()
    d = np.concatenate(D + [Dm])
    delta = np.linalg.solve(J.T @ J + 0.01 * np.diag(d), J.T @ r)
    assert np.allclose(np.concatenate(dthetas + [dc]), delta, rtol=1e-6, atol=1e-9 * np.abs(delta).max())
    assert abs(loss - r @ r) < 1e-12 * loss
    assert pred > 0


def _arrowhead_case():
    medium = SplineMedium([0, 0], [1, 1], (4, 5))
    rows = [_rows(True, medium, seed=s, n=25) for s in (1, 2)]
    model = hp.Model.create(2, 3, 5, 1, dtype="float64", seed=0, fourier_sigma=1.0)
    joint = JointResiduals(rows, model.spec, medium, 0.1 * medium.gradient_rows(1.0))
    return joint, [model.params.copy(), model.params.copy() * 1.01], medium.fit(1.0)


def test_arrowhead_step_is_the_damped_trial_loop_on_its_solve():
    """ArrowheadLM.step is Damped.trials on the arrowhead solve: the trials' λ grow by the rule
    until the projected point θ − δ(λ) (the medium clipped to the bounds) lowers the joint loss;
    that point is taken, its loss recorded, λ lowered by the rule."""
    joint, thetas, c = _arrowhead_case()
    bounds = (0.97, 1.03)
    by_hand = ArrowheadLM(joint, lam=1e-6, bounds=bounds)
    blocks, C, gm, loss, _, _ = by_hand._linearize(thetas, c)
    D, Dm = by_hand._damping(blocks, C)
    lam = 1e-6
    for trial in range(1, 9):
        dthetas, dc, pred_m, pred_w = by_hand._solve(lam, blocks, C, gm, D, Dm)
        new_thetas, new_c = [t - d for t, d in zip(thetas, dthetas)], np.clip(c - dc, *bounds)
        new_loss = joint.loss(new_thetas, new_c)
        if new_loss < loss and pred_m + pred_w > 0:
            break
        lam *= 4
    assert trial > 1   # rejected trials came first
    lm = ArrowheadLM(joint, lam=1e-6, bounds=bounds)
    mine = [t.copy() for t in thetas]
    rec, c1 = lm.step(mine, c)
    assert rec.status is StepStatus.ACCEPTED and rec.trials == trial and rec.loss0 == pytest.approx(loss, rel=1e-13)
    assert rec.loss == pytest.approx(new_loss, rel=1e-13) and rec.lam == pytest.approx(lam / 3, rel=1e-15)
    np.testing.assert_allclose(c1, new_c, rtol=1e-12, atol=0)
    assert all(np.allclose(a, b, rtol=1e-12, atol=1e-15) for a, b in zip(mine, new_thetas))
    assert bounds[0] <= c1.min() and c1.max() <= bounds[1] and np.any(np.isin(c1, bounds))   # projected
    assert set(rec.times) == {"linearize", "solve", "trial", "varpro"}


def test_arrowhead_step_rejected_at_lam_max_says_so_and_changes_nothing():
    joint, thetas, c = _arrowhead_case()
    lm = ArrowheadLM(joint, lam=1e-6, lam_max=3e-6)
    mine = [t.copy() for t in thetas]
    rec, c1 = lm.step(mine, c)
    assert rec.status is StepStatus.LAM_MAX and not rec.accepted and rec.trials == 2 and lm.lam == 3e-6
    assert c1 is c and all(np.array_equal(a, b) for a, b in zip(mine, thetas)) and rec.loss == rec.loss0


@pytest.mark.parametrize("kw, word", [({"lam": -1.0}, "lam"), ({"update": "x"}, "update"),
                                      ({"max_trials": 0}, "max_trials"), ({"lam_max": 1e-20}, "lam_max")])
def test_arrowhead_settings_are_checked_naming_the_argument(kw, word):
    joint, _, _ = _arrowhead_case()
    with pytest.raises(ValueError, match=word):
        ArrowheadLM(joint, **kw)


def test_spline_medium_is_the_gridfield_of_its_node_values():
    medium = SplineMedium([0, 0], [1, 1.2], (6, 7))
    c = np.random.default_rng(0).standard_normal(medium.size)
    field = medium.gridfield(c)
    x = np.random.default_rng(1).uniform(-0.2, 1.3, (200, 2))
    assert np.allclose(medium.values(c, x), field(x), atol=1e-12)
    # the regularisation's quadrature of L²/|box| ∫|∇m|² for m = 1 + x² (exact: 1.44 × 4/3)
    G = medium.gradient_rows(1.0)
    c2 = medium.fit(lambda p: 1 + p[:, 0] ** 2)
    assert abs(np.sum((G @ c2) ** 2) - 1.44 * 4 / 3) < 1e-10


def _survey(S=1, F=1, R=5):
    rng = np.random.default_rng(0)
    return types.SimpleNamespace(
        sources=[hp.PointSource((0.5, 0.5), width=0.1)] * S,
        receivers=rng.uniform(0.2, 0.8, (R, 2)), frequencies=np.arange(1.0, F + 1.0),
        data=np.ones((F, S, R), complex), weights=None)


@pytest.mark.parametrize("change, match", [
    (dict(domain="box"), "domain must be"),
    (dict(bounds=(1.5, 2.0)), "exclude the initial model"),
    (dict(bounds=(1.0, 0.5)), "bounds"),
    (dict(warm_start="later"), "warm_start"),
    (dict(time_limit=-1), "time_limit"),
    (dict(network=(4, 4)), "network"),
    (dict(initial=-1.0), "initial"),
    (dict(regularization_decay=-0.1), "regularization_decay"),
    (dict(regularization_decay=2.0), "regularization_decay"),
])
def test_invert_refuses_bad_arguments(change, match):
    kw = dict(domain=DOMAIN, initial=1.0, bounds=(0.5, 2.0))
    kw.update(change)
    initial = kw.pop("initial")
    with pytest.raises((TypeError, ValueError), match=match):
        hp.invert(_survey(), initial, **kw)


def test_each_stage_s_regularisation_is_the_previous_one_s_times_the_decay():
    """Stage k's regularisation weight is ``regularization × regularization_decay^k``: without
    steps every stage starts from the initial medium, so the difference between the stage
    starts' losses of two decays is ``β ‖G c‖² (d₁^k − d₂^k)`` (G the medium's gradient rows)."""
    sv = _survey(F=3)
    initial = lambda x: 1.0 + 0.2 * x[:, 0] * x[:, 1]   # noqa: E731 - a medium whose gradient is not 0
    kw = dict(domain=DOMAIN, bounds=(0.5, 2.0), network=(3, 6, 1), pde_points=60, boundary_points=16,
              max_steps=0, regularization=1e-3)
    runs = {d: hp.invert(sv, initial, regularization_decay=d, **kw) for d in (1.0, 0.1, 0.0)}
    inv = runs[1.0]
    G = inv.medium.gradient_rows(float(np.mean(inv.initial_coefficients)))
    reg = 1e-3 * float(np.sum((G @ inv.initial_coefficients) ** 2))
    assert reg > 1e-6
    assert [h["stage"] for h in inv.history] == [0, 1, 2]
    for d in (0.1, 0.0):
        for k, (a, b) in enumerate(zip(runs[1.0].history, runs[d].history)):
            assert abs((a["loss"] - b["loss"]) - reg * (1.0 - d ** k)) < 1e-9 * a["loss"]


def test_invert_validates_a_survey_against_its_domain_and_pml():
    sv = hp.Survey([hp.PointSource((0.5, 0.5), width=0.1)], [[0.5, 0.5], [1.1, 0.5]], [1.0],
                   np.ones((1, 1, 2), complex))
    with pytest.raises(ValueError, match="receiver"):
        hp.invert(sv, 1.0, domain=DOMAIN, pml=hp.PML(0.3))


def test_invert_refuses_bad_data():
    sv = _survey()
    sv.data = np.full((1, 1, 5), np.nan, complex)
    with pytest.raises(ValueError, match="finite"):
        hp.invert(sv, 1.0, domain=DOMAIN)
    sv.data = np.ones((2, 1, 5), complex)
    with pytest.raises(ValueError, match="shape"):
        hp.invert(sv, 1.0, domain=DOMAIN)


def test_invert_runs_and_saves(tmp_path):
    """A tiny run end to end: steps recorded, the loss falls, save/load keeps everything."""
    rec = np.random.default_rng(0).uniform(0.2, 0.8, (8, 2))
    sv = hp.Survey([hp.PointSource((0.5, 0.5), width=0.1)], rec, [1.0],
                   0.05 * np.exp(1j * np.linspace(0, 3, 8))[None, None, :])
    inv = hp.invert(sv, 1.0, domain=DOMAIN, bounds=(0.8, 1.25), true=lambda x: 1 + 0.1 * x[:, 0],
                    network=(3, 6, 1), pde_points=60, boundary_points=16, max_steps=3, fit_steps=1)
    assert len(inv.history) >= 2 and inv.history[-1]["loss"] < inv.history[0]["loss"]
    assert "velocity_error" in inv.history[-1] and inv.success
    v = inv.velocity(np.array([[0.5, 0.5]]))
    assert 0.8 - 1e-9 <= v[0] <= 1.25 + 1e-9
    path = inv.save(tmp_path / "inv.npz")
    back = hp.Inversion.load(path)
    assert np.array_equal(back.coefficients, inv.coefficients) and back.history == inv.history
    x = np.array([[0.3, 0.4], [0.7, 0.2]])
    assert np.array_equal(back.predict(0, 0, x), inv.predict(0, 0, x))
    figure = inv.plot(tmp_path / "inv.png")
    with open(figure, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "bad.npz").write_bytes(b"not a file")
    with pytest.raises(ValueError, match="bad.npz"):
        hp.Inversion.load(tmp_path / "bad.npz")


# -- stopping and continuing a run --------------------------------------------------------------
def _two_stage_survey(S=2):
    rng = np.random.default_rng(0)
    sources = [hp.PointSource((0.3 + 0.4 * s / max(S - 1, 1), 0.5), width=0.1) for s in range(S)]
    return hp.Survey(sources, rng.uniform(0.2, 0.8, (8, 2)), [1.0, 1.5],
                     0.05 * np.exp(1j * rng.uniform(0, 3, (2, S, 8))))


SMALL = dict(domain=DOMAIN, bounds=(0.8, 1.25), network=(3, 6, 1), pde_points=60, boundary_points=16,
             max_steps=3, tol=0.0)


def _stop_at(k):
    """A callback that asks to stop at its k-th call (counting every history entry)."""
    calls = []

    def callback(entry):
        calls.append(entry)
        return len(calls) == k
    return callback


def _same_run(a, b):
    """Bit for bit: the medium, every network, and the history but for its times."""
    strip = lambda h: [{k: v for k, v in e.items() if k != "time"} for e in h]  # noqa: E731
    assert np.array_equal(a.coefficients, b.coefficients)
    assert sorted(a.params) == sorted(b.params)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert strip(a.history) == strip(b.history) and a.status == b.status


@pytest.fixture(scope="module")
def uninterrupted():
    return {ws: hp.invert(_two_stage_survey(), 1.0, warm_start=ws, **SMALL) for ws in ("fd", "previous")}


# The entries: 1 stage 0's start, 2-4 its steps, 5 stage 1's start, 6-8 its steps. A stop asked
# at entry 2 or 3 ends stage 0 part-way; at 4 or 5 before stage 1 (the request is honoured
# after stage 1's first step when asked at its start entry: 5); at 6 inside stage 1.
@pytest.mark.parametrize("warm_start, k", [("fd", 2), ("fd", 4), ("fd", 6), ("previous", 3), ("previous", 7)])
def test_a_stopped_run_continued_is_the_uninterrupted_run(uninterrupted, tmp_path, warm_start, k):
    """Every step is a function of the saved state (the medium, the networks, LM's λ, ν and
    damping, the stage's starting medium; each wavefield's points from its own seed), so a
    continued run repeats the uninterrupted one bit for bit, whether it stopped inside a
    stage or between two, in this process and thread count."""
    sv = _two_stage_survey()
    stopped = hp.invert(sv, 1.0, warm_start=warm_start, callbacks=[_stop_at(k)], **SMALL)
    assert stopped.status == 3 and stopped.success and stopped.resume is not None
    assert len(stopped.history) == (k if k != 5 else 6)
    path = stopped.save(tmp_path / "stopped.npz")
    back = hp.Inversion.load(path)
    assert back.resume["steps"] == stopped.resume["steps"] and np.array_equal(
        back.resume["stage_coefficients"], stopped.resume["stage_coefficients"])
    done = hp.invert(sv, None, warm_start=warm_start, start=path, **SMALL)
    assert done.resume is None
    _same_run(done, uninterrupted[warm_start])


def test_a_run_stopped_twice_and_continued_from_the_object(uninterrupted):
    sv = _two_stage_survey()
    first = hp.invert(sv, 1.0, callbacks=[_stop_at(2)], **SMALL)
    second = hp.invert(sv, 1.0, start=first, callback=_stop_at(2), **SMALL)   # initial given: checked
    assert second.status == 3 and len(second.history) == 4      # stopped between the stages
    assert (second.resume["stage"], second.resume["steps"]) == (1, 0)
    _same_run(hp.invert(sv, None, start=second, **SMALL), uninterrupted["fd"])


def test_a_run_saved_before_the_stage_decay_continues_with_a_fixed_weight():
    """A record without ``regularization_decay`` (a run saved before the option existed) is one
    that ran with a fixed β: it continues with regularization_decay=1 and is refused, naming
    both values, with the new default."""
    sv = _two_stage_survey()
    stopped = hp.invert(sv, 1.0, callbacks=[_stop_at(2)], regularization_decay=1.0, **SMALL)
    del stopped.resume["settings"]["regularization_decay"]
    with pytest.raises(ValueError, match="regularization_decay 1.0 there, 0.1 here"):
        hp.invert(sv, None, start=stopped, **SMALL)
    done = hp.invert(sv, None, start=stopped, regularization_decay=1.0, **SMALL)
    _same_run(done, hp.invert(sv, 1.0, regularization_decay=1.0, **SMALL))


def test_continuing_refuses_what_does_not_continue(uninterrupted, tmp_path):
    sv = _two_stage_survey()
    with pytest.raises(ValueError, match="nothing to continue"):
        hp.invert(sv, 1.0, start=uninterrupted["fd"], **SMALL)
    stopped = hp.invert(sv, 1.0, callbacks=[_stop_at(2)], **SMALL)
    with pytest.raises(ValueError, match="seed 0 there, 1 here"):
        hp.invert(sv, None, start=stopped, **{**SMALL, "seed": 1})
    other = _two_stage_survey()
    other.data[0, 0, 0] *= 2
    with pytest.raises(ValueError, match="survey"):
        hp.invert(other, None, start=stopped, **SMALL)
    with pytest.raises(ValueError, match="initial is not the initial model"):
        hp.invert(sv, 1.1, start=stopped, **SMALL)
    with pytest.raises(TypeError, match="start must be"):
        hp.invert(sv, None, start=3, **SMALL)
    with pytest.raises(TypeError, match="initial .* is required"):
        hp.invert(sv, None, **SMALL)
    with pytest.raises(TypeError, match="callbacks"):
        hp.invert(sv, 1.0, callbacks=[3], **SMALL)
    with pytest.raises(TypeError, match="comm"):
        hp.invert(sv, 1.0, comm="world", **SMALL)
    # a file whose resume state was tampered with is refused by name
    import json
    path = stopped.save(tmp_path / "s.npz")
    with np.load(path) as z:
        arrays = dict(z)
    header = json.loads(str(arrays["header"][()]))
    header["resume"]["stage"] = 7
    arrays["header"] = np.array(json.dumps(header))
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="bad.npz.*out of range"):
        hp.Inversion.load(tmp_path / "bad.npz")


def test_a_callback_s_exception_ends_the_run():
    def boom(entry):
        raise RuntimeError("from the callback")
    with pytest.raises(RuntimeError, match="from the callback"):
        hp.invert(_two_stage_survey(), 1.0, callbacks=[boom], **SMALL)


def test_the_first_stage_takes_two_shares_of_the_time():
    assert FIRST_STAGE_SHARE == 2.0
    # three stages, 300 s from t = 10: the first gets 2/4 of it, the others a half each of the rest
    assert _stage_deadline(10.0, 300.0, 10.0, 0, 3) == pytest.approx(160.0)
    assert _stage_deadline(10.0, 300.0, 160.0, 1, 3) == pytest.approx(235.0)
    # a stage that ended early passes its remainder on
    assert _stage_deadline(10.0, 300.0, 100.0, 1, 3) == pytest.approx(205.0)
    assert _stage_deadline(10.0, 300.0, 235.0, 2, 3) == pytest.approx(310.0)
    # one stage: the whole limit; a run continued at a later stage shares evenly
    assert _stage_deadline(0.0, 50.0, 0.0, 0, 1) == pytest.approx(50.0)
    assert _stage_deadline(0.0, 60.0, 0.0, 1, 4) == pytest.approx(20.0)


def test_the_history_s_error_region():
    """``region=``: the history's velocity error where it is true (a surface survey's hull is a
    strip); a region true nowhere, or not a callable, is refused before any work."""
    from helmpinn.inversion.api import illuminated_points

    upper = illuminated_points(_survey(), DOMAIN, n=11, region=lambda x: x[:, 1] > 0.5)
    assert len(upper) == 11 * 5 and np.all(upper[:, 1] > 0.5)
    hull = illuminated_points(_survey(), DOMAIN, n=11)
    assert 0 < len(hull) < 121 and np.all((hull > 0.15) & (hull < 0.85))
    with pytest.raises(ValueError, match="region must return one bool per point"):
        hp.invert(_survey(), 1.0, domain=DOMAIN, true=1.1, region=lambda x: x[:, 0] > 5)
    with pytest.raises(TypeError, match="region must be a callable"):
        hp.invert(_survey(), 1.0, domain=DOMAIN, true=1.1, region="upper")
