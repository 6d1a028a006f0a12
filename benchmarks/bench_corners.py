#!/usr/bin/env python
"""``hp.solve`` with its defaults on obstacles with and without corners, the error against time:
what the PDE rows' weights about re-entrant corners (:func:`helmpinn.problems.sampler.corner_weights`)
change, beside a disc of the same size.

    PYTHONPATH=python python benchmarks/bench_corners.py --case square --time-limit 150 [--no-corner-weights]

Cases: ``square``, a plane wave on the sound-soft square of ``scatter-square-soft`` at
``--wavelengths`` (default 4; reference ``fd_solve`` at ``--ref-points`` nodes a wavelength,
default 32); ``disc``, the same box, PML and plane wave on a sound-soft disc of the square's side
as diameter (the Hankel series); ``triangle``, a point source beside a sound-soft triangle, f = 1,
in [−1, 1]² with a PML of 0.5 (one network: 3 wavelengths across; reference ``fd_solve`` at
h = 0.005, which is within 1.4e-3 of h = 0.01); ``triangle-free``, the same box without the
triangle; ``triangle-hard``, a user's problem: a point source at (−0.55, 0.4) by a sound-hard
triangle, f = 3 in [−1, 1]² with a PML of 0.4 (decomposed; reference ``fd_solve`` at h = 1/120 on
the problem's test points). ``--no-corner-weights`` draws the points without the corners' weights
(as before them). ``--pose`` (``triangle-hard`` only) poses the same field otherwise:
``trace``, as a Dirichlet problem with the reference's values on the triangle; ``pin``, the
Neumann problem with the reference's values added as data points on the edges within
``--pin-wavelengths`` of each vertex (0: the three vertices alone): what the network lacks by a
sound-hard vertex (docs/benchmarks.md). ``--no-singular``: a decomposed run without the corners'
singular functions (``gn={"singular": False}``: the corner weights and rows instead). The error is the relative L2 error on the problem's test points (``--case triangle``:
4000 random points of the domain), after each step, with the load beside it. Run on a quiet
machine; the times grow with the load.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

import helmpinn as hp
from helmpinn.problems.geometry import Box, BoxMinusBall, BoxMinusObstacle, Disk, Polygon
from helmpinn.problems.obstacles import scatter_square_soft
from helmpinn.problems.scattering import cylinder_scattered_field
from helmpinn.reference import fd_solve


def hard_triangle(pose: str, pin_wavelengths: float):
    """The sound-hard triangle's problem posed as ``pose`` says (module docstring), its test
    points and the reference there."""
    vertices = np.array([[-0.3, -0.2], [0.3, -0.25], [0.0, 0.35]])
    domain = BoxMinusObstacle(Box([-1, -1], [1, 1]), Polygon(vertices))
    common = dict(frequency=3.0, velocity=1.0, source=hp.PointSource([-0.55, 0.4]), pml=hp.PML(0.4))
    p = hp.Problem(domain, bcs={"scatterer": hp.Neumann()}, **common)
    reference = fd_solve(p, 1 / 120)
    x = p.test_points()
    if pose == "trace":
        p = hp.Problem(domain, bcs={"scatterer": hp.Dirichlet(lambda y: reference(np.asarray(y, float)))}, **common)
    elif pose == "pin":
        reach = pin_wavelengths / 3.0   # the wavelength is 1/3
        pts = [vertices]
        for i in range(3) if reach > 0 else ():
            for j in ((i - 1) % 3, (i + 1) % 3):
                edge = vertices[j] - vertices[i]
                pts.append(vertices[i] + np.outer(np.linspace(0, reach, 41)[1:] / np.linalg.norm(edge), edge))
        pts = np.concatenate(pts)
        p = hp.Problem(domain, bcs={"scatterer": hp.Neumann()}, data=(pts, reference(pts)), **common)
    return p, x, reference(x)


def problem_and_points(case: str, wavelengths: float, ref_points: int, pose: str = "neumann",
                       pin_wavelengths: float = 0.25):
    if case == "square":
        p = scatter_square_soft(wavelengths, ref_points=ref_points)
        x = p.test_points()
        return p, x, p.exact(x)
    if case == "disc":
        k, radius = math.pi * wavelengths, 0.25
        incident = lambda x: np.exp(1j * k * np.asarray(x)[:, 0])   # noqa: E731
        p = hp.Problem(BoxMinusBall(Box([-1, -1], [1, 1]), Disk((0, 0), radius)), kappa=k * k, source=None,
                       bcs={"scatterer": hp.Dirichlet(lambda x: -incident(x))}, wavenumber=k,
                       exact=lambda x: cylinder_scattered_field(x, k, radius, 0.0, False), pml=hp.PML(2 / wavelengths))
        x = p.test_points()
        return p, x, p.exact(x)
    box = Box([-1, -1], [1, 1])
    if case == "triangle-hard":
        return hard_triangle(pose, pin_wavelengths)
    triangle = Polygon([(0.1, -0.3), (0.5, 0.0), (0.1, 0.3)])
    domain = box if case == "triangle-free" else BoxMinusObstacle(box, triangle)
    p = hp.Problem(domain, frequency=1.0, velocity=1.0, source=hp.PointSource((-0.5, 0.0)),
                   bcs={} if case == "triangle-free" else {"scatterer": hp.Dirichlet(0.0)}, pml=hp.PML(0.5))
    x = domain.sample_interior(4000, np.random.default_rng(1))
    return p, x, fd_solve(p, 0.005)(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=("square", "disc", "triangle", "triangle-free", "triangle-hard"), default="square")
    ap.add_argument("--pose", choices=("neumann", "trace", "pin"), default="neumann")
    ap.add_argument("--pin-wavelengths", type=float, default=0.25)
    ap.add_argument("--wavelengths", type=float, default=4.0)
    ap.add_argument("--ref-points", type=int, default=32)
    ap.add_argument("--time-limit", type=float, default=150.0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-corner-weights", action="store_true")
    ap.add_argument("--no-singular", action="store_true")
    a = ap.parse_args()
    if a.threads:
        hp.set_num_threads(a.threads)
    t = time.perf_counter()
    if a.pose != "neumann" and a.case != "triangle-hard":
        ap.error("--pose: only with --case triangle-hard")
    problem, x, exact = problem_and_points(a.case, a.wavelengths, a.ref_points, a.pose, a.pin_wavelengths)
    print(f"reference: {time.perf_counter() - t:.1f} s; corners' radius {problem.sampler.corner_radius}", flush=True)
    if a.no_corner_weights:
        problem.sampler.corner_radius = None
    start = time.perf_counter()

    def record(trainer, step):
        err = np.linalg.norm(trainer.model.predict(x) - exact) / np.linalg.norm(exact)
        print(f"step {step:3d} {time.perf_counter() - start:7.1f} s loss {trainer.history.loss[-1]:.3e} "
              f"error {err:.3e} load {os.getloadavg()[0]:.1f}", flush=True)

    extra = {"gn": {"singular": False}} if a.no_singular else {}
    sol = hp.solve(problem, time_limit=a.time_limit, callbacks=[record], progress=False, **extra)
    print(sol)


if __name__ == "__main__":
    main()
