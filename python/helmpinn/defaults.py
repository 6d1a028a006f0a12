"""Default settings of a training run, in one place: the loss weights, the model, the points and
each optimiser's run settings, chosen from the problem alone (what :func:`helmpinn.solve`,
``helmpinn train`` and :class:`~helmpinn.Trainer` take when an option is not given). A user's
:class:`~helmpinn.Problem` gets the same treatment as a built-in one.

The rules, from two numbers of the problem:

- k, the problem's largest wavenumber (``problem.wavenumber``), at least π/L (L the largest
  extent of the sampled domain: an error spans at least half a wave of it): :func:`scale_wavenumber`;
- the number of wavelengths the sampled domain (a PML's layer included: the network represents
  the field there too, and the points are drawn there) spans along each dimension,
  ``k (hi_i − lo_i) / 2π`` over its bounding box: :func:`wavelengths`.
  Their geometric mean, the wavelengths across (:func:`wavelengths_across`), sizes a network.

**Loss weights** (:func:`auto_weights`): each term weighted by what the same error e (a field
error of relative size e, varying on the wavelength's scale) costs in it. The PDE residual of
such an error is about ``k² e``, so its weight is 1/k² (a cost of ``k² e²``); a Dirichlet
residual (the data term: Dirichlet parts, a PML's outer wall and data points) is e; a Robin
residual ``∂e/∂n + α e`` is about ``sqrt(k² + |α|²) e``, with ᾱ the root mean square of ``|α|`` over
the Robin parts. For Adam every boundary term is weighted to cost half the PDE term's ``k² e²``:
data ``k²/2``, bc ``k² / (2 (k² + ᾱ²))`` (1/2 for Neumann, 1/4 for Sommerfeld, α = −ik); for
Levenberg-Marquardt the same cost as the PDE term (data ``k²``, bc ``k² / (k² + ᾱ²)``). The
boundary values are the easier part to fit; at equal costs Adam spends more of its steps on
them and the interior error falls more slowly, while Gauss-Newton steps, which solve for every
row at once, converge faster with the boundary rows at full weight; at many times it (as the former fixed weights,
data 100 and bc 100/k², did for k = 2: 25 times) the optimiser first fits the boundary with a
field that dies out a short way inside, and leaves that state only slowly. The core has one
weight for all Robin rows; parts whose ``|α|`` differ by a factor of a few stay within that factor
squared, so no per-point weight is needed.

**Fourier scale** (:func:`fourier_sigma`): ``B ~ N(0, σ²)`` with ``σ = k / (2π sqrt(d))``, so
that the features' angular frequencies have a root mean square of k in any dimension.

**Points**, from the wavelengths: ``ppw^d`` points per cubic wavelength of the sampled domain,
ppw points per wavelength per dimension: for Adam's redrawn points 64 / 16 / 8 in 1-D / 2-D /
3-D (:data:`ADAM_POINTS_PER_WAVELENGTH`, at least 512 / 2048 / 4096 points), for
Levenberg-Marquardt's fixed ones 100 / 27 / 9 (:data:`LM_POINTS_PER_WAVELENGTH`, at least
400 / 3000 / 4000 points, and 1.1 P in 2-D and 3-D: R = 2 × points residuals above P
parameters). Boundary points in proportion (Adam: 1/8 of the PDE points in 2-D, 3/16 in 3-D;
LM: 1/4 in 2-D, 1/3 in 3-D; 2 in 1-D, the two ends).

**Network**: Adam's is 2 × 64 on 32 frequencies; LM's (:func:`lm_settings`) grows with the
wavelengths w across the sampled domain, the geometric mean of the sides'
(:func:`wavelengths_across`; 1-D: m 16, 2 × 32 up to w = 5, m 32, 2 × 64 up to 20, then
m 32, 2 × 96; 2-D and 3-D: m 16, 2 × 32 up to :data:`LM_SMALL_NETWORK_UP_TO` (2.5 with a PML,
3 without), m 24, 2 × 48 up to 5, then m 32, 2 × 64), since LM's cost grows as P² to P³: a
step of the 4,850 parameters of 2 × 48 costs about 4.5 times one of the 2,210 of 2 × 32 on
the same points, and without a PML the small network's steps lower the error about as fast
(on ``heterogeneous2d``, 2.8 across, and ``waveguide``, 3 across, it is below 1e-4 after 14
to 17 steps, in under 2 minutes on 2 busy cores, where the larger network's first 5 to 8 steps
left it above 1e-3). The sound-hard and sound-soft cylinders in their PML (2.6 across) keep the
larger one they were measured with.

**Fresh points for LM** (:data:`LM_GROW_GAP`, ...; ``LMSettings``' ``grow_*``): LM fits one
fixed set of points, and where they are too few for the field it fits the points rather than
the field: the loss on them keeps falling while the loss on points it never saw does not. The
run loop's evaluations measure that as the gap, the validation loss over the training loss at
the same parameters (about 1 for a field fitted everywhere). When the gap exceeds
:data:`LM_GROW_GAP` (3) at :data:`LM_GROW_PATIENCE` (2) evaluations in a row, LM's points
grow by :data:`LM_GROW_FACTOR` (1.5), newly drawn, up to :data:`LM_GROW_MAX` (4) times the
first draw and only while LM's solver keeps within its memory budget
(:func:`helmpinn.optim.lm.memory_estimate`). Why 3: a least-squares fit of P parameters to R
residuals of a field it resolves leaves a gap of about ``(1 + P/R) / (1 − P/R)`` (the expected
test over training error of a linear fit), at most 2.6 with the rule's R ≥ 2.2 P; the built-in
problems stay between 1 and 2.4 all the way to their LM targets, while the sound-hard cylinder
on the rule's 5500 points passes 3 as its error levels off near 2e-3.

**LM's Gram matrix**: ``JᵀJ`` in float32 (as CG's preconditioner, :mod:`helmpinn.optim.lm`; about half
the cost of float64's) for a problem with a PML, float64 otherwise: a PML's reflection (of order
1e-4 for the default layer) bounds the error LM can reach there, and float32's preconditioner
slows LM only near errors of 1e-5 and below, which problems with exact boundaries reach.

**Adam's steps**: 2000 (:data:`ADAM_STEPS`), 10000 with a PML (:data:`ADAM_PML_STEPS`): the
field that decays through the layer is the slowest part for Adam, and its error there is still
falling steadily at 2000 steps (the sound-hard cylinder: 1.3e-2 after 2000, 6.7e-3 after 10000).
An Adam warm start before LM (:func:`run_settings` "auto") stays at 2000 steps.

**Optimiser**: :func:`run_settings` with "auto" (:func:`helmpinn.solve`) takes LM where its
dense system fits a memory budget, else an Adam warm start then matrix-free LM. Which of LM's
solvers fits a budget is one rule, :func:`lm_memory_rule`, which LM's own choice
(:func:`helmpinn.optim.lm.choose_solver`) applies too.

**A decomposed model** (:func:`helmpinn.training.dd_driver.decomposed_settings`, what :func:`helmpinn.solve` and ``helmpinn train
--optimizer auto`` take above :data:`DECOMPOSE_ABOVE` wavelengths across the sampled domain,
:func:`wavelengths_across`: the geometric mean of the wavelengths along its
sides, each at least one, a PML included). Each choice was measured against its alternatives
through ``hp.solve`` (benchmarks/bench_solve.py, benchmarks/bench_threshold.py) on the built-in
problems and a few a user might write; the measurements are in docs/benchmarks-archive.md, in
the section named beside each item.

- the threshold, :data:`DECOMPOSE_ABOVE` (3 wavelengths across in 2-D, 2.4 in 3-D, 32 in 1-D):
  below it one network trained by Levenberg-Marquardt ends lower; above it that network's dense
  steps (its points, and with them a step's cost, grow with the wavelengths²) keep it on a
  plateau for most of a few minutes' budget, while the decomposition passes 1e-2 within a
  minute or two and its error is the predictable one. Given longer, one network off its plateau
  can still end lower (``hp.solve(problem, model="network")``); when it leaves the plateau is not
  known before the run. The wavelengths are counted across (the geometric mean), not along the
  longest side: one network's cost grows with the domain's area in square wavelengths, and on
  elongated ducts up to 3 wavelengths across it ended lower. In 3-D the threshold lies between
  2.1 wavelengths, where one network was ahead, and 2.6, where the decomposition was; a 1-D
  network holds 32 wavelengths ("Where the decomposition starts", "Elongated domains",
  "In 3-D"); below it too, a 2-D problem whose re-entrant corners take the singular functions
  (:func:`helmpinn.problems.singular.corner_singularities`): one network has no such functions,
  and a point source by a sound-hard triangle 2.8 wavelengths across reached 2.1e-2 in 87 s
  decomposed (3 × 3) against 0.35 for one network by LM (docs/benchmarks.md, "Scatterers");
- one level of ``ceil(0.85 w_a)`` subdomains along each axis (:data:`SUBDOMAINS_PER_WAVELENGTH`;
  5 × 5 at 5 wavelengths), overlap 0.6, no coarse network level (the solver's coarse space
  carries the global coupling; a one-network level added parameters whose steps cost more than
  they gained: "The coarse correction: additive or deflated"); subnetworks of 16 frequencies
  and one hidden layer of 32 (1,154 parameters in 2-D), their Fourier scale a single network's
  at the local wavenumber k h (:meth:`~helmpinn.models.decomposition.DecomposedModel.create`,
  :func:`~helmpinn.params.sigma_for`, whose ``1/sqrt(d)`` gives the features' frequencies a root
  mean square of the local wavenumber; without it they were √d times higher, and ``cube3d`` at
  k = 8π ended higher for three seeds of four: "The subnetworks' Fourier scale");
- ``max(ppw^d Π w_a, P/2)`` PDE points, ppw 64 / 25 / 9 in 1-D / 2-D / 3-D
  (:data:`DD_POINTS_PER_WAVELENGTH`, fixed Sobol points,
  rounded up to 500), boundary points 1/20 of them (none under a hard constraint);
- where κ varies (a callable κ or velocity: a slow inclusion, a layer), the rules above can count
  wavelengths by the **local** wavenumber rather than the largest anywhere, when asked for
  (``decomposition={"local_wavenumber": True}``,
  :func:`helmpinn.training.dd_driver.local_layout`; off by default, for the measurements at the
  end of this item): the local wavenumber probed on a grid (:func:`local_wavenumbers`), along each
  axis cells of their own widths, each as wide as 0.85 subdomains per wavelength allow at the
  largest local k under its subdomain (:func:`graded_edges`; the tensor grid is finer along the
  rows and columns that cross a slow region, equal cells where grading gains nothing), each
  subnetwork's Fourier scale from the largest k under its own subdomain, and ``max(35^d ∫(k/2π)^d
  dx, P/2)`` PDE points (:data:`DD_LOCAL_POINTS_PER_WAVELENGTH`) drawn in proportion to
  ``k(x)^d`` with importance weights that keep the loss the domain's mean of ``|r|²``
  (:func:`helmpinn.training.dd_driver.sampled_problem`). On a square inclusion at half the
  velocity (``benchmarks/bench_sharp.py --case square``) the largest k everywhere asked for
  11 × 11 subdomains and 90,000 points, a Gauss-Newton step of 600 s on a loaded machine; the
  local rule takes 7 × 7 and 47,500. 25 points per local wavelength (the P/2 floor's 28,500)
  overfitted there (the validation gap reached 2.4 while the error stayed near 0.55) where 35
  passed 0.18 in 6 steps ("Decompositions by the local wavenumber"). It is not the default: on
  Marmousi at 3 Hz (``benchmarks/bench_seismic.py --case marmousi3hz --absorber damping --seed 1
  --optimizer auto --time-limit 600``, both plans side by side on the same shared cores) the
  largest k everywhere (20 × 9, 207,720 parameters) reached 2.2e-2 from the published solution
  in 9 steps where the local rule (184,640 parameters) reached 1.1e-1 in 8; on the slow disc it
  was not better (2.0e-2 at step 8 against 1.6e-2);
- a hard constraint (:class:`~helmpinn.models.decomposition.BoxConstraint` of scale 1/k) when the
  problem is a box without a PML whose every boundary part is ``Dirichlet(0)``;
- Gauss-Newton with Nielsen's λ rule. On a model with the hard constraint (:data:`DD_DAMPING`) the
  damping D lies halfway between Marquardt's and the identity (``damping="geometric"``, D =
  sqrt(diag(JᵀJ) × its mean)): on ``box-source`` it ended lower than Marquardt's
  D = diag(JᵀJ) for every seed measured, and far lower than the identity, and on
  ``dirichlet2d`` the two lay within the seeds' spread; elsewhere Marquardt's, where the
  geometric form was a little behind (the problems with a PML). Why the closed boxes prefer it
  is not known ("The damping's scale");
- CG to 1e-3 or 100 iterations (:data:`DD_CG_MAXITER`): a step's second hundred iterations do less
  than a new linearisation, so truncated steps taken shorter and more often end lower; 50 was
  too short ("CG's cap"). CG starts from the last step where the quadratic model says so
  (``cg_warm``; rarely taken);
- a rejected trial's step halved up to 3 times before λ grows (``backtrack``, the solver's
  default :data:`~helmpinn.optim.gauss_newton.BACKTRACK`): a rejected Gauss-Newton step of a
  decomposed model often has the right direction and too great a length, and without the
  halvings one rejection could raise λ by orders of magnitude and slow the run for many steps
  ("Backtracking a rejected step"). 3-D takes the same plan as 2-D (:data:`GN_BY_DIMENSION`
  changes only 1-D): with the subnetworks' Fourier scale above, it took ``cube3d`` at k = 8π
  below 1e-3 within 15 minutes for every seed measured ("The 2-D plan in 3-D");
- the output-layer coarse space; 200 steps at most, stopping when the loss falls by less than 1%
  over 10;
- the points grow by LM's rule (:class:`~helmpinn.training.drivers.PointsGrowth`) when the validation
  gap exceeds 1.5 (:data:`DD_GROW_GAP`, half LM's 3): a run comes to fit its points rather than the
  field, and new points then gain more than further steps on the old ones; growing at 1.5 ended
  lower than at 3 or the same within the seeds' spread ("Growing the points sooner");
- in a closed box in 2-D and 3-D, mode rows (``resonance``: the modes within
  :data:`helmpinn.problems.waves.RESONANCE_WITHIN` of κ, at most :data:`helmpinn.problems.waves.RESONANCE_MOST`,
  :func:`helmpinn.problems.waves.resonance_rows`): there the error lies almost whole in the few modes whose
  eigenvalue lies near κ, which a least-squares residual weighs 1/amplification² times less than
  the error they cause; each mode's row weighs its residual by its amplification, so the loss
  counts it as that error ("Mode rows"). Not in 1-D, where they were not measured
  (:data:`GN_BY_DIMENSION`). Under the hard constraint (u = 0 on every wall) each row is
  ``(κ − λ)⟨u, ψ⟩ − ⟨f, ψ⟩`` by Green's identity, u read on a Gauss-Legendre grid
  (:func:`helmpinn.problems.waves.resonance_green_rows`), not the points' sum of the residual: that sum
  carries the sampling's error, amplified like the residual, and the runs levelled at it
  ("Mode rows", its part on Green's identity). The grid's rows are value rows of the term
  :data:`helmpinn.models.decomposition.CARRIER_TERM` (the core's data term, kept out of the
  preconditioner's Gram matrices, which makes a 3-D step cheaper: "Green's rows through the
  data term"). In 3-D the error then moves to the modes just outside the rows' share, but
  holding more of them made some seeds' steps less predictable and gained nothing across seeds,
  so 3-D keeps the same share and cap ("Mode rows farther from resonance in 3-D");
- with ``optimizer="adam"`` (:data:`DD_ADAM_SETTINGS`) the same model and points, Adam at a
  constant learning rate of 3e-3 for 20,000 steps, evaluated every 100: of 1e-3 (the FBPINN
  papers'), 3e-3 and 1e-2 the best error after 300 s on ``box-source`` at 5 wavelengths, where
  Adam stays far behind Gauss-Newton ("hp.solve with its defaults, after the speed-ups";
  benchmarks/bench_decomposed_adam.py).

Functions:

- :func:`fourier_sigma`: the scale of the Fourier frequencies B.
- :func:`auto_weights`: the loss weights.
- :func:`wavelengths`: the wavelengths the sampled domain spans per dimension.
- :func:`default_settings`: Adam's run (the CLI's default optimiser).
- :func:`lm_settings`: LM's network, points and options (:func:`helmpinn.optim.lm.lm_defaults`).
- :func:`run_settings`: the run of any optimiser ("adam", "lbfgs", "lm", or "auto": LM, after an
  Adam warm start when its dense system is too large): Adam's settings with what the optimiser
  changes (L-BFGS: float64 on fixed points; LM: :func:`lm_settings`), the Adam warm start, and
  the optimiser's own options.
- :func:`lm_memory_rule`: which of LM's solvers (dense primal or dual, or matrix-free CG) a
  memory budget allows.

The optimisers' own options and their defaults are their settings tables in
:mod:`helmpinn.training.drivers` (``AdamSettings``, ``LBFGSSettings``, ``LMSettings``).
A problem's ``hints`` still replace any entry (``hints["weights"]``, ``hints["adam"]``,
``hints["lm"]``), for what the rules do not capture.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from . import _core
from .params import sigma_for
from .problems import Dirichlet
from .problems.singular import corner_singularities

__all__ = ["OPTIMIZERS", "BOUNDARY_SHARE", "LM_BOUNDARY_SHARE", "ADAM_POINTS_PER_WAVELENGTH", "LM_POINTS_PER_WAVELENGTH",
           "ADAM_LR", "ADAM_SCHEDULE", "ADAM_BETAS", "ADAM_STEPS", "ADAM_PML_STEPS", "LM_GROW_GAP", "LM_GROW_PATIENCE",
           "LM_GROW_FACTOR", "LM_GROW_MAX",
           "scale_wavenumber", "wavelengths", "wavelengths_across", "points_rule", "fourier_sigma", "auto_weights",
           "default_settings", "lm_settings", "LM_OPTIONS", "lm_options", "lm_memory_rule", "run_settings", "STALL_WINDOW",
           "STALL_FACTOR",
           "DECOMPOSE_ABOVE", "SUBDOMAINS_PER_WAVELENGTH", "DD_POINTS_PER_WAVELENGTH", "DD_DAMPING", "DD_CG_MAXITER",
           "DD_GROW_GAP", "GN_BY_DIMENSION", "DD_ADAM_SETTINGS", "should_decompose", "DD_LOCAL_POINTS_PER_WAVELENGTH",
           "LOCAL_PROBES_PER_WAVELENGTH", "LOCAL_PROBES_MOST", "local_wavenumbers", "graded_edges"]

#: The optimisers a run (and ``helmpinn train --optimizer``) can use by name.
OPTIMIZERS = ("adam", "lbfgs", "lm")

#: What a boundary term costs for an error, as a share of what the PDE term costs for it (see
#: :func:`auto_weights`): for Adam, and for Levenberg-Marquardt (:func:`lm_settings`).
BOUNDARY_SHARE = 0.5
LM_BOUNDARY_SHARE = 1.0

#: Adam's PDE points per wavelength per dimension (redrawn every ``resample_every`` steps), by
#: dimension, and the fewest PDE points per draw.
ADAM_POINTS_PER_WAVELENGTH = {1: 64, 2: 16, 3: 8}
_ADAM_MIN_POINTS = {1: 512, 2: 2048, 3: 4096}

#: Adam's own defaults (:class:`helmpinn.optim.AdamSettings` reads them): the peak learning
#: rate, its schedule over the run, and the moments' decay rates (β2 = 0.99 adapts faster than
#: the usual 0.999, which measurably helps the slowly converging near-resonant modes).
ADAM_LR = 1e-2
ADAM_SCHEDULE = "cosine"
ADAM_BETAS = (0.9, 0.99)

#: Adam's steps, and its steps on a problem with a PML (:func:`default_settings`).
ADAM_STEPS = 2000
ADAM_PML_STEPS = 10000

#: Levenberg-Marquardt's fixed PDE points per wavelength per dimension, by dimension, and the
#: fewest PDE points.
LM_POINTS_PER_WAVELENGTH = {1: 100, 2: 27, 3: 9}
_LM_MIN_POINTS = {1: 400, 2: 3000, 3: 4000}

#: The wavelengths across (:func:`wavelengths_across`) up to which LM's network in 2-D and 3-D is
#: the smallest (m 16, 2 × 32), by whether the problem has a PML (the module docstring).
LM_SMALL_NETWORK_UP_TO = {True: 2.5, False: 3.0}

#: Levenberg-Marquardt's points grow when the gap (validation loss / training loss) exceeds
#: :data:`LM_GROW_GAP` at :data:`LM_GROW_PATIENCE` evaluations in a row: by a factor
#: :data:`LM_GROW_FACTOR`, up to :data:`LM_GROW_MAX` times the first draw (the module docstring).
LM_GROW_GAP = 3.0
LM_GROW_PATIENCE = 2
LM_GROW_FACTOR = 1.5
LM_GROW_MAX = 4.0


#: The stall stop of Levenberg-Marquardt and of the decomposition's Gauss-Newton: the loss fell by
#: less than a factor :data:`STALL_FACTOR` over :data:`STALL_WINDOW` steps on the same points.
STALL_WINDOW = 10
STALL_FACTOR = 0.99

#: Decompose a problem that spans more than this many wavelengths across its sampled domain
#: (the geometric mean of the sides'), by dimension (module docstring: the measurements).
DECOMPOSE_ABOVE = {1: 32.0, 2: 3.0, 3: 2.4}
#: Subdomains per wavelength along each axis of the fine level.
SUBDOMAINS_PER_WAVELENGTH = 0.85
#: PDE points per wavelength per dimension of a decomposed run, by dimension.
DD_POINTS_PER_WAVELENGTH = {1: 64, 2: 25, 3: 9}
#: The same where the decomposition follows the local wavenumber (a κ that varies; the points per
#: local wavelength, :func:`helmpinn.training.dd_driver.local_layout`): more than on a constant
#: medium, whose rule counts them at the largest k everywhere, so in a slow region's surroundings
#: more than its 25 per local wavelength (module docstring; 1-D and 3-D: not measured, as above).
DD_LOCAL_POINTS_PER_WAVELENGTH = {1: 64, 2: 35, 3: 9}
#: Gauss-Newton's damping by whether the model has the hard constraint (a closed box with
#: Dirichlet(0) walls; module docstring): measured in 2-D and on ``cube3d``.
DD_DAMPING = {True: "geometric", False: "marquardt"}
#: CG's iterations at most in one Gauss-Newton trial (module docstring: against 200, 1.25 to 2
#: times lower errors on ``box-source``, ``free-source`` and ``dirichlet2d``, the same on
#: ``scatter-soft``, whose CG mostly stops at its tolerance first).
DD_CG_MAXITER = 100
#: The validation gap (validation loss / training loss) above which the points grow
#: (:class:`~helmpinn.training.drivers.PointsGrowth`; LM's is :data:`LM_GROW_GAP`; module docstring).
DD_GROW_GAP = 1.5
#: Gauss-Newton's settings where a dimension's plan differs from the 2-D one (module docstring):
#: mode rows in 2-D and 3-D, where they were measured, not in 1-D; 3-D takes the 2-D plan
#: (docs/benchmarks-archive.md, "The 2-D plan in 3-D").
GN_BY_DIMENSION = {1: {"resonance": 0.0}}
#: What :func:`helmpinn.training.dd_driver.decomposed_settings` changes for Adam (module docstring).
DD_ADAM_SETTINGS = {"optimizer": "adam", "lr": 3e-3, "schedule": "constant", "steps": 20000, "eval_every": 100}


def _extent(problem: Any) -> np.ndarray:
    """The sampled domain's bounding-box extent per dimension (a PML's layer included)."""
    lo, hi = getattr(problem, "sampling_domain", problem.domain).bounds
    return np.asarray(hi, np.float64) - np.asarray(lo, np.float64)


def scale_wavenumber(problem: Any) -> float:
    """k of the rules: the problem's wavenumber, at least π/L (L the sampled domain's largest
    extent: an error spans at least half a wave of the domain)."""
    return max(float(problem.wavenumber), math.pi / float(np.max(_extent(problem))))


def wavelengths(problem: Any) -> np.ndarray:
    """The number of wavelengths ``k L_i / 2π`` the sampled domain (a PML's layer included) spans
    along each dimension i, k from :func:`scale_wavenumber` (so at least 1/2)."""
    return scale_wavenumber(problem) * _extent(problem) / (2 * math.pi)


def wavelengths_across(problem: Any) -> float:
    """The wavelengths across the sampled domain: the geometric mean ``(Π w_i)^(1/d)`` of
    :func:`wavelengths`, each side counted as at least one wavelength, the side of the square
    (cube) that holds as many square (cubic) wavelengths. One network must hold the field over
    all of them and its points grow with them, so this, not the longest side, sizes LM's
    network (:func:`lm_settings`) and decides the decomposition
    (:func:`helmpinn.training.dd_driver.should_decompose`): a 3 × 0.6 duct at 6.6 × 1.3 wavelengths is
    2.95 across, and one network trains it as it trains a square of 3. A side shorter than a
    wavelength still holds the field's variation along the others, so a strip 20 × 0.2
    wavelengths counts as 20 × 1 (4.5 across), not 2 (unmeasured: no domain with a side below
    one wavelength was measured, and this keeps such strips on the rule's former side)."""
    w = np.maximum(wavelengths(problem), 1.0)
    return float(np.prod(w) ** (1.0 / w.size))


def points_rule(problem: Any, per_wavelength: float, least: float, step: int) -> int:
    """The points rule of every run (Adam's, LM's, the decomposition's; the module docstring):
    ``max(least, ppw^d × Π wavelengths)`` PDE points, ``ppw`` = ``per_wavelength`` per
    wavelength per dimension (:func:`wavelengths`), rounded up to a multiple of ``step``."""
    d = int(problem.dim)
    n = max(least, per_wavelength ** d * float(np.prod(wavelengths(problem))))
    return int(step * math.ceil(n / step))


def fourier_sigma(problem: Any) -> float:
    """``sigma = k / (2π sqrt(d))``, the standard deviation of the entries of B ~ N(0, sigma²):
    the features' angular frequencies ``2π|B|`` then have a root mean square of k
    (:func:`scale_wavenumber`) in any dimension d."""
    return sigma_for(scale_wavenumber(problem), problem.dim)


def _robin_alpha_rms(problem: Any) -> float | None:
    """The root mean square of ``|α|`` over the problem's Robin parts, by their measure (256
    boundary points; None without a Robin part)."""
    robin = {part: bc for part, bc in getattr(problem, "bcs", {}).items()
             if bc is not None and not isinstance(bc, Dirichlet)}
    if not robin:
        return None
    sample = problem.domain.sample_boundary(256, np.random.default_rng(0), "uniform")
    values = [np.abs(bc.alpha_values(sample.x[sample.parts == part])) for part, bc in robin.items()]
    values = np.concatenate(values)
    if not len(values):   # parts too small for any of the points: their constants, if any
        values = np.array([abs(complex(bc.alpha)) for bc in robin.values() if not callable(bc.alpha)] or [0.0])
    return float(np.sqrt(np.mean(values**2)))


def auto_weights(problem: Any, share: float = BOUNDARY_SHARE) -> dict[str, float]:
    """Default loss weights: ``pde = 1/k²``, ``data = s k²``, ``bc = s k² / (k² + ᾱ²)`` with the
    boundary share ``s`` (:data:`BOUNDARY_SHARE`, 1/2, for Adam; Levenberg-Marquardt's
    :func:`lm_settings` uses :data:`LM_BOUNDARY_SHARE`, 1).

    k is :func:`scale_wavenumber`, ᾱ the root mean square of ``|α|`` over the Robin parts. For the
    same relative error e of the field the PDE term then costs about ``k² e²`` and each boundary
    term half of that (the module docstring: a PDE residual of about ``k² e``, a Dirichlet or
    data residual e, a Robin residual about ``sqrt(k² + |α|²) e``): Neumann parts get 1/2,
    Sommerfeld parts 1/4. A problem's ``hints["weights"]`` replace any of them.
    """
    k = scale_wavenumber(problem)
    alpha = _robin_alpha_rms(problem) or 0.0
    weights = {"pde": 1.0 / k**2, "data": share * k**2, "bc": share * k**2 / (k**2 + alpha**2)}
    return _apply_hints(weights, getattr(problem, "hints", {}).get("weights"), "weights")


def _apply_hints(settings: dict[str, Any], hints: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """``settings`` with a problem's hints for them applied (unknown keys raise ValueError)."""
    unknown = set(hints or {}) - set(settings)
    if unknown:
        raise ValueError(f"problem hints[{what!r}]: unknown keys {sorted(unknown)}; known: {sorted(settings)}")
    return {**settings, **dict(hints or {})}


def default_settings(problem: Any) -> dict[str, Any]:
    """Model and training settings of an Adam run on ``problem`` (``helmpinn train``'s defaults).

    Fourier frequencies from :func:`fourier_sigma`; a float32 network of 2 × 64 on 32
    frequencies; :data:`ADAM_STEPS` (2000) steps, :data:`ADAM_PML_STEPS` (10000) with a PML, with a
    cosine schedule (Adam's own defaults, :data:`ADAM_LR`, :data:`ADAM_SCHEDULE`, :data:`ADAM_BETAS`);
    Sobol points redrawn every 100 steps, :data:`ADAM_POINTS_PER_WAVELENGTH` per wavelength per
    dimension (at least 512 / 2048 / 4096 in 1-D / 2-D / 3-D, a multiple of 256), boundary points
    1/8 of them in 2-D, 3/16 in 3-D, 2 in 1-D; the weights of :func:`auto_weights`. A problem's
    ``hints["adam"]`` replace any setting.
    """
    d = problem.dim
    d3 = min(int(d), 3)
    pde_points = points_rule(problem, ADAM_POINTS_PER_WAVELENGTH[d3], _ADAM_MIN_POINTS[d3], 256)
    settings: dict[str, Any] = {
        "ff_dim": 32,
        "hidden": 64,
        "layers": 2,
        "sigma": fourier_sigma(problem),
        "dtype": "float32",
        "steps": ADAM_PML_STEPS if getattr(problem, "pml", None) is not None else ADAM_STEPS,
        "lr": ADAM_LR,
        "schedule": ADAM_SCHEDULE,
        "betas": ADAM_BETAS,
        "pde_points": pde_points,
        "bc_points": {1: 2, 2: pde_points // 8}.get(d, 3 * pde_points // 16),
        "sampling": "sobol",
        "resample_every": 100,
        "eval_every": 100,
        "weights": auto_weights(problem),
        "lbfgs": 0,
    }
    return _apply_hints(settings, getattr(problem, "hints", {}).get("adam"), "adam")


def lm_settings(problem: Any) -> dict[str, Any]:
    """Model and training settings of a Levenberg-Marquardt run on ``problem``
    (:func:`helmpinn.optim.lm.lm_defaults`, ``helmpinn train --optimizer lm``).

    A small network from the wavelengths w across the sampled domain
    (:func:`wavelengths_across`; the table in the module docstring: LM's cost grows as P² to P³, and a
    few thousand parameters reach 1e-6 on the built-in problems), float64, the Fourier scale of
    :func:`fourier_sigma`, fixed Sobol points (no refresh: the Gauss-Newton model is of one
    least-squares problem): :data:`LM_POINTS_PER_WAVELENGTH` per wavelength per dimension, at
    least 400 / 3000 / 4000 in 1-D / 2-D / 3-D and, in 2-D and 3-D, 1.1 P (a multiple of 500 there,
    of 100 in 1-D), no Adam warm start (LM from the initialisation converges in tens of
    iterations), ``JᵀJ`` in float32 with a PML (float64 otherwise; the module docstring), and a
    stopping rule: ``iterations`` at most, or the loss falling by less than
    ``stall_factor`` over ``stall_window`` iterations, or the damping at its maximum; more
    points when the validation gap says LM fits its points rather than the field (``grow_gap``,
    ``grow_patience``, ``grow_factor``, ``grow_max``: the module docstring). A problem's
    ``hints["lm"]`` replace any of them (a network size given there sets the points from its P).
    """
    d = int(problem.dim)
    waves = wavelengths_across(problem)
    if d == 1:
        ff, hidden = (16, 32) if waves <= 5 else (32, 64) if waves <= 20 else (32, 96)
    else:
        # the limit itself included (a 1.5 × 6 wavelength duct is 3 across up to rounding)
        small = LM_SMALL_NETWORK_UP_TO[getattr(problem, "pml", None) is not None] * (1 + 1e-9)
        ff, hidden = (16, 32) if waves <= small else (24, 48) if waves <= 5 else (32, 64)
    layers = 2
    hints = dict(getattr(problem, "hints", {}).get("lm") or {})
    ff, hidden, layers = hints.get("ff_dim", ff), hints.get("hidden", hidden), hints.get("layers", layers)
    P = _core.ModelSpec(d, ff, hidden, layers).num_params
    step = 100 if d == 1 else 500
    least = _LM_MIN_POINTS[min(d, 3)] if d == 1 else max(_LM_MIN_POINTS[min(d, 3)], 1.1 * P)   # R >= 2.2 P
    pde_points = points_rule(problem, LM_POINTS_PER_WAVELENGTH[min(d, 3)], least, step)
    bc_points = 2 if d == 1 else pde_points // 4 if d == 2 else pde_points // 3
    settings = {"ff_dim": ff, "hidden": hidden, "layers": layers, "sigma": fourier_sigma(problem),
                "dtype": "float64", "iterations": 200, "pde_points": pde_points, "bc_points": bc_points,
                "sampling": "sobol", "resample_every": 0, "eval_every": 5, "warm_start": 0,
                "solver": "auto", "damping": "identity", "update": "fixed", "lam": 1e-3, "geodesic": True,
                "gram": "float32" if getattr(problem, "pml", None) is not None else "float64",
                "stall_window": STALL_WINDOW, "stall_factor": STALL_FACTOR, "grow_gap": LM_GROW_GAP,
                "grow_patience": LM_GROW_PATIENCE, "grow_factor": LM_GROW_FACTOR, "grow_max": LM_GROW_MAX,
                "weights": auto_weights(problem, LM_BOUNDARY_SHARE)}
    return _apply_hints(settings, hints, "lm")


#: The entries of :func:`lm_settings` that are options of :meth:`helmpinn.Trainer.fit_lm`
#: (:func:`lm_options`).
LM_OPTIONS = ("solver", "damping", "update", "lam", "geodesic", "gram", "stall_window", "stall_factor",
              "grow_gap", "grow_patience", "grow_factor", "grow_max")


def lm_options(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The :meth:`~helmpinn.Trainer.fit_lm` keywords among ``defaults`` (an :func:`lm_settings`)."""
    return {k: defaults[k] for k in LM_OPTIONS if k in defaults}


def lm_memory_rule(P: int, R: int, need: Callable[[str], int], budget: int, ranks: int = 1) -> str:
    """The solver of Levenberg-Marquardt that ``budget`` bytes allow for ``P`` parameters and ``R``
    residuals, ``need(solver)`` being the bytes the dense solver ``solver`` ("primal": P×P
    matrices; "dual": R×R) holds: over MPI (``ranks`` > 1) "primal" (its P×P system is summed over
    the ranks); else "primal" when R >= P and "dual" when R < P (the smaller system), and when that
    one does not fit the other where it fits; else "cg", matrix-free, its memory O(P + R).

    The one place this rule is written. :func:`helmpinn.optim.lm.choose_solver` (LM's
    ``solver="auto"``) applies it with :func:`helmpinn.optim.lm.memory_estimate`, what LM holds
    (its Jacobian made in chunks), within ``max_matrix_bytes``; :func:`run_settings` ("auto")
    with the whole dense system, J and JᵀJ, 8 (P·R + P²) bytes for either solver, within
    ``memory_bytes``. The two counts differ (LM makes its Jacobian in chunks): where the whole J
    is over ``memory_bytes`` and LM's own count within it, the plan takes the Adam warm start and
    CG all the same.
    """
    order = ["primal"] if int(ranks) > 1 else (["primal", "dual"] if R >= P else ["dual", "primal"])
    for name in order:
        if need(name) <= budget:
            return name
    return "cg"


def run_settings(problem: Any, optimizer: str = "adam", memory_bytes: int = 2 << 30) -> dict[str, Any]:
    """The settings ``helmpinn train --optimizer OPTIMIZER`` starts from on ``problem``.

    Adam's (:func:`default_settings`) plus ``optimizer`` and ``warm_start`` (Adam steps before
    L-BFGS or LM; 0), changed by the optimiser: "lbfgs" trains a float64 model on fixed points
    (2000 iterations, the error every 50), "lm" takes :func:`lm_settings` (its
    network, points and precision) and its options under ``settings["lm"]`` (keywords of
    :class:`helmpinn.training.drivers.LMDriver`). "auto" (:func:`helmpinn.solve`) is "lm" when the
    dense system fits ``memory_bytes`` (:func:`lm_memory_rule` with 8 bytes × (P·R + P²), P
    parameters and R residuals), else :data:`ADAM_STEPS` Adam steps as a warm start, then LM
    with its matrix-free solver ("cg", memory O(P + R)).
    """
    if optimizer == "auto":
        settings = run_settings(problem, "lm")
        P = _core.ModelSpec(problem.dim, settings["ff_dim"], settings["hidden"], settings["layers"]).num_params
        R = 2 * (settings["pde_points"] + settings["bc_points"])   # (re, im) per point
        dense = 8 * (P * R + P * P)   # the whole dense system, J and JᵀJ, for either solver
        if lm_memory_rule(P, R, lambda solver: dense, memory_bytes) == "cg":
            settings.update(warm_start=ADAM_STEPS, lm={**settings["lm"], "solver": "cg"})
        return settings
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS} or 'auto', got {optimizer!r}")
    settings = {**default_settings(problem), "optimizer": optimizer, "warm_start": 0}
    if optimizer == "lbfgs":
        settings.update(dtype="float64", steps=2000, resample_every=0, eval_every=50, lbfgs=0)
    elif optimizer == "lm":
        d = lm_settings(problem)
        settings.update({k: d[k] for k in ("ff_dim", "hidden", "layers", "sigma", "dtype", "pde_points",
                                            "bc_points", "sampling", "resample_every", "eval_every",
                                            "warm_start", "weights")})
        settings.update(steps=d["iterations"], lbfgs=0, lm=lm_options(d))
    return settings


def should_decompose(problem: Any) -> bool:
    """True when ``problem`` spans more than :data:`DECOMPOSE_ABOVE` wavelengths across its
    sampled domain (:func:`wavelengths_across`, the geometric mean of the
    sides'), or when its re-entrant corners take the singular functions
    (:func:`helmpinn.problems.singular.corner_singularities`), which only the decomposed model's
    Gauss-Newton run adds (the module docstring)."""
    limit = DECOMPOSE_ABOVE[min(int(problem.dim), 3)]
    if wavelengths_across(problem) > limit * (1 + 1e-9):   # at the limit itself: one network
        return True
    return corner_singularities(problem) is not None


#: The local wavenumber's probes (:func:`local_wavenumbers`): this many per shortest wavelength
#: along each axis, at most :data:`LOCAL_PROBES_MOST` per axis by dimension.
LOCAL_PROBES_PER_WAVELENGTH = 8
LOCAL_PROBES_MOST = {1: 4096, 2: 384, 3: 64}


def local_wavenumbers(problem: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The local wavenumber ``sqrt(max(Re κ, 0))`` over the sampled domain's bounding box, at the
    centres of a regular grid of cells (:data:`LOCAL_PROBES_PER_WAVELENGTH` per shortest
    wavelength, :data:`LOCAL_PROBES_MOST` per axis at most), each at least the rules' floor π/L
    (:func:`scale_wavenumber`): ``(lo, hi, k)``, k of the grid's shape. None for a constant κ
    (the rules' k holds everywhere)."""
    if not callable(getattr(problem, "kappa", None)):
        return None
    d = int(problem.dim)
    lo, hi = (np.asarray(b, np.float64) for b in getattr(problem, "sampling_domain", problem.domain).bounds)
    k_max = scale_wavenumber(problem)
    most = LOCAL_PROBES_MOST.get(d, 32)
    n = [int(min(most, max(8, math.ceil(LOCAL_PROBES_PER_WAVELENGTH * (hi[a] - lo[a]) * k_max / (2 * math.pi)))))
         for a in range(d)]
    axes = [lo[a] + (np.arange(n[a]) + 0.5) * (hi[a] - lo[a]) / n[a] for a in range(d)]
    mesh = np.meshgrid(*axes, indexing="ij")
    x = np.stack([m.ravel() for m in mesh], axis=1)
    k = np.asarray(problem.local_wavenumber(x), np.float64).reshape(n)
    return lo, hi, np.maximum(k, math.pi / float(np.max(hi - lo)))


def graded_edges(lo: float, hi: float, k: np.ndarray, per_wavelength: float, overlap: float) -> np.ndarray:
    """The cell edges along one axis of ``[lo, hi]`` for a wavenumber profile ``k`` (on equal
    cells across the axis: the largest local wavenumber over the other axes) with
    ``per_wavelength`` subdomains per local wavelength: from lo, each cell as wide as it may be
    while its width times the largest k under its subdomain (the cell and ``overlap / 2`` of its
    width either side) stays within ``2π / per_wavelength``, and at most twice the previous
    cell; the last cell ends at hi (shared equally with the one before where it would be under
    half of it). On a constant k: ``ceil(per_wavelength × wavelengths)`` equal cells, the rule
    of equal subdomains."""
    k = np.asarray(k, np.float64)
    limit = 2 * math.pi / per_wavelength
    if float(np.max(k)) == float(np.min(k)):
        n = max(1, math.ceil(per_wavelength * (hi - lo) * float(k[0]) / (2 * math.pi) - 1e-9))
        return np.linspace(lo, hi, n + 1)
    cell = (hi - lo) / len(k)

    def k_under(a: float, b: float) -> float:
        i0 = min(max(int(math.floor((a - lo) / cell)), 0), len(k) - 1)
        i1 = min(int(math.ceil((b - lo) / cell)), len(k))
        return float(np.max(k[i0:max(i1, i0 + 1)]))

    def fits(x: float, w: float) -> bool:
        return w * k_under(x - overlap * w / 2, x + w + overlap * w / 2) <= limit

    edges = [lo]
    while edges[-1] < hi - 1e-12 * (hi - lo):
        x = edges[-1]
        top = min(hi - x, 2 * (x - edges[-2])) if len(edges) > 1 else hi - x
        if fits(x, top):
            w = top
        else:
            a, b = 0.0, top
            for _ in range(40):
                m = 0.5 * (a + b)
                a, b = (m, b) if fits(x, m) else (a, m)
            w = max(a, 1e-9 * (hi - lo))
        edges.append(min(x + w, hi))
    edges[-1] = hi
    if len(edges) > 2 and edges[-1] - edges[-2] < 0.5 * (edges[-2] - edges[-3]):
        middle = 0.5 * (edges[-1] + edges[-3])
        if fits(middle, hi - middle):
            edges[-2] = middle
    return np.array(edges)
