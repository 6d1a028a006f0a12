"""The one damped Gauss-Newton step (helmpinn.optim.damped) on small least-squares problems with a
dense solve of their own: acceptance and the λ rules, the two ways a step ends without a decrease
(its status), backtracking, a retried direction, geodesic acceleration against its formula, and
the one non-finite exception of both optimisers."""
import contextlib
import math

import numpy as np
import pytest

from helmpinn.optim import NonFiniteLoss, StepRecord, StepStatus, next_damping
from helmpinn.optim.damped import Damped, Direction
from helmpinn.optim.lm import FunctionResiduals, LevenbergMarquardt


class DenseSolve:
    """A LinearSolve by NumPy: (JᵀJ + λI) δ = Jᵀr at θ for r = fun(θ), J = jac(θ)."""

    def __init__(self, fun, jac, theta, retry_first=False):
        self.fun, self.J = fun, np.atleast_2d(jac(theta))
        self.r = np.asarray(fun(theta), float)
        self.loss = float(self.r @ self.r)
        self.lams, self.evaluations, self.tried_with = [], 0, []
        self.retry_first = retry_first

    def _solve(self, lam, rhs):
        A = self.J.T @ self.J + lam * np.eye(self.J.shape[1])
        return np.linalg.solve(A, rhs)

    def solve(self, lam):
        self.lams.append(lam)
        delta = self._solve(lam, self.J.T @ self.r)
        Jd = self.J @ delta

        def shortened(alpha):
            rs = self.r - alpha * Jd
            return self.loss - float(rs @ rs)
        retry = self.retry_first and len(self.lams) == 1
        return Direction(delta, shortened(1.0), lambda w: self._solve(lam, self.J.T @ w), shortened, retry)

    def residuals(self, x):
        self.evaluations += 1
        return np.asarray(self.fun(x), float)

    def total(self, r):
        return float(r @ r)

    def dot(self, a, b):
        return float(a @ b)

    def limit(self):
        return contextlib.nullcontext()

    def place(self, theta, x):
        theta[...] = x

    def tried(self, delta, accepted, rho):
        self.tried_with.append((delta.copy(), accepted, rho))


def damped(**kw):
    opt = Damped()
    settings = dict(lam=1e-3, lam_min=1e-15, lam_max=1e12, update="fixed", max_trials=10, geodesic=False,
                    geodesic_h=0.1, geodesic_alpha=0.75, backtrack=0)
    opt.set_damping(**{**settings, **kw})
    return opt


def atan_solve(theta, **kw):
    # r(x) = atan(x): from x = 2 the undamped Gauss-Newton step overshoots to x ≈ -3.5
    return DenseSolve(np.arctan, lambda x: np.diag(1.0 / (1.0 + x ** 2)), theta, **kw)


def test_an_accepted_step_lowers_the_loss_and_lambda_by_the_rule():
    theta = np.array([0.5])
    system = atan_solve(theta)
    opt = damped(lam=1e-2)
    rec = opt.trials(system, theta, {})
    assert isinstance(rec, StepRecord) and rec.status is StepStatus.ACCEPTED and rec.message == ""
    assert rec.accepted and rec.trials == 1 and rec.loss < rec.loss0 == system.loss and rec.alpha == 1.0
    assert theta[0] == pytest.approx(0.5 - (1.0 / 1.25) * math.atan(0.5) / ((1 / 1.25) ** 2 + 1e-2), rel=1e-12)
    np.testing.assert_array_equal(rec.residuals, np.arctan(theta))
    assert opt.lam == pytest.approx(1e-2 / 3) and opt.nu == 2.0
    delta = system.tried_with[0][0]
    predicted = system.loss - float((system.r - system.J @ delta) @ (system.r - system.J @ delta))
    assert rec.rho == (rec.loss0 - rec.loss) / predicted


@pytest.mark.parametrize("update", ["fixed", "nielsen", "ratio"])
def test_lambda_grows_by_the_rule_on_each_rejection(update):
    theta = np.array([2.0])
    system = atan_solve(theta)
    opt = damped(lam=1e-3, update=update, max_trials=30)
    rec = opt.trials(system, theta, {})
    assert rec.accepted and rec.trials > 1
    lam, nu = 1e-3, 2.0
    for seen in system.lams[:-1]:   # every rejected trial's λ, then the next by the rule
        assert seen == lam
        lam, nu = next_damping(update, lam, nu, False, -math.inf, 1e-15, 1e12)
    assert system.lams[-1] == lam
    assert (opt.lam, opt.nu) == next_damping(update, lam, nu, True, rec.rho, 1e-15, 1e12)


def test_a_step_that_fails_at_lam_max_says_so_and_leaves_theta():
    theta = np.array([2.0])
    system = atan_solve(theta)
    opt = damped(lam=1e-12, lam_max=1e-12)
    rec = opt.trials(system, theta, {})
    assert rec.status is StepStatus.LAM_MAX and rec.message == "damping at lam_max"
    assert not rec.accepted and rec.trials == 1 and rec.loss == rec.loss0 and theta[0] == 2.0
    np.testing.assert_array_equal(rec.residuals, system.r)


def test_a_step_that_fails_in_max_trials_says_so_and_leaves_theta():
    theta = np.array([2.0])
    opt = damped(lam=1e-12, max_trials=2)
    rec = opt.trials(atan_solve(theta), theta, {})
    assert rec.status is StepStatus.MAX_TRIALS and rec.message == "no decrease in max_trials trials"
    assert not rec.accepted and rec.trials == 2 and theta[0] == 2.0 and opt.lam == 1e-12 * 16


