"""Domain-decomposed models in the run loop: the Gauss-Newton driver and the decomposition's
default sizing.

**The model protocol** the :class:`~helmpinn.Trainer` needs is
:class:`helmpinn.models.model_protocol.TrainableModel`;
:class:`~helmpinn.models.decomposition.DecomposedModel` has it (its own loss on a run's points).

**The optimisers.** Both run on the residuals of the run's points
(:meth:`DecomposedModel.training_residuals <helmpinn.models.decomposition.DecomposedModel.training_residuals>`: the rows of
:meth:`Rows.from_training_set <helmpinn.models.decomposition.Rows.from_training_set>` with the run's
weights, under a hard constraint without the Dirichlet rows that the constraint satisfies
identically, zero data where φ = 0; over MPI every rank holds every rank's points and its own
subdomains); new points rebuild them. :class:`GNDriver` (``Trainer.fit(steps,
optimizer="gn")``) runs :class:`helmpinn.optim.gauss_newton.MatrixFreeGN` on them: one step is one
linearisation and its damped trials; in a closed box near resonance its residuals carry
mode rows (``resonance``, :class:`GNSettings`; the loss it reports includes them). Its
:class:`GNStepInfo` carries the damping λ (the history's rate), the CG iterations and trials;
the progress bar shows them. Adam
(``Trainer.fit(steps, optimizer="adam")``, the FBPINN papers' optimiser) is the one
:class:`helmpinn.training.drivers.AdamDriver`, which steps on the model's
:meth:`~helmpinn.models.decomposition.DecomposedModel.objective`: the loss ``Σ r²`` and its gradient ``2 Jᵀr``, one
core ``vjp`` per subnetwork.

**Defaults**: the decomposition's rules and their measurements are in :mod:`helmpinn.defaults`
(:data:`~helmpinn.defaults.DECOMPOSE_ABOVE`, :func:`~helmpinn.defaults.should_decompose`, ...);
:func:`decomposed_settings` makes a run's settings from them.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .. import _core
from .._checks import integer, real_number
from ..models.decomposition import CARRIER_TERM, MAX_SUBDOMAINS, MIN_OVERLAP, BoxConstraint, DecomposedModel, Level, Rows, \
    subdomain_grid
from ..defaults import (DD_ADAM_SETTINGS, DD_CG_MAXITER, DD_DAMPING, DD_GROW_GAP, DD_LOCAL_POINTS_PER_WAVELENGTH,
                       DD_POINTS_PER_WAVELENGTH,
                       GN_BY_DIMENSION, LM_BOUNDARY_SHARE, STALL_FACTOR, STALL_WINDOW, SUBDOMAINS_PER_WAVELENGTH,
                       auto_weights, default_settings, graded_edges, local_wavenumbers, points_rule,
                       scale_wavenumber, wavelengths)
from .drivers import DRIVERS, DampedDriver, LMSettings, StepInfo, mismatch
from ..optim import StepStatus
from ..optim.gauss_newton import BACKTRACK, MatrixFreeGN
from ..problems.geometry import Box
from ..params import sigma_for
from ..problems import Dirichlet
from ..problems.sampler import CellDensity
from ..problems.jumps import RampWeights
from ..problems.radiation import RADIATION_RAMP_WEIGHT, RADIATION_WITH_JUMPS, radiation_count, radiation_rows
from ..problems.corners import CORNER_ROW_WEIGHT, corner_rows, rows_corner_radius
from ..problems.waves import RESONANCE_MOST, RESONANCE_WITHIN, resonance_green_rows, resonance_rows
from ..memory import MemoryEstimateError, check_fit
# the model protocol's names, in helmpinn.models.model_protocol, stay importable from here (the
# deprecated TrainableDecomposedModel and trainable among them)
from ..models.model_protocol import STATE_KEY, TrainableDecomposedModel, load_model, term_means, trainable  # noqa: F401

if TYPE_CHECKING:
    from .trainer import Trainer

__all__ = ["TrainableDecomposedModel", "GNDriver", "GNSettings", "GNStepInfo", "trainable", "load_model", "term_means",
           "decomposed_settings", "build_decomposed_model", "local_layout", "subdomain_wavenumbers", "sampled_problem", "residual_density", "ADAPT_CANDIDATES", "ADAPT_BLOCK", "GREEN_ROW_SCALE"]

#: The scale of the value rows that Green's mode rows read u from (:meth:`GNDriver._residuals`):
#: so small that their own ``s² Σ |u − y|²`` adds nothing to the loss, the mode rows' columns
#: ``1/s`` times larger to match.
GREEN_ROW_SCALE = 1e-8


def _joined_modes(n: int, parts: list[Any]) -> Any:
    """Mode rows of several kinds as one ``modes`` answer for ``n`` point rows
    (:meth:`DecomposedModel.training_residuals <helmpinn.models.decomposition.DecomposedModel.training_residuals>`):
    each part ``M [n, q]`` over the points or ``(rows, M [len(rows), q])`` over rows of its own,
    dense or scipy.sparse; their columns side by side, their own rows one after the other (None:
    no part); sparse where any part is."""
    if not parts:
        return None
    from scipy import sparse

    own = [p[0] for p in parts if isinstance(p, tuple)]
    extra = sum(len(r) for r in own)
    blocks, at, col = [], n, 0   # (row, column offset, part as COO)
    for p in parts:
        m = sparse.coo_matrix(p[1] if isinstance(p, tuple) else p)
        blocks.append((at if isinstance(p, tuple) else 0, col, m))
        at += m.shape[0] if isinstance(p, tuple) else 0
        col += m.shape[1]
    M = sparse.csr_matrix((np.concatenate([b.data for _, _, b in blocks]),
                           (np.concatenate([b.row + r for r, _, b in blocks]),
                            np.concatenate([b.col + c for _, c, b in blocks]))), shape=(n + extra, col))
    if not any(sparse.issparse(p[1] if isinstance(p, tuple) else p) for p in parts):
        M = M.toarray()   # (dense parts: a dense answer)
    return M if not own else (Rows.concat(own), M)


# -- the driver ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GNSettings(LMSettings):
    """The Gauss-Newton run's settings: :class:`~helmpinn.training.drivers.LMSettings`' stall stop and
    growth of the points (:class:`~helmpinn.training.drivers.PointsGrowth`; the solver's memory grows
    linearly with the points, so no budget caps it), with ``options`` the keywords of
    :class:`helmpinn.optim.gauss_newton.MatrixFreeGN` (``lam``, ``damping``, ``cg_tol``,
    ``cg_maxiter``, ``coarse``, ``products``, ``geodesic``, ``gram``, ...; its constructor checks
    them), and ``resonance``: in a closed box the loss also weighs the residual in the modes
    within this share of κ by the error it causes (the mode rows of
    :func:`helmpinn.problems.waves.resonance_rows`, under a hard constraint
    :func:`helmpinn.problems.waves.resonance_green_rows`; module docstring); 0: not; ``resonance_most``:
    of those modes at most this many, the most amplified (each costs two parameter vectors and
    two preconditioner applications a trial); ``corners``: at the corners of a polygonal
    boundary, the weight of the rows that keep the residual there from radiating
    (:func:`helmpinn.problems.corners.corner_rows`; 0: none); ``singular``: add the corners'
    singular functions to the model's field where every re-entrant corner of a 2-D problem takes
    them (:mod:`helmpinn.problems.singular`; the corner weights and rows then not used: the
    network represents a smooth field there); ``adapt``: when the points grow
    on a model whose points follow a density (:func:`sampled_problem`), this share of the new
    draw's density follows the residual (:func:`residual_density`; 0: none); ``radiation``: in 2-D,
    the amplification a of the residual's radiating part (its projections on plane waves at the
    local wavenumber, windowed over the physical domain, weigh a² in the loss:
    :func:`helmpinn.problems.radiation.radiation_rows`); 0: none."""

    resonance: float = 0.0
    resonance_most: int = RESONANCE_MOST
    corners: float = CORNER_ROW_WEIGHT
    singular: bool = True
    adapt: float = 0.0
    radiation: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        r = self.resonance
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, float, np.number)) or not 0 <= r < 1:
            raise ValueError(f"resonance: expected a share of κ in [0, 1) (0: no mode rows), got {r!r}")
        object.__setattr__(self, "resonance_most", integer("GNSettings", "resonance_most", self.resonance_most, low=1))
        object.__setattr__(self, "corners", real_number("GNSettings", "corners", self.corners, low=0.0, low_open=False))
        object.__setattr__(self, "adapt", real_number("GNSettings", "adapt", self.adapt, low=0.0, low_open=False, high=1.0))
        object.__setattr__(self, "radiation", real_number("GNSettings", "radiation", self.radiation, low=0.0,
                                                          low_open=False))
        if not isinstance(self.singular, (bool, np.bool_)):
            raise ValueError(f"singular: expected True or False, got {self.singular!r}")
        object.__setattr__(self, "singular", bool(self.singular))

    @staticmethod
    def solver() -> tuple[str, Any]:
        return "Gauss-Newton", MatrixFreeGN


@dataclass
class GNStepInfo(StepInfo):
    """:class:`~helmpinn.training.drivers.StepInfo` with the step's ``cg_iterations`` (per trial),
    ``trials`` and ``accepted``."""

    cg_iterations: list[int] = field(default_factory=list)
    trials: int = 0
    accepted: bool = True


class GNDriver(DampedDriver):
    """Matrix-free Gauss-Newton (:class:`helmpinn.optim.gauss_newton.MatrixFreeGN`) on a decomposed
    model's residuals at the run's points (module docstring). The history's rate is λ; stops by
    itself when no trial lowers the loss at the largest damping, and (through the loop) on a
    stall. Continues λ from a loaded checkpoint; new points rebuild the residuals. CPU, one
    process. The MatrixFreeGN is the driver's ``gn`` (the run's is
    ``run.driver.gn``)."""

    name = "gn"
    trains = ("decomposed",)
    settings_class = GNSettings
    gn: Any = None   # the MatrixFreeGN, from start

    def __init__(self, settings: GNSettings | None = None, *, resonance: float = 0.0,
                 resonance_most: int = RESONANCE_MOST, corners: float = CORNER_ROW_WEIGHT, singular: bool = True,
                 adapt: float = 0.0, radiation: float = 0.0, **keywords: Any):
        """``settings``, or :class:`~helmpinn.training.drivers.DampedDriver`'s keywords (the stall and
        growth rules, the solver's options), ``resonance``, ``resonance_most``, ``corners``,
        ``singular``, ``adapt`` and ``radiation`` (:class:`GNSettings`)."""
        super().__init__(settings, **keywords)
        if settings is None:
            self.settings = replace(self.settings, resonance=resonance, resonance_most=resonance_most, corners=corners,
                                    singular=singular, adapt=adapt, radiation=radiation)
        self.log: list[dict[str, Any]] = []   # one entry per step of the current fit

    def start(self, run: "Trainer", steps: int) -> None:
        self.gn = MatrixFreeGN(self._residuals(run), **self.settings.options)
        state = run.model.optimizer_state
        if state and "gn_lambda" in state:
            self.gn.load_state_dict(state)
        self.log = []
        self.growth.start(run)

    def _residuals(self, run: "Trainer") -> Any:
        """The residuals of the run's points
        (:meth:`DecomposedModel.training_residuals <helmpinn.models.decomposition.DecomposedModel.training_residuals>`,
        over MPI too), with mode rows where the settings ask for them and the problem has any:
        the near-resonant modes' where ``resonance`` is set (on a model with the hard
        constraint, in a box whose every wall is ``Dirichlet(0)``, Green's: value rows of scale
        :data:`GREEN_ROW_SCALE` on the grid of :func:`helmpinn.problems.waves.resonance_green_rows`
        after the points', the mode rows' columns over them; else the points' sum,
        :func:`helmpinn.problems.waves.resonance_rows`), and the corners' where ``corners`` is
        (:func:`helmpinn.problems.corners.corner_rows`: value and slope rows of the same scale on
        each corner's sector, after the points'), and the radiating residual's where ``radiation`` is
        (:func:`helmpinn.problems.radiation.radiation_rows`, over the points)."""
        within, most, corners = float(self.settings.resonance), int(self.settings.resonance_most), float(self.settings.corners)
        radiating = float(self.settings.radiation)

        def resonance(rows: Rows) -> Any:
            if getattr(run.model, "constraint", None) is None or not _hard_constraint(run.problem):
                return resonance_rows(run.problem, rows.x, rows.term == "pde", within, most=most)
            green = resonance_green_rows(run.problem, within, most=most)
            if green is None:
                return None
            z, C, y = green
            s = GREEN_ROW_SCALE * math.sqrt(float(run.weights["pde"]))
            return Rows(z, 0.0, 0.0, s, s * y, CARRIER_TERM), C / GREEN_ROW_SCALE

        def corner(rows: Rows) -> Any:
            got = corner_rows(run.problem, float(np.sum(np.abs(rows.f) ** 2)), corners)
            if got is None:
                return None
            x, b, c, C = got
            return Rows(x, 0.0, GREEN_ROW_SCALE * b, GREEN_ROW_SCALE * c, 0.0, CARRIER_TERM), C / GREEN_ROW_SCALE

        def modes(rows: Rows) -> Any:
            return _joined_modes(len(rows), [m for m in (
                resonance(rows) if within else None, corner(rows) if corners else None,
                radiation_rows(run.problem, rows.x, rows.term == "pde", radiating) if radiating else None)
                if m is not None])
        return run.model.training_residuals(run.training_set, run.weights, run.comm,
                                            modes=modes if within or corners or radiating else None)

    def resampled(self, run: "Trainer") -> None:
        self.gn.set_residuals(self._residuals(run))

    def points_factor(self, run: "Trainer") -> float:
        """:class:`~helmpinn.training.drivers.PointsGrowth`'s factor: more points once the gap says the
        model fits its points rather than the field (every rank sees the same gap), unless the
        run on that many would exceed the memory limit on a rank
        (:func:`helmpinn.memory.check_fit`)."""
        def fits(factor: float) -> bool:   # the grown points' run within the memory limit, on every rank
            try:
                check_fit(run, self, math.ceil(factor * run.pde_points))
                ok = 1
            except MemoryEstimateError:
                ok = 0
            return bool(ok if run.comm is None else run.comm.allreduce(ok, op=_mpi_min()))
        factor = self.growth.factor(run, fits)
        density = getattr(getattr(run.problem, "sampler", None), "density", None)
        if factor > 1 and self.settings.adapt > 0 and density is not None:
            run.problem.sampler.density = residual_density(run, self.settings.adapt)
        return factor

    def step(self, run: "Trainer") -> GNStepInfo:
        st = self.gn.step(run.model.params)   # NonFiniteLoss: the loop restores the last good state
        if getattr(run.model, "singular", None) is not None:   # the corners' functions at the step's θ
            run.model.singular.amplitudes = self.gn.res.amplitudes(run.model.params)
        terms = term_means(st.terms, run.weights)
        stop = None
        if st.status is StepStatus.LAM_MAX:
            stop = (f"no decrease at the largest damping (λ = {st.lam:.1e}) at step {run.step + 1}: "
                    "converged or stuck")
        cg = sum(st.cg_iterations)
        self.log.append({"loss": st.loss, "lam": st.lam, "cg": list(st.cg_iterations), "trials": st.trials,
                         "accepted": st.accepted, "alpha": st.alpha, "rho": st.rho, "times": dict(st.times)})
        shortened = f" step={st.alpha:g}" if st.alpha < 1.0 else ""   # a rejected trial's step, halved
        n, r = self.gn.res.num_points, st.residuals
        fit = None if not self.gn.res.num_modes or r is None else float(r[:n] @ r[:n])   # the points' part
        return GNStepInfo(st.loss, terms, st.lam, f"lam={st.lam:.1e} cg={cg} trials={st.trials}{shortened}", stop,
                          dict(st.times), fit, list(st.cg_iterations), st.trials, st.accepted)

    def state_dict(self) -> dict[str, Any]:
        return self.gn.state_dict() if self.gn is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.gn is not None and state and "gn_lambda" in state:
            self.gn.load_state_dict(state)

    def summary(self) -> dict[str, Any] | None:
        if self.gn is None:
            return None
        return {"steps": len(self.log), "final_lambda": self.gn.lam,
                "cg_iterations": [sum(e["cg"]) for e in self.log], "trials": [e["trials"] for e in self.log]}


def _mpi_min() -> Any:
    from mpi4py import MPI

    return MPI.MIN


DRIVERS.setdefault("gn", GNDriver)   # Trainer.fit(optimizer="gn"), helmpinn.training.drivers.make_driver("gn")


# -- the defaults --------------------------------------------------------------------------------
def _hard_constraint(problem: Any) -> bool:
    """A box without a PML whose every boundary part is ``Dirichlet(0)``, and no data points."""
    bcs = list(getattr(problem, "bcs", {}).values())
    return (isinstance(problem.domain, Box) and getattr(problem, "pml", None) is None and bool(bcs)
            and all(isinstance(bc, Dirichlet) and not callable(bc.value) and complex(bc.value) == 0 for bc in bcs)
            and getattr(problem, "data", None) is None)


def _constraint_refusal(problem: Any) -> str | None:
    """Why the hard constraint (u = 0 on every face of the sampled box,
    :class:`~helmpinn.models.decomposition.BoxConstraint`) cannot hold ``problem``'s solution, or None
    where it can: the sampled domain is a box and every boundary condition is ``Dirichlet(0)``
    (a PML's outer wall, with no condition of its own, included)."""
    domain = getattr(problem, "sampling_domain", problem.domain)
    if not isinstance(domain, Box):
        return f"holds u = 0 on the faces of a box, and the problem's sampled domain is a {type(domain).__name__}"
    for name, bc in getattr(problem, "bcs", {}).items():
        if not isinstance(bc, Dirichlet) or callable(bc.value) or complex(bc.value) != 0:
            what = f"{type(bc).__name__}" + ("(a function of x)" if callable(getattr(bc, "value", None)) else
                                             f"({bc.value!r})" if isinstance(bc, Dirichlet) else "")
            return (f"holds u = 0 on every face of the box, and the problem's boundary condition {name!r} is "
                    f"{what}, not Dirichlet(0)")
    return None


def _checked_decomposition(r: dict[str, Any], problem: Any) -> dict[str, Any]:
    """The entries of :func:`decomposed_settings`' table ``r`` checked one by one (none
    converted: a count is an integer, a flag a bool; a TypeError/ValueError names the entry);
    ``constraint=True`` only where :func:`_constraint_refusal` finds nothing against it."""
    where = "decomposition"
    out = dict(r)
    for name in ("subdomains_per_wavelength", "points_per_wavelength"):
        out[name] = real_number(where, name, r[name], low=0.0)
    out["overlap"] = real_number(where, "overlap", r["overlap"], low=MIN_OVERLAP, low_open=False, high=4.0)
    for name in ("ff_dim", "hidden", "layers"):
        out[name] = integer(where, name, r[name], low=1)
    for name in ("coarse_level", "constraint", "local_wavenumber"):
        value = r[name]
        if not (isinstance(value, (bool, np.bool_)) or (name == "constraint" and value is None)):
            allowed = "True, False or None (the rule)" if name == "constraint" else "True or False"
            raise TypeError(f"{where}: {name} must be {allowed}, got {value!r}")
        out[name] = None if value is None else bool(value)
    if out["constraint"]:
        why = _constraint_refusal(problem)
        if why:
            raise ValueError(f"{where}: constraint=True {why}; give constraint=False or None")
    grids = r["grids"]
    if grids is not None:
        if not isinstance(grids, (list, tuple)) or not grids:
            raise TypeError(f"{where}: grids must be None or a non-empty list of grids (one per level), got {grids!r}")
        d = int(problem.dim)
        out["grids"] = [subdomain_grid(g, d, f"grids[{i}]") for i, g in enumerate(grids)]
        total = sum(math.prod(g) for g in out["grids"])
        if total > MAX_SUBDOMAINS:
            raise ValueError(f"{where}: grids have {total:,} subdomains, more than {MAX_SUBDOMAINS:,}")
    return out


def decomposed_settings(problem: Any, *, optimizer: str = "gn", **decomposition: Any) -> dict[str, Any]:
    """The run settings of a decomposed model trained by Gauss-Newton on ``problem`` (module
    docstring), a table like :func:`helmpinn.defaults.run_settings`'s: ``model`` "decomposed",
    ``optimizer`` "gn", the subnetworks' ``ff_dim`` / ``hidden`` / ``layers``, the points, the
    weights (Levenberg-Marquardt's), ``steps``, ``gn`` (:class:`GNDriver`'s keywords) and
    ``decomposition``: ``subdomains_per_wavelength``, ``grids`` (one grid of counts per level;
    None: one level from the rule), ``coarse_level`` (add a one-network level), ``overlap`` and
    ``constraint`` (None: the rule; True / False), ``local_wavenumber`` (True: where κ varies, the
    subdomains, their Fourier scales and the points follow the local wavenumber rather than the
    largest: :func:`local_layout`; False, the default: the largest everywhere — on Marmousi at
    3 Hz the local rule ended 5 times higher in the same 600 s, :data:`helmpinn.defaults`'
    docstring). ``decomposition`` replaces any
    of those, and
    ``ff_dim``, ``hidden``, ``layers``, ``points_per_wavelength`` too; the points follow.
    ``optimizer="adam"``: the same model and points trained by Adam instead (the FBPINN
    papers' optimiser), :data:`helmpinn.defaults.DD_ADAM_SETTINGS`' ``lr``, ``schedule``, ``steps`` and
    ``eval_every``."""
    if optimizer not in DRIVERS or mismatch("decomposed", optimizer):
        raise ValueError(f"optimizer: a decomposed model trains with "
                         f"{' or '.join(repr(n) for n in DRIVERS if mismatch('decomposed', n) is None)}, "
                         f"got {optimizer!r}")
    d = int(problem.dim)
    rules = {"subdomains_per_wavelength": SUBDOMAINS_PER_WAVELENGTH, "grids": None, "coarse_level": False,
             "overlap": 0.6, "constraint": None, "ff_dim": 16, "hidden": 32, "layers": 1, "local_wavenumber": False,
             "points_per_wavelength": None}
    unknown = set(decomposition) - set(rules)
    if unknown:
        raise ValueError(f"decomposition: unknown settings {sorted(unknown)}; known: {sorted(rules)}")
    r = {**rules, **decomposition}
    if r["points_per_wavelength"] is None:   # the rule: per local wavelength where κ varies
        by_local = r["local_wavenumber"] is True and callable(getattr(problem, "kappa", None))
        r["points_per_wavelength"] = (DD_LOCAL_POINTS_PER_WAVELENGTH if by_local else DD_POINTS_PER_WAVELENGTH)[min(d, 3)]
    r = _checked_decomposition(r, problem)
    spw = r["subdomains_per_wavelength"]
    waves = wavelengths(problem)
    grids = r["grids"]
    local = local_layout(problem, spw, r["overlap"]) if r["local_wavenumber"] else None
    edges = None
    if grids is None:
        grids = [[max(1, math.ceil(spw * w - 1e-9)) for w in waves]]
        if local is not None and local[0] is not None:
            edges = [local[0]]
            grids = [[len(e) - 1 for e in local[0]]]
        if math.prod(grids[0]) > MAX_SUBDOMAINS:
            raise ValueError(f"decomposition: {' x '.join(map(str, grids[0]))} subdomains ({spw:g} per wavelength "
                             f"over {' x '.join(f'{w:.3g}' for w in waves)} wavelengths) are more than "
                             f"{MAX_SUBDOMAINS:,} (helmpinn.models.decomposition.MAX_SUBDOMAINS)")
    grids = [list(g) for g in grids]
    if r["coarse_level"] and [1] * d not in grids:
        grids.append([1] * d)
        edges = None if edges is None else edges + [None]
    constraint = _hard_constraint(problem) if r["constraint"] is None else r["constraint"]
    P = _core.ModelSpec(d, r["ff_dim"], r["hidden"], r["layers"]).num_params
    P *= sum(math.prod(g) for g in grids)
    if local is None:
        pde_points = points_rule(problem, r["points_per_wavelength"], P / 2, 500)
    else:   # ppw^d points per local square (cubic) wavelength
        n = max(P / 2, r["points_per_wavelength"] ** d * local[1])
        pde_points = int(500 * math.ceil(n / 500))
    lo, hi = getattr(problem, "sampling_domain", problem.domain).bounds
    adam = default_settings(problem)
    return {**adam, "model": "decomposed", "optimizer": "gn", "warm_start": 0, "lbfgs": 0,
            "ff_dim": r["ff_dim"], "hidden": r["hidden"], "layers": r["layers"],
            "sigma": None, "dtype": "float64", "steps": 200, "pde_points": pde_points,
            "bc_points": 0 if constraint else (2 if d == 1 else pde_points // 20), "sampling": "sobol",
            "resample_every": 0, "eval_every": 1, "weights": auto_weights(problem, LM_BOUNDARY_SHARE),
            "gn": {"stall_window": STALL_WINDOW, "stall_factor": STALL_FACTOR, "lam": 1e-3,
                   "damping": DD_DAMPING[constraint], "cg_tol": 1e-3, "cg_maxiter": DD_CG_MAXITER, "coarse": "last_layer", "update": "nielsen",
                   "cg_warm": True, "backtrack": BACKTRACK, "resonance": RESONANCE_WITHIN,
                   "radiation": _radiation(problem),
                   "resonance_most": RESONANCE_MOST, "grow_gap": DD_GROW_GAP,
                   **GN_BY_DIMENSION.get(d, {})},
            "decomposition": {"subdomains_per_wavelength": spw, "grids": grids, "overlap": r["overlap"],
                              "constraint": constraint, "coarse_level": r["coarse_level"],
                              "local_wavenumber": local is not None, "edges": edges,
                              "lo": np.asarray(lo, float).tolist(), "hi": np.asarray(hi, float).tolist(),
                              "wavenumber": scale_wavenumber(problem),
                              "points_per_wavelength": r["points_per_wavelength"]},
            **(DD_ADAM_SETTINGS if optimizer == "adam" else {})}


def _radiation(problem: Any) -> float:
    """The radiation rows' amplification of a decomposed run's plan: :data:`RADIATION_WITH_JUMPS`
    where it trains on a medium whose jumps were smoothed
    (:func:`helmpinn.problems.jumps.training_problem`) and the rows fit
    (:func:`helmpinn.problems.radiation.radiation_count`), else 0."""
    jumps = getattr(problem, "smoothed_jumps", None)
    return RADIATION_WITH_JUMPS if jumps and radiation_count(problem, RADIATION_WITH_JUMPS) else 0.0


def build_decomposed_model(problem: Any, decomposition: Mapping[str, Any], ff_dim: int, hidden: int,
                           layers: int, *, seed: int = 0, sigma: float | None = None,
                           dtype: str = "float64") -> DecomposedModel:
    """A fresh decomposed model from a :func:`decomposed_settings` table's ``decomposition``
    and subnetwork shape. ``sigma``: the subnetworks' Fourier scale on the finest level (None:
    :meth:`~helmpinn.models.decomposition.DecomposedModel.create`'s, from the wavenumber)."""
    if dtype != "float64":
        raise ValueError(f"dtype: a decomposed model is float64, got {dtype!r}")
    dd = decomposition
    lo, hi = np.asarray(dd["lo"], float), np.asarray(dd["hi"], float)
    edges = dd.get("edges")
    k: Any = float(dd["wavenumber"])
    if sigma is not None:   # σ = sigma_for(k h, d) on the first level: the k that gives this σ
        half = Level(lo, hi, dd["grids"][0], dd["overlap"], None if edges is None else edges[0]).half
        k = float(sigma) / sigma_for(float(np.mean(half)), len(lo))
    elif dd.get("local_wavenumber"):
        k = subdomain_wavenumbers(problem, [Level(lo, hi, g, dd["overlap"], None if edges is None else edges[i])
                                            for i, g in enumerate(dd["grids"])], k)
    constraint = BoxConstraint(lo, hi, 1.0 / float(dd["wavenumber"])) if dd["constraint"] else None
    return DecomposedModel.create(lo, hi, [tuple(g) for g in dd["grids"]], overlap=dd["overlap"],
                                  ff_dim=ff_dim, hidden_dim=hidden, num_hidden_layers=layers,
                                  wavenumber=k, constraint=constraint, seed=seed, edges=edges)


def local_layout(problem: Any, per_wavelength: float, overlap: float) -> tuple[list | None, float] | None:
    """Where κ varies (:func:`helmpinn.defaults.local_wavenumbers`; None for a constant κ): the
    fine level's cell edges per axis (:func:`helmpinn.defaults.graded_edges` on each axis's
    profile, the largest local wavenumber over the other axes), or None where graded cells are
    no fewer than equal ones on every axis (an axis that gains nothing keeps equal cells), and
    the local wavelengths the sampled domain holds, ``∫ (k/2π)^d dx`` (the points' measure)."""
    probe = local_wavenumbers(problem)
    if probe is None:
        return None
    lo, hi, k = probe
    d = k.ndim
    cell = float(np.prod((hi - lo) / np.array(k.shape)))
    held = float(np.sum((k / (2 * math.pi)) ** d) * cell)
    waves = wavelengths(problem)
    equal = [max(1, math.ceil(per_wavelength * w - 1e-9)) for w in waves]
    edges, gained = [], False
    for a in range(d):
        profile = np.max(np.moveaxis(k, a, 0).reshape(k.shape[a], -1), axis=1)
        e = graded_edges(float(lo[a]), float(hi[a]), profile, per_wavelength, overlap)
        if len(e) - 1 < equal[a]:
            edges.append(e.tolist())
            gained = True
        else:
            edges.append(np.linspace(lo[a], hi[a], equal[a] + 1).tolist())
    return (edges if gained else None), held


def subdomain_wavenumbers(problem: Any, levels: list[Level], k_max: float) -> np.ndarray:
    """Per subdomain of ``levels`` (in the model's order), the largest local wavenumber over its
    support (:func:`helmpinn.defaults.local_wavenumbers`' probes, a probe cell counted where it
    meets the support), at most ``k_max``; ``k_max`` everywhere for a constant κ."""
    n = sum(len(lv) for lv in levels)
    probe = local_wavenumbers(problem)
    if probe is None:
        return np.full(n, k_max)
    lo, hi, k = probe
    cell = (hi - lo) / np.array(k.shape)
    out = []
    for lv in levels:
        for index in lv.indices:
            c, h = lv.centre(index), lv.half_of(index)
            i0 = np.clip(np.floor((c - h - lo) / cell).astype(int), 0, np.array(k.shape) - 1)
            i1 = np.clip(np.ceil((c + h - lo) / cell).astype(int), i0 + 1, np.array(k.shape))
            out.append(min(float(np.max(k[tuple(slice(a, b) for a, b in zip(i0, i1))])), k_max))
    return np.array(out)


def sampled_problem(problem: Any, decomposition: Mapping[str, Any] | None, corners: bool = False,
                    singular: bool = False, radiation: float = 0.0) -> Any:
    """The problem whose points a decomposed run draws: a shallow copy where its
    ``decomposition`` follows the local wavenumber (:func:`local_layout`), whose PDE points are
    drawn in proportion to ``k(x)^d`` (a :class:`~helmpinn.problems.sampler.CellDensity` on the
    probes of :func:`helmpinn.defaults.local_wavenumbers`, with the importance weights that keep
    the loss the mean of ``|r|²`` over the domain): ppw points per local wavelength along each
    axis, as the points' count assumes; and where the run adds the corner rows (``corners``)
    and every corner takes them, whose corner weights reach
    :func:`helmpinn.problems.corners.rows_corner_radius`; where the model adds the corners'
    singular functions (``singular``), without the corner weights (nor, through them, the corner
    rows); where the run's radiation rows (``radiation``, their amplification) exist on the
    problem (:func:`~helmpinn.problems.radiation.radiation_count`) and read a smoothed jump's ramps
    at full size, whose ramps' rows weigh
    :data:`~helmpinn.problems.radiation.RADIATION_RAMP_WEIGHT`; else ``problem`` itself."""
    probe = local_wavenumbers(problem) if decomposition and decomposition.get("local_wavenumber") else None
    radius = rows_corner_radius(problem) if corners and not singular else None
    unweighted = singular and getattr(problem.sampler, "corner_radius", None) is not None
    ramps = getattr(getattr(problem, "sampler", None), "row_weights", None)
    read = isinstance(ramps, RampWeights) and ramps.weight != RADIATION_RAMP_WEIGHT \
        and radiation_count(problem, radiation) > 0   # (no rows: too many columns, or not 2-D)
    ramps = replace(ramps, weight=RADIATION_RAMP_WEIGHT) if read else None
    if probe is None and radius is None and not unweighted and ramps is None:
        return problem
    out = copy.copy(problem)
    out.sampler = copy.copy(problem.sampler)
    if probe is not None:
        lo, hi, k = probe
        out.sampler.density = CellDensity(lo, hi, k ** k.ndim)
    if radius is not None:
        out.sampler.corner_radius = radius
    if unweighted:
        out.sampler.corner_radius = None
    if ramps is not None:
        out.sampler.row_weights = ramps
    return out


#: The candidate points of :func:`residual_density`, per PDE point of the run, and the cells (of
#: the density's grid, per axis) that each residual's mean is taken over.
ADAPT_CANDIDATES = 1.0
ADAPT_BLOCK = 4


def residual_density(run: "Trainer", share: float) -> CellDensity:
    """The density of a decomposed run's next points (residual-based adaptive sampling): the
    run's density (``run.problem.sampler.density``, a :class:`CellDensity`) ρ with ``share`` of it
    moved to where the residual is large, ``ρ ((1 − share) + share R / ⟨R⟩_ρ)``, R the mean
    ``|r|²`` of the PDE residual (unweighted, at the current parameters) over blocks of
    :data:`ADAPT_BLOCK` cells per axis, at :data:`ADAPT_CANDIDATES` fresh candidate points per
    PDE point drawn from ρ, ⟨R⟩_ρ its mean under ρ. The importance weights of the draw keep the
    loss the mean of ``|r|²`` over the domain: the points, not the loss, move. The candidates are
    the same on every MPI rank (a generator seeded by the step)."""
    density = run.problem.sampler.density
    rng = np.random.default_rng(1_000_003 + int(run.step))
    ts = run.problem.sample(max(int(ADAPT_CANDIDATES * run.pde_points), 1), 0, rng, "uniform")
    rows = Rows.from_training_set(ts, {"pde": 1.0}, drop=("data", "bc"))
    r = run.model.residuals_for(rows, comm=run.comm).residuals(run.model.params)
    n = len(ts.x_pde)
    w = np.ones(n) if getattr(ts, "pde_weight", None) is None else np.asarray(ts.pde_weight, np.float64)
    r2 = (r[0:2 * n:2] ** 2 + r[1:2 * n:2] ** 2) * n / w   # |r|² itself: the row scale 1/n and sqrt(w) off
    shape = np.array(density.values.shape)
    blocks = np.maximum(shape // ADAPT_BLOCK, 1)
    idx = np.clip(np.floor((ts.x_pde - density.lo) / (density.hi - density.lo) * blocks).astype(np.int64), 0, blocks - 1)
    flat = np.ravel_multi_index(tuple(idx.T), tuple(blocks))
    total = np.bincount(flat, r2, minlength=int(np.prod(blocks)))
    count = np.bincount(flat, minlength=int(np.prod(blocks)))
    mean_r2 = float(np.mean(r2)) if len(r2) else 0.0
    R = np.where(count > 0, total / np.maximum(count, 1), mean_r2).reshape(tuple(blocks))
    # each cell of the density's grid takes its block's R
    cell_blocks = [np.minimum((np.arange(shape[a]) * blocks[a]) // shape[a], blocks[a] - 1) for a in range(len(shape))]
    R = R[np.ix_(*cell_blocks)]
    rho = density.values
    avg = float(np.sum(rho * R) / np.sum(rho))
    if not (avg > 0 and np.isfinite(avg)):
        return density
    return CellDensity(density.lo, density.hi, rho * ((1 - share) + share * np.maximum(R / avg, 1e-3)))
