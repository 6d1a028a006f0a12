"""The CPU benchmark's report: the results and scaling tables in Markdown, the speed-ups against
the peers and the targets of issue 4.
"""
from __future__ import annotations

import numpy as np

JAX_IMPLS = ("jax-hessian", "jax-jvp2", "jax-fwdlap")
TORCH_IMPLS = ("torch-eager", "torch-fwdlap-eager", "torch-compile")
PEER_LABEL = {
    "helmpinn": "helmpinn",
    "torch-eager": "PyTorch eager, nested autograd",
    "torch-fwdlap-eager": "PyTorch eager, forward Laplacian (info)",
    "torch-compile": "PyTorch torch.compile, forward Laplacian",
    "jax-hessian": "JAX jit, vmap(hessian)",
    "jax-jvp2": "JAX jit, jvp of jvp",
    "jax-fwdlap": "JAX jit, forward Laplacian",
}


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.linalg.norm(b.ravel())
    return float(np.linalg.norm((a - b).ravel()) / (den if den > 0 else 1.0))


def fmt_ms(r: dict | None) -> str:
    if not r or "median_ms" not in r:
        return "–"
    return f"{r['median_ms']:.1f} ({r['min_ms']:.1f})"


def fmt_x(num: dict | None, den: dict | None) -> str:
    if not num or not den or "median_ms" not in num or "median_ms" not in den:
        return "–"
    return f"{num['median_ms'] / den['median_ms']:.1f}×"


