"""Domain-decomposed networks trained by matrix-free Gauss-Newton on box-source / free-source.

    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_decomposed.py --problem box \
        --wavelengths 5 --grid 5 --time 300

Prints one line per iteration: loss, λ, CG iterations, seconds, the error on the physical
domain against the exact solution (box-source: raw and with the resonant modes removed).

Over MPI (the subdomains split over the ranks, helmpinn.models.decomposition.DecomposedResiduals):

    OMP_NUM_THREADS=1 mpiexec -n 2 python benchmarks/bench_decomposed.py --grid 4x8 \
        --points-per-subdomain 640 --iterations 3 --cg-tol 1e-14 --cg-maxiter 20 --no-error

(``--ranks 2`` starts that mpiexec itself.) Rank 0 prints; the summary line gives the seconds per
step and per CG iteration, the CG iterations and every rank's peak memory (resident set).
A weak-scaling measurement keeps ``--grid`` per rank and ``--points-per-subdomain`` fixed;
``--cg-tol 1e-14 --cg-maxiter K`` makes every step take K CG iterations, so that steps compare.
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np

import helmpinn as hp
from helmpinn import distributed, waves
from helmpinn.models.decomposition import BoxConstraint, DecomposedModel, Rows
from helmpinn.optim.gauss_newton import MatrixFreeGN


def build(a):
    rng = np.random.default_rng(a.seed)
    W = a.wavelengths
    if a.problem == "box":
        prob = hp.get_problem("box-source", wavelengths=W)
        k = prob.wavenumber
        lo, hi = np.zeros(2), np.ones(2)
        x = hp.geometry.sample_unit_cube(a.points, 2, rng, "sobol")
        rows = Rows(x, 1.0, 0.0, k * k, prob.source_at(x), "pde")
        rows = Rows(rows.x, rows.a / math.sqrt(len(x)), 0.0, rows.c / math.sqrt(len(x)),
                    rows.f / math.sqrt(len(x)), "pde")
        constraint = BoxConstraint(lo, hi, 1.0 / k)
        xt = rng.uniform(0, 1, (a.eval_points, 2))
    else:
        prob = hp.get_problem("free-source", wavelengths=W, s=a.s)
        k = prob.wavenumber
        lo, hi = prob.sampling_domain.bounds
        ns = int(a.source_share * a.points)
        xu = lo + hp.geometry.sample_unit_cube(a.points - ns, 2, rng, "sobol") * (hi - lo)
        xs = np.clip(rng.normal(0.0, 3 * a.s, (ns, 2)), lo, hi)
        x = np.vstack([xu, xs])
        am, bm = prob.operator_at(x)
        sc = 1 / math.sqrt(len(x))
        pde = Rows(x, sc * am, sc * bm, sc * k * k, sc * prob.source_at(x), "pde")
        ts = prob.sample(0, a.wall_points, rng)
        sw = math.sqrt(a.wall_weight / len(ts.x_data))
        wall = Rows(ts.x_data, 0.0, 0.0, sw, 0.0, "data")
        rows = Rows.concat([pde, wall])
        constraint = None
        xt = rng.uniform(-1, 1, (a.eval_points, 2))
    grids = [a.grid] + ([(1, 1)] if a.coarse_net else [])
    model = DecomposedModel.create(lo, hi, grids, overlap=a.overlap, ff_dim=a.ff, hidden_dim=a.hidden,
                                   num_hidden_layers=a.layers, wavenumber=k, constraint=constraint,
                                   seed=a.seed)
    return prob, model, rows, xt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", choices=["box", "free"], default="box")
    ap.add_argument("--wavelengths", type=float, default=5.0)
    ap.add_argument("--s", type=float, default=0.05)
    ap.add_argument("--grid", type=_grid, default=(5, 5), help="subdomains per axis: N or NxM")
    ap.add_argument("--points-per-subdomain", type=int, default=0,
                    help="PDE points = this times the subdomains (overrides --points)")
    ap.add_argument("--ranks", type=int, default=1, help="start this many MPI ranks (mpiexec)")
    ap.add_argument("--no-error", action="store_true", help="skip the error evaluation")
    ap.add_argument("--coarse-net", action="store_true", help="add a one-network level over the box")
    ap.add_argument("--overlap", type=float, default=0.6)
    ap.add_argument("--ff", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--points", type=int, default=16000)
    ap.add_argument("--wall-points", type=int, default=1200)
    ap.add_argument("--wall-weight", type=float, default=10.0)
    ap.add_argument("--source-share", type=float, default=0.2)
    ap.add_argument("--eval-points", type=int, default=5000)
    ap.add_argument("--time", type=float, default=300.0)
    ap.add_argument("--iterations", type=int, default=10 ** 6)
    ap.add_argument("--cg-tol", type=float, default=1e-3)
    ap.add_argument("--cg-maxiter", type=int, default=200)
    ap.add_argument("--coarse", choices=["last_layer", "none"], default="last_layer")
    ap.add_argument("--products", choices=["core", "core32", "blocks"], default="core32")
    ap.add_argument("--damping", choices=["identity", "marquardt"], default="marquardt")
    ap.add_argument("--geodesic", action="store_true")
    ap.add_argument("--update", choices=["fixed", "nielsen", "ratio"], default="nielsen", help="the damping rule")
    ap.add_argument("--two-level", choices=["additive", "deflated"], default="additive")
    ap.add_argument("--save", help="write the parameters and λ after the run to this .npz")
    ap.add_argument("--start", help="start from the parameters and λ of a --save file")
    ap.add_argument("--compare-two-level", action="store_true",
                    help="only print the CG iterations of one step by each two-level preconditioner")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.ranks > 1 and distributed.launched_size() <= 1:
        here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        cmd = [here if os.access(here, os.X_OK) else "mpiexec", "-n", str(a.ranks), sys.executable,
               *sys.argv]
        sys.exit(subprocess.run(cmd).returncode)
    comm = distributed.launch_comm()
    rank = 0 if comm is None else comm.Get_rank()
    say = print if rank == 0 else (lambda *args, **kw: None)
    if a.points_per_subdomain:
        a.points = a.points_per_subdomain * a.grid[0] * a.grid[1]
    t0 = time.perf_counter()
    prob, model, rows, xt = build(a)
    ut = None if a.no_error else prob.exact_at(xt)
    res = model.residuals_for(rows, comm=comm)
    t_build = time.perf_counter() - t0
    gn = MatrixFreeGN(res, cg_tol=a.cg_tol, cg_maxiter=a.cg_maxiter, products=a.products,
                      coarse=None if a.coarse == "none" else a.coarse, damping=a.damping, geodesic=a.geodesic,
                      two_level=a.two_level, update=a.update)
    if a.start:
        with np.load(a.start) as z:
            model.params[...] = z["params"]
            gn.load_state_dict({"gn_lambda": float(z["lam"])})
    if a.compare_two_level:
        for two_level in ("additive", "deflated"):
            gn.two_level = two_level
            t1 = time.perf_counter()
            _, its = gn.direction(model.params)
            products = its * (2 if two_level == "deflated" else 1) + (1 if two_level == "deflated" else 0)
            say(f"{two_level}: {its} CG iterations, {products} products, lam {gn.lam:.2e} "
                f"({time.perf_counter() - t1:.1f} s)", flush=True)
        return
    say(f"{a.problem}-source, {a.wavelengths:g} wavelengths: {model!r}, {len(rows)} rows' points, "
        f"{sum(len(p['idx']) for p in res.parts)} subnetwork-points, {res.size} rank(s) "
        f"({len(res.local)} subdomains on rank 0); set-up {t_build:.1f} s", flush=True)

    def error():
        if a.no_error:
            return ""
        u = model.predict(xt)
        if a.problem == "box":
            e = waves.box_source_error(u, ut, xt, prob.wavenumber)
            return f"err {e['modes_removed']:.3e} (raw {e['raw']:.3e})"
        return f"err {np.linalg.norm(u - ut) / np.linalg.norm(ut):.3e}"

    start = time.perf_counter()
    seconds, cg = [], []
    for it in range(1, a.iterations + 1):
        t1 = time.perf_counter()
        st = gn.step(model.params)
        dt = time.perf_counter() - t1
        seconds.append(dt)
        cg.append(sum(st.cg_iterations))
        tm = " ".join(f"{k} {v:.1f}" for k, v in st.times.items())
        say(f"it {it:3d} loss {st.loss:.3e} lam {st.lam:.1e} rho {st.rho:.2f} trials {st.trials} cg {st.cg_iterations} "
            f"step {dt:.1f} s ({tm}) total {time.perf_counter() - start:.0f} s  {error() if rank == 0 else ''}"
            + (f"  [{st.message}]" if st.message else ""), flush=True)
        stop = time.perf_counter() - start > a.time or (not st.accepted and st.message)
        if comm is not None:
            stop = comm.bcast(stop, root=0)
        if stop:
            break
    if a.save and rank == 0:
        np.savez(a.save, params=model.params, lam=gn.lam)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # MiB (Linux: KiB)
    peaks = [peak] if comm is None else comm.gather(peak, root=0)
    if rank == 0:
        print(f"summary: {len(model)} subdomains, {res.size} rank(s), {model.num_params} parameters, "
              f"{len(rows)} points; median step {np.median(seconds):.2f} s, {np.sum(seconds) / max(sum(cg), 1):.3f} s "
              f"per CG iteration, CG iterations {cg}; peak RSS per rank {[round(p) for p in peaks]} MiB", flush=True)


def _grid(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    try:
        n = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or NxM, got {text!r}") from None
    if len(n) == 1:
        n = n * 2
    if len(n) != 2 or min(n) < 1:
        raise argparse.ArgumentTypeError(f"expected N or NxM (counts >= 1), got {text!r}")
    return n


if __name__ == "__main__":
    main()