def test_backtracking_takes_the_first_shorter_step_that_lowers_the_loss():
    # from x = 2 the full step (λ tiny) lands at x ≈ -3.5 (loss up); half of it at x ≈ -0.77 (down)
    theta = np.array([2.0])
    system = atan_solve(theta)
    opt = damped(lam=1e-12, backtrack=3)
    opt.nu = 8.0
    rec = opt.trials(system, theta, {})
    delta = system.tried_with[0][0] / 0.5
    assert rec.accepted and rec.trials == 1 and rec.alpha == 0.5
    assert theta[0] == 2.0 - 0.5 * delta[0] and rec.loss == math.atan(theta[0]) ** 2
    assert opt.lam == 1e-12 and opt.nu == 2.0   # λ stays, ν starts again
    assert rec.rho == pytest.approx((rec.loss0 - rec.loss) / (system.loss - (system.r[0] - 0.5 * (system.J @ delta)[0]) ** 2))


def test_backtracking_skips_a_length_the_model_already_refuses_unevaluated():
    theta = np.array([2.0])
    system = atan_solve(theta)
    system.solve = lambda lam, solve=system.solve: _with(solve(lam), shortened=lambda a: -1.0)
    rec = damped(lam=1e-12, backtrack=3, max_trials=1).trials(system, theta, {})
    assert not rec.accepted and system.evaluations == 1   # the full trial only


def _with(d, **changes):
    for k, v in changes.items():
        setattr(d, k, v)
    return d


def test_a_retried_direction_is_tried_again_at_the_same_lambda():
    theta = np.array([2.0])
    system = atan_solve(theta, retry_first=True)
    opt = damped(lam=1e-12)
    opt.trials(system, theta, {})
    assert system.lams[0] == system.lams[1] == 1e-12 and system.lams[2] == 4e-12


def test_geodesic_trial_point_is_the_formula():
    # r = (x1 − x0², x1 − 0.5): θ − δ − a/2 with (JᵀJ + λI) a = Jᵀ r_vv, r_vv by central differences
    fun = lambda x: np.array([x[1] - x[0] ** 2, x[1] - 0.5])   # noqa: E731
    jac = lambda x: np.array([[-2 * x[0], 1.0], [0.0, 1.0]])   # noqa: E731
    theta = np.array([0.3, 0.0])
    lam, h = 0.5, 0.1
    system = DenseSolve(fun, jac, theta)
    J, r = jac(theta), fun(theta)
    A = J.T @ J + lam * np.eye(2)
    delta = np.linalg.solve(A, J.T @ r)
    r_vv = (fun(theta + h * delta) - 2 * r + fun(theta - h * delta)) / h ** 2
    acc = np.linalg.solve(A, J.T @ r_vv)
    assert 2 * np.linalg.norm(acc) <= 0.75 * np.linalg.norm(delta)
    opt = damped(lam=lam, geodesic=True, geodesic_h=h)
    np.testing.assert_allclose(opt._accelerate(system, system.solve(lam), theta), theta - delta - 0.5 * acc,
                               rtol=1e-14, atol=1e-14)
    assert system.evaluations == 2


def test_a_projection_moves_every_trial_point_before_its_loss():
    # from x = 2 the full step (λ tiny) lands at x ≈ -3.5, where the loss is up: rejected without
    # a constraint; projected onto x >= 0.5 the same trial is accepted at 0.5, ρ over the
    # unprojected step's predicted decrease
    theta = np.array([2.0])
    assert not damped(lam=1e-12, max_trials=1).trials(atan_solve(theta), theta, {}).accepted
    system = atan_solve(theta)
    seen = []

    def project(x):
        seen.append(x.copy())
        return np.maximum(x, 0.5)
    rec = damped(lam=1e-12).trials(system, theta, {}, project=project)
    assert rec.accepted and rec.trials == 1 and theta[0] == 0.5 and seen[0][0] < -3
    assert rec.loss == math.atan(0.5) ** 2 and system.evaluations == 1
    d = system.solve(1e-12)
    assert rec.rho == (rec.loss0 - rec.loss) / d.predicted


def test_a_projection_applies_to_backtracked_points():
    # onto x >= -2.6: the full step's point -2.6 still raises the loss; half the step (x ≈ -0.77)
    # is feasible and lowers it
    theta = np.array([2.0])
    system = atan_solve(theta)
    seen = []

    def project(x):
        seen.append(x.copy())
        return np.maximum(x, -2.6)
    rec = damped(lam=1e-12, backtrack=3).trials(system, theta, {}, project=project)
    delta = system.solve(1e-12).delta
    assert rec.accepted and rec.alpha == 0.5 and len(seen) == 2
    assert seen[1][0] == 2.0 - 0.5 * delta[0] == theta[0]


@pytest.mark.parametrize("kw, word", [({"lam": 0.0}, "lam"), ({"lam": math.inf}, "lam"),
                                      ({"lam_min": 1.0, "lam_max": 0.5}, "lam_min"), ({"update": "x"}, "update"),
                                      ({"max_trials": 0}, "max_trials"), ({"geodesic_h": 2.0}, "geodesic_h"),
                                      ({"backtrack": -1}, "backtrack"), ({"backtrack": True}, "backtrack")])
def test_settings_are_checked_naming_the_argument(kw, word):
    with pytest.raises(ValueError, match=word):
        damped(**kw)


def test_levenberg_marquardt_raises_the_one_non_finite_exception():
    res = FunctionResiduals(lambda x: np.sqrt(x), lambda x: np.diag(0.5 / np.sqrt(x)), 1, 1)
    lm = LevenbergMarquardt(res)
    with np.errstate(invalid="ignore"), pytest.raises(NonFiniteLoss, match="non-finite loss") as info:
        lm.step(np.array([-1.0]))
    assert isinstance(info.value, FloatingPointError)