def report(args, results: dict, sgemm_rate: float, impls: list[str], info: dict) -> dict:
    summary = {}
    print(f"\n## Results: float32, {args.threads} threads, median (min) ms per step of "
          f"{args.steps} timed steps after warm-up\n")
    print(f"Machine: {info.get('cpu')} ({info.get('isa')}), {info.get('affinity_cpus')} CPUs; "
          f"{info['date_utc']}; SGEMM {sgemm_rate:.0f} GFLOP/s\n")
    print("| config | GFLOP/step | helmpinn ms | helmpinn GFLOP/s | % of SGEMM | "
          "torch eager ms | speed-up | torch.compile ms | speed-up | best JAX ms | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for cname, res in results.items():
        fl = res["_flops"]
        hp = res.get("helmpinn")
        jax = {i: res[i] for i in JAX_IMPLS if i in res and "median_ms" in res[i]}
        best_jax = min(jax, key=lambda i: jax[i]["median_ms"]) if jax else None
        s = {"gflop": fl / 1e9}
        if hp and "median_ms" in hp:
            s["gflops"] = fl / hp["median_ms"] / 1e6
            s["frac_sgemm"] = s["gflops"] / sgemm_rate
            gf, pct = f"{s['gflops']:.1f}", f"{100 * s['frac_sgemm']:.0f}%"
        else:
            gf = pct = "–"
        for i in ("torch-eager", "torch-compile"):
            if hp and i in res and "median_ms" in res.get(i, {}) and "median_ms" in hp:
                s[f"speedup_{i}"] = res[i]["median_ms"] / hp["median_ms"]
        if best_jax and hp and "median_ms" in hp:
            s["speedup_jax"] = jax[best_jax]["median_ms"] / hp["median_ms"]
            s["best_jax"] = best_jax
        jtxt = (f"{fmt_ms(jax[best_jax])} {best_jax[4:]}" if best_jax else "–")
        print(f"| {cname} | {fl / 1e9:.2f} | {fmt_ms(hp)} | {gf} | {pct} | "
              f"{fmt_ms(res.get('torch-eager'))} | {fmt_x(res.get('torch-eager'), hp)} | "
              f"{fmt_ms(res.get('torch-compile'))} | {fmt_x(res.get('torch-compile'), hp)} | "
              f"{jtxt} | {fmt_x(jax.get(best_jax) if best_jax else None, hp)} |")
        summary[cname] = s

    print("\nEvery implementation, median (min) ms per step [CPU utilisation: CPU time / wall "
          "time], first call (compilation etc., untimed), other processes' CPU load while timed "
          "when >= 5%:\n")
    cols = list(results)
    print("| implementation | " + " | ".join(f"config {c}" for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for impl in impls:
        cells = []
        for c in cols:
            r = results[c].get(impl)
            if not r:
                cells.append("–")
            elif "error" in r:
                cells.append("error")
            else:
                cells.append(f"{fmt_ms(r)} [{r['cpu_util']:.1f}] first call {r['first_call_s']:.1f} s"
                             + (f", other load {100 * r.get('other_load', 0):.0f}%"
                                if r.get("other_load", 0) >= 0.05 else "")
                             + (f", {r['rejected_turns']} noisy turns redone"
                                if r.get("rejected_turns") else ""))
        print(f"| {PEER_LABEL.get(impl, impl)} | " + " | ".join(cells) + " |")
    errs = [(c, i, results[c][i]["error"]) for c in cols for i in impls
            if isinstance(results[c].get(i), dict) and "error" in results[c][i]]
    for c, i, e in errs:
        print(f"\n  error in {i} on config {c}: {e}")

    # the targets
    if any("speedup_torch-eager" in s for s in summary.values()):
        print("\nTargets (issue 4): >= 10x PyTorch eager, >= 2x best of JAX and torch.compile, "
              ">= 60% of SGEMM on config b\n")
        for c, s in summary.items():
            chk = []
            if "speedup_torch-eager" in s:
                chk.append(f"vs eager {s['speedup_torch-eager']:.1f}x "
                           f"{'ok' if s['speedup_torch-eager'] >= 10 else 'MISSED'}")
            best_opt = min([s[k] for k in ("speedup_torch-compile", "speedup_jax") if k in s],
                           default=None)
            if best_opt is not None:
                chk.append(f"vs best of JAX/compile {best_opt:.1f}x "
                           f"{'ok' if best_opt >= 2 else 'MISSED'}")
            if c == "b" and "frac_sgemm" in s:
                chk.append(f"SGEMM fraction {100 * s['frac_sgemm']:.0f}% "
                           f"{'ok' if s['frac_sgemm'] >= 0.6 else 'MISSED'}")
            print(f"- config {c}: " + "; ".join(chk))
    return summary


def scaling_report(args, out: dict, sgemm_rate: float) -> None:
    """The tables of do_scaling's runs (points, width, threads, batch size)."""
    def table(title, rows, key_cols):
        print(f"\n### {title}\n")
        print("| " + " | ".join(h for h, _ in key_cols) + " | ms/step (min) | µs/PDE pt | "
              "GFLOP/s | % SGEMM | workspace MiB | batch | steps | other load |")
        print("|" + "---|" * (len(key_cols) + 8))
        for r in rows:
            gfs = r["flops"] / r["median_ms"] / 1e6
            print("| " + " | ".join(str(f(r)) for _, f in key_cols) +
                  f" | {r['median_ms']:.2f} ({r['min_ms']:.2f}) | "
                  f"{1e3 * r['median_ms'] / r['n_pde']:.2f} | {gfs:.1f} | "
                  f"{100 * gfs / sgemm_rate:.0f}% | {r['memory_bytes'] / 2**20:.1f} | "
                  f"{r['batch_size']} | {r['steps']} | {100 * r.get('other_load', 0):.0f}%"
                  + (f" ({r['rejected_batches']} redone)" if r.get("rejected_batches") else "")
                  + " |")

    print("\n## helmpinn scaling (float32)")
    net = lambda r: f"{r['label']} (d={r['d']},m={r['m']},H={r['H']},L={r['L']})"  # noqa: E731
    table(f"Points (data points = PDE/8), {args.threads} threads", out["points"],
          [("net", net), ("PDE points", lambda r: f"{r['n_pde']:,}")])
    table(f"Hidden width (d=2, m=32, L=4, 8192 + 1024 points), {args.threads} threads",
          out["width"], [("H", lambda r: r["H"])])
    rows_t = out["threads"]
    table("Threads", rows_t, [("config", lambda r: r["label"]), ("threads", lambda r: r["threads"])])
    by = {}
    for r in rows_t:
        by.setdefault(r["label"], {})[r["threads"]] = r["median_ms"]
    for lab, d in by.items():
        if 1 in d and 2 in d:
            print(f"- config {lab}: 2-thread speed-up {d[1] / d[2]:.2f}x "
                  f"(parallel efficiency {50 * d[1] / d[2]:.0f}%)")
    table(f"Workspace batch size (config b), {args.threads} threads", out["batch_size"],
          [("batch_size", lambda r: r["batch_size"])])
