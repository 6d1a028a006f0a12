"""Parsing and the summary of benchmarks/gpu_check.sh.

    python benchmarks/gpu_summary.py pytest LOG          # counts, first failure, a hung test
    python benchmarks/gpu_summary.py sanitizer LOG RC    # clean / findings / refused / ...
    python benchmarks/gpu_summary.py ptxas LOG           # registers and spills per kernel
    python benchmarks/gpu_summary.py summary --work W --out O [--dry-run]

`summary` reads W/stages.tsv (one line per stage: name, status, exit code, seconds, note) and
W/results.jsonl (the records of gpu_cases.py and of the parsers above) and writes O/summary.md
and O/results.json. It states only what the records hold: a stage that did not run, or a number
that was not measured, is said to be so, and a dry run says on its first line that nothing
was measured.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys

TARGET_SPEEDUP = 5.0        # b65k: >= 5x the best of JAX and torch.compile (issue 17)
TARGET_PEAK = 0.5           # b65k: >= 50% of the FP32 peak
AGREE_TOL = 1e-12
STAGES = ["env", "build", "tests", "agreement", "sanitize", "bench", "scale", "peers"]


# ---------------------------------------------------------------------------------- parsers

def parse_pytest(text: str) -> dict:
    """pytest -v -rs output: counts, the first failed test, a test that started and never
    finished (killed by a timeout), and the skip reasons."""
    res = dict(kind="tests", passed=0, failed=0, skipped=0, errors=0, first_failed=None,
               hung=None, skip_reasons=[], failed_tests=[])
    last_started = None
    for line in text.splitlines():
        m = re.match(r"^(\S+::\S+)\s+(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", line)
        if m:
            node, st = m.groups()
            last_started = None
            key = {"PASSED": "passed", "FAILED": "failed", "SKIPPED": "skipped",
                   "ERROR": "errors"}.get(st)
            if key:
                res[key] += 1
            if st in ("FAILED", "ERROR"):
                res["failed_tests"].append(node)
                if res["first_failed"] is None:
                    res["first_failed"] = node
            continue
        m = re.match(r"^(\S+::\S+)\s*$", line)
        if m:
            last_started = m.group(1)
        m = re.match(r"^(\S+::\S+)\s+\+{3,}.*Timeout", line)
        if m:
            res["hung"] = m.group(1)
        m = re.match(r"^SKIPPED \[\d+\] (.*)$", line)
        if m:
            res["skip_reasons"].append(m.group(1)[:200])
        if "Timeout" in line and "+++" in line and last_started:
            res["hung"] = last_started
    if last_started and res["hung"] is None and "::" in last_started:
        res["hung"] = last_started
    if res["first_failed"] is None and res["hung"]:
        res["first_failed"] = res["hung"]
    res["failed_tests"] = res["failed_tests"][:20]
    res["skip_reasons"] = sorted(set(res["skip_reasons"]))[:10]
    return res


REFUSAL = re.compile(r"Device not supported|NO DEVICE:|unable to (?:launch|find|initialize)|"
                     r"Target application terminated before first instrumented API call|"
                     r"error 999|cudaErrorUnknown|not supported on this (?:platform|device)",
                     re.IGNORECASE)


def parse_sanitizer(text: str, rc: int) -> dict:
    """One compute-sanitizer run over gpu_cases.py sanitize-case: 'findings' (errors reported,
    the only verdict about helmpinn), 'clean' (the case ran to its end, 0 errors), 'refused'
    (the tool or the device would not run: nothing checked), 'timed out' or 'incomplete'."""
    errors = None
    for m in re.finditer(r"ERROR SUMMARY: (\d+) errors?", text):
        errors = int(m.group(1))
    m = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)",
                  text)
    warnings = None
    if m:
        errors = int(m.group(2))
        warnings = int(m.group(3))
    done = "CASE DONE" in text
    ref = REFUSAL.search(text)
    if errors:
        verdict = "findings"
    elif ref and not done:
        verdict = "refused"
    elif done and errors == 0 and rc == 0:
        verdict = "clean"
    elif rc in (124, 137):
        verdict = "timed out"
    else:
        verdict = "incomplete"
    first = next((ln.strip("= ").strip() for ln in text.splitlines()
                  if re.search(r"Invalid|Race|Uninitialized|hazard|Barrier|error", ln, re.I)
                  and "SUMMARY" not in ln and "COMPUTE-SANITIZER" not in ln), None)
    out = dict(kind="sanitizer", verdict=verdict, errors=errors, warnings=warnings, rc=rc,
               case_done=done)
    if verdict == "refused":
        out["reason"] = ref.group(0) if ref else None
        line = next((ln for ln in text.splitlines() if REFUSAL.search(ln)), "")
        out["reason_line"] = line.strip()[:200]
    elif verdict != "clean" and first:
        out["first"] = first[:200]
    return out


def short_kernel(mangled: str) -> str:
    m = re.search(r"\d+([a-z_]+_kernel)I([fd])(?:Li(\d)ELb([01])E)?", mangled)
    if m:
        name, t, d, gs = m.groups()
        t = "float" if t == "f" else "double"
        if d:
            return f"{name}<{t},d={d},{'global' if gs == '1' else 'shared'}>"
        return f"{name}<{t}>"
    m = re.search(r"(\d+)(\w*kernel\w*)", mangled)
    return m.group(2) if m else mangled[:60]


def parse_ptxas(text: str) -> dict:
    kernels: dict = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line)
        if m:
            cur = f"{short_kernel(m.group(1))} [{m.group(2)}]"
            kernels.setdefault(cur, {})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            kernels[cur].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            kernels[cur]["registers"] = int(m.group(1))
            m2 = re.search(r"(\d+) bytes smem", line)
            if m2:
                kernels[cur]["static_smem"] = int(m2.group(1))
    fused = {k: v for k, v in kernels.items() if k.startswith(("train_kernel", "forward_kernel", "rows_kernel"))}
    regs = [v.get("registers", 0) for v in fused.values()]
    return dict(kind="ptxas", kernels=kernels, fused_count=len(fused),
                fused_registers=[min(regs), max(regs)] if regs else None,
                fused_spill_bytes=sum(v.get("spill_stores", 0) + v.get("spill_loads", 0)
                                      for v in fused.values()),
                fused_max_stack=max((v.get("stack", 0) for v in fused.values()), default=None),
                fused_static_smem=max((v.get("static_smem", 0) for v in fused.values()),
                                      default=None))


# ---------------------------------------------------------------------------------- summary

def read_stages(work: str) -> list[dict]:
    out = []
    path = os.path.join(work, "stages.tsv")
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4:
                out.append(dict(stage=parts[0], status=parts[1], rc=parts[2], seconds=parts[3],
                                note=parts[4] if len(parts) > 4 else ""))
    return out


def read_records(work: str) -> list[dict]:
    recs = []
    path = os.path.join(work, "results.jsonl")
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return recs


def fmt(x, spec=".2e"):
    return "-" if x is None else format(x, spec)


def summarize(work: str, out: str, dry: bool, deadline: float | None) -> str:
    stages = read_stages(work)
    recs = read_records(work)
    by = lambda kind: [r for r in recs if r.get("kind") == kind]  # noqa: E731
    st = {s["stage"]: s for s in stages}
    env = (by("env") or [{}])[-1]
    stub_note = " (stub)" if dry else ""
    L = []
    if dry:
        L.append("**DRY RUN: every GPU step was stubbed. No number in this file was measured; "
                 "it only shows that the script, its stages and this summary work.**\n")
    L.append(f"# helmpinn GPU check, {datetime.date.today()}")
    L.append("")
    gpu = env.get("gpu", "unknown")
    hp = env.get("helmpinn", {})
    meta = {}
    mp = os.path.join(work, "meta.json")
    if os.path.exists(mp):
        meta = json.load(open(mp))
    L.append(f"GPU: {gpu}; nvcc: {meta.get('nvcc', '?')}; commit {meta.get('commit', '?')}; "
             f"python {env.get('python', '?')}; deadline {deadline:.0f} s, used "
             f"{meta.get('elapsed', '?')} s" if deadline else f"GPU: {gpu}")
    missing = [k for k, v in env.get("packages", {}).items() if v is None]
    if missing:
        L.append(f"Missing Python packages: {', '.join(missing)} "
                 "(carry them as wheels in .whl/, see the device README).")
    if meta.get("missing_tools"):
        L.append(f"Missing tools: {meta['missing_tools']}.")
    L.append("")

    def stage_word(name):
        s = st.get(name)
        if s is None:
            return "did not run"
        return s["status"] + (f" ({s['note']})" if s["note"] else "")

    # --- at a glance
    rows = []
    b = st.get("build")
    px = (by("ptxas") or [None])[-1]
    built = stage_word("build")
    if px and px.get("fused_registers"):
        built += (f"; fused kernels {px['fused_registers'][0]}-{px['fused_registers'][1]} registers, "
                  f"{px['fused_spill_bytes']} spill bytes, static smem {px['fused_static_smem']} B"
                  + stub_note)
    rows.append(("built", built + (f", {b['seconds']} s" if b else "")))
    t = (by("tests") or [None])[-1]
    if t:
        tw = (f"{t['passed']} passed, {t['failed']} failed, {t['errors']} errors, "
              f"{t['skipped']} skipped" + stub_note)
        if t.get("first_failed"):
            tw += f"; first failure: `{t['first_failed']}`"
        if t.get("hung"):
            tw += f"; timed out in `{t['hung']}`"
        rr = (by("rerun") or [None])[-1]
        if rr:
            tw += f"; rerun with CUDA_LAUNCH_BLOCKING=1: exit {rr['rc']}"
        if t.get("skip_reasons"):
            tw += "; skips: " + "; ".join(t["skip_reasons"][:3])
    else:
        tw = stage_word("tests")
    rows.append(("tests (HELMPINN_REQUIRE_GPU=1)", tw))
    san = by("sanitizer")
    if san:
        parts = []
        for r in san:
            w = f"{r['tool']}: {r['verdict']}"
            if r["verdict"] == "findings":
                w += f" ({r['errors']} errors: {r.get('first', '')})"
            elif r["verdict"] == "refused":
                w += f" (nothing checked: {r.get('reason_line') or r.get('reason')})"
            elif r["verdict"] != "clean":
                w += f" (exit {r['rc']})"
            parts.append(w + stub_note)
        rows.append(("sanitizers", "; ".join(parts)))
    else:
        rows.append(("sanitizers", stage_word("sanitize")))
    ag = [r for r in by("agreement") if r.get("dtype") == "float64"]
    if ag:
        a = ag[-1]
        worst = max(max(v.values()) for v in a["cases"].values())
        ok = worst < AGREE_TOL
        rows.append((f"agreement (float64 GPU vs CPU, rel. < {AGREE_TOL:g})",
                     f"{'PASS' if ok else 'FAIL'}: worst {worst:.1e} over configs "
                     f"{', '.join(a['cases'])} (loss, gradient, u, grad u, lap u)" + stub_note))
    else:
        rows.append(("agreement", stage_word("agreement")))
    sc = by("scale")
    if sc:
        rows.append(("scale", "; ".join(
            f"{r['case']} {r['dtype']}: {'PASS' if r.get('ok') else 'FAIL'} "
            f"(worst {max(r['errors'].values()):.1e} < {r['tol']:g}"
            + (f", {r['elements'] / 2**31:.2f} x 2^31 elements" if 'elements' in r else "")
            + ")" + stub_note for r in sc)))
    else:
        rows.append(("scale", stage_word("scale")))
    peak = (by("peak") or [{}])[-1]
    bench = [r for r in by("bench")]
    hb = {r["config"]: r for r in bench if r["impl"] == "helmpinn"}
    peers = {}
    for r in bench:
        if r["impl"] != "helmpinn":
            peers.setdefault(r["impl"], {})[r["config"]] = r
    h = hb.get("b65k")
    why = ("helmpinn: " + h["error"][:120]) if h and "error" in h else stage_word("bench")
    target = ("speed, b at 65,536 points", "not measured (" + why + ")")
    if h and "median_ms" in h:
        tf = h["gflop"] / h["median_ms"]
        pk = peak.get("peak_tflops")
        best = [p["b65k"]["median_ms"] for k, p in peers.items()
                if k in ("jax-fwdlap", "torch-compile") and "b65k" in p and "median_ms" in p["b65k"]]
        w = f"{h['median_ms']:.3f} ms, {tf:.1f} TFLOP/s"
        w += f", {100 * tf / pk:.0f}% of FP32 peak" if pk else ", FP32 peak not known"
        w += (f", {min(best) / h['median_ms']:.1f}x the best of JAX/torch.compile" if best
              else ", no JAX/torch.compile time")
        target = ("speed, b at 65,536 points", w + stub_note)
    rows.append(target)
    L.append("| | result |")
    L.append("|---|---|")
    for k, v in rows:
        L.append(f"| {k} | {v} |")
    L.append("")

    # --- targets
    L.append("## Targets (issue 17)")
    agree_ok = (None if not ag else max(max(v.values()) for v in ag[-1]["cases"].values()) < AGREE_TOL)
    san_verdicts = {r["tool"]: r["verdict"] for r in san}
    san_ok = (None if len(san_verdicts) < 4 or any(v in ("refused", "timed out", "incomplete")
                                                   for v in san_verdicts.values())
              else all(v == "clean" for v in san_verdicts.values()))
    sp_ok = pk_ok = None
    if h and "median_ms" in h:
        best = [p["b65k"]["median_ms"] for k, p in peers.items()
                if k in ("jax-fwdlap", "torch-compile") and "b65k" in p and "median_ms" in p["b65k"]]
        if best:
            sp_ok = min(best) / h["median_ms"] >= TARGET_SPEEDUP
        if peak.get("peak_tflops"):
            pk_ok = h["gflop"] / h["median_ms"] / peak["peak_tflops"] >= TARGET_PEAK
    word = lambda v: "not measured" if v is None else ("met" if v else "NOT met")  # noqa: E731
    L.append(f"- GPU equal to CPU to rounding (float64, {AGREE_TOL:g} relative): {word(agree_ok)}"
             + stub_note)
    L.append(f"- sanitizers clean (all four ran): {word(san_ok)}" + stub_note)
    L.append(f"- b65k at least {TARGET_SPEEDUP:g}x the best of JAX and torch.compile: {word(sp_ok)}"
             + stub_note)
    L.append(f"- b65k at least {100 * TARGET_PEAK:.0f}% of the FP32 peak: {word(pk_ok)}" + stub_note)
    L.append("")

    # --- speed table
    L.append("## Speed (float32, median ms per training step: loss + gradient of every parameter)")
    if peak.get("error"):
        L.append(f"FP32 peak not measured: {peak['error']}")
    elif peak:
        pkw = (f"{peak['peak_tflops']:.1f} TFLOP/s ({peak.get('sms')} SMs x {peak.get('lanes')} "
               f"lanes x 2 x {peak.get('max_sm_mhz')} MHz)" if peak.get("peak_tflops")
               else "not known (no max SM clock)")
        L.append(f"FP32 peak {pkw}; measured SGEMM (no TF32) "
                 f"{fmt(peak.get('sgemm_tflops'), '.1f')} TFLOP/s" + stub_note)
    pnames = [p for p in ("torch-eager", "jax-fwdlap", "torch-compile") if p in peers] + \
        sorted(p for p in peers if p not in ("torch-eager", "jax-fwdlap", "torch-compile"))
    L.append("")
    L.append("| config | PDE points | GFLOP | helmpinn ms | TFLOP/s | % FP32 peak | % SGEMM | "
             + " | ".join(f"{p} ms" for p in pnames) + " | vs best of JAX/torch.compile |")
    L.append("|---" * (8 + len(pnames)) + "|")
    for c in ["a", "b", "c", "b65k", "b1m"]:
        h = hb.get(c)
        if h is None:
            continue
        if "median_ms" not in h:
            L.append(f"| {c} | {h['n_pde']} | {h['gflop']:.2f} | error: {h.get('error', '?')} |")
            continue
        tf = h["gflop"] / h["median_ms"]
        cells, best = [], None
        for p in pnames:
            r = peers[p].get(c)
            if r is None:
                cells.append("not run")
            elif "median_ms" not in r:
                cells.append("error: " + r.get("error", "?")[:60])
            else:
                cells.append(f"{r['median_ms']:.3f}")
                if p in ("jax-fwdlap", "torch-compile"):
                    best = r["median_ms"] if best is None else min(best, r["median_ms"])
        pk = peak.get("peak_tflops")
        sg = peak.get("sgemm_tflops")
        pct_pk = "%.0f%%" % (100 * tf / pk) if pk else "-"
        pct_sg = "%.0f%%" % (100 * tf / sg) if sg else "-"
        vs = "%.1fx" % (best / h["median_ms"]) if best else "-"
        L.append(f"| {c} | {h['n_pde']} | {h['gflop']:.2f} | {h['median_ms']:.3f} | {tf:.1f} | "
                 f"{pct_pk} | {pct_sg} | " + " | ".join(cells) + f" | {vs} |")
    tiles = by("tile")
    if tiles:
        L.append("")
        L.append(f"Tile sweep ({tiles[0]['config']}, HELMPINN_CUDA_TILE): " + ", ".join(
            f"{r['tile']}: " + (f"{r['median_ms']:.3f} ms" if "median_ms" in r
                                else f"error {r.get('error', '?')[:60]}") for r in tiles) + stub_note)
        auto = next((r for r in tiles if r["tile"] == "auto"), None)
        if auto and auto.get("plan"):
            L.append(f"Auto plan: {auto['plan']}")
    L.append("")

    # --- stages
    L.append("## Stages (in order)")
    L.append("| stage | status | exit | seconds | note |")
    L.append("|---|---|---|---|---|")
    for s in stages:
        L.append(f"| {s['stage']} | {s['status']} | {s['rc']} | {s['seconds']} | {s['note']} |")
    L.append("")
    L.append("Files: summary.md (this), results.json (every record), run.log (all output in "
             "order), build.log (cmake + ptxas -v), tests.log (pytest, and the "
             "CUDA_LAUNCH_BLOCKING=1 rerun), sanitize.log (compute-sanitizer).")
    text = "\n".join(L) + "\n"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(dict(dry_run=dry, stages=stages, meta=meta, records=recs), fh, indent=1)
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pytest")
    p.add_argument("log")
    p = sub.add_parser("sanitizer")
    p.add_argument("log")
    p.add_argument("rc", type=int)
    p.add_argument("--tool", default="?")
    p = sub.add_parser("ptxas")
    p.add_argument("log")
    p = sub.add_parser("summary")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--deadline", type=float, default=None)
    a = ap.parse_args()
    read = lambda f: open(f, errors="replace").read() if os.path.exists(f) else ""  # noqa: E731
    if a.cmd == "pytest":
        print(json.dumps(parse_pytest(read(a.log))))
    elif a.cmd == "sanitizer":
        print(json.dumps(dict(parse_sanitizer(read(a.log), a.rc), tool=a.tool)))
    elif a.cmd == "ptxas":
        print(json.dumps(parse_ptxas(read(a.log))))
    else:
        summarize(a.work, a.out, a.dry_run, a.deadline)


if __name__ == "__main__":
    sys.exit(main())
