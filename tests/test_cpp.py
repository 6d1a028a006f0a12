"""The C++ side, driven from pytest, on ONE build tree of helmpinn with its C++ tests (and the
CUDA emulation checker, which tests/test_cuda.py runs): HELMPINN_TEST_BUILD_DIR when set (CI
points it at the wheel's own build, configured with HELMPINN_BUILD_TESTS=ON), else one
configured and built here once a session, with the CUDA backend when nvcc is found. On it: the
ctest suite (allocation counting, finite differences, exceptions; with CUDA, the device runtime
without a device), an install of it, the consumer project (tests/cmake_consume) built against
that install and via add_subdirectory (one CPU kernel set, no CUDA: the consumer's own build of
the core), and the C++ example (examples/cpp/plane1d), which must reach a relative L2 error
below 1e-2.

With the CUDA backend in the build (nvcc needed, no GPU): the package config records it, the
exported helmpinn::core carries no CUDA define or include directory, and a plain C++ consumer
compiles without them, links and runs (0 devices, reported cleanly). Without it those tests
skip, saying why; under HELMPINN_EXPECT_CUDA=1 (CI on a machine with nvcc) they fail instead.

Skipped, with the reason shown, only when cmake or a C++ compiler is missing or the source tree
is not next to this file. Extra configure arguments of the build made here:
HELMPINN_TEST_CMAKE_ARGS (e.g. "-DHELMPINN_ENABLE_CUDA=OFF"); its CUDA architectures:
HELMPINN_TEST_CUDA_ARCHITECTURES (default 80-virtual: PTX only, the quickest build that links).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEADERS = sorted(p.name for p in (REPO / "cpp" / "include" / "helmpinn").glob("*.hpp"))


def _find_cxx() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name.split()[0]):
            return name
    return None


def _why_not() -> str | None:
    """Reason the C++ side cannot be built here, or None."""
    if not (REPO / "CMakeLists.txt").is_file() or not (REPO / "cpp" / "tests").is_dir():
        return f"no helmpinn source tree at {REPO}"
    if shutil.which("cmake") is None:
        return "cmake not found on PATH"
    if _find_cxx() is None:
        return "no C++ compiler found (CXX, c++, g++, clang++)"
    return None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # A passive wait policy keeps OpenMP programs quick on a loaded 2-core CI machine.
    env.setdefault("OMP_WAIT_POLICY", "passive")
    env.setdefault("OMP_NUM_THREADS", "2")
    env.pop("HELMPINN_DEV_INPLACE", None)
    return env


def run(cmd: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    """Runs cmd; on failure fails the test with the command and its whole output."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        pytest.fail(f"command failed (exit {proc.returncode}, {dt:.1f} s): "
                    f"{shlex.join(str(c) for c in cmd)}\n{proc.stdout}", pytrace=False)
    return proc.stdout


def _generator() -> list[str]:
    return ["-G", "Ninja"] if shutil.which("ninja") else []


def _configure_args() -> list[str]:
    args = [*_generator(), "-DCMAKE_BUILD_TYPE=Release"]
    cxx = os.environ.get("CXX")
    if cxx:
        args.append(f"-DCMAKE_CXX_COMPILER={cxx}")
    return args


def _extra_args() -> list[str]:
    return shlex.split(os.environ.get("HELMPINN_TEST_CMAKE_ARGS", ""))


def _nvcc() -> str | None:
    cudacxx = os.environ.get("CUDACXX")
    if cudacxx and shutil.which(cudacxx):
        return shutil.which(cudacxx)
    return shutil.which("nvcc")


def _configure(build: Path) -> None:
    cuda = ["-DHELMPINN_ENABLE_CUDA=OFF"]
    if _nvcc():
        archs = os.environ.get("HELMPINN_TEST_CUDA_ARCHITECTURES", "80-virtual")
        cuda = ["-DHELMPINN_ENABLE_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={_nvcc()}",
                f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]
    run(["cmake", "-S", REPO, "-B", build, *_configure_args(), "-DHELMPINN_BUILD_TESTS=ON",
         "-DHELMPINN_PYTHON=OFF", "-DHELMPINN_INSTALL=ON", *cuda, *_extra_args()])


def cxx_build_tree(base: Path, target: str | None = None, build_it: bool = True) -> Path:
    """The build tree with the C++ tests: HELMPINN_TEST_BUILD_DIR (used as it is: it must be
    built), else base/build, configured once and then built (`target` only, or everything; not
    at all without build_it); later calls (other test modules of the session) find it done."""
    given = os.environ.get("HELMPINN_TEST_BUILD_DIR")
    if given:
        build = Path(given).resolve()
        if not (build / "CTestTestfile.cmake").is_file():
            pytest.fail(f"HELMPINN_TEST_BUILD_DIR={given} is not a build tree with the C++ tests "
                        "(configure it with -DHELMPINN_BUILD_TESTS=ON and build it)", pytrace=False)
        return build
    build = base / "build"
    if not (build / "configured").exists():
        _configure(build)
        (build / "configured").write_text("ok\n")
    marker = build / f"built-{target or 'all'}"
    if build_it and not marker.exists():
        run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2),
             *(["--target", target] if target else [])], timeout=1800)
        marker.write_text("ok\n")
    return build


def build_and_install(base: Path) -> dict[str, Path]:
    """{'build': the test build tree (built), 'prefix': its install}, once a session."""
    build, prefix = cxx_build_tree(base), base / "prefix"
    if not (base / "installed").exists():
        run(["cmake", "--install", build, "--prefix", prefix])
        (base / "installed").write_text("ok\n")
    return {"build": build, "prefix": prefix}


def _build_base(tmp_path_factory) -> Path:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.getbasetemp() / "helmpinn-cxx"
    base.mkdir(exist_ok=True)
    return base


@pytest.fixture(scope="session")
def cxx(tmp_path_factory) -> dict[str, Path]:
    """{'build': build tree with the ctest suite, 'prefix': installed helmpinn, 'cfgdir': the
    directory of its helmpinnConfig.cmake, 'root': the prefix's include/ and lib/ parent
    (the prefix, or prefix/helmpinn for the wheel's layout), 'cuda': built with CUDA}."""
    out = build_and_install(_build_base(tmp_path_factory))
    cfgs = sorted(out["prefix"].glob("**/cmake/helmpinn/helmpinnConfig.cmake"))
    assert len(cfgs) == 1, f"helmpinnConfig.cmake under {out['prefix']}: {cfgs}"
    out["cfgdir"] = cfgs[0].parent
    out["root"] = cfgs[0].parents[3]
    out["cuda"] = "set(helmpinn_WITH_CUDA ON)" in cfgs[0].read_text()
    return out


@pytest.fixture
def cxx_cuda(cxx) -> dict[str, Path]:
    """The build when it has the CUDA backend; else a skip (a failure under HELMPINN_EXPECT_CUDA=1,
    which CI sets on a machine with nvcc: a CUDA build that silently lost CUDA must not pass)."""
    if not cxx["cuda"]:
        why = f"the C++ test build has no CUDA backend (nvcc: {_nvcc() or 'not found'})"
        if os.environ.get("HELMPINN_EXPECT_CUDA") == "1":
            pytest.fail(f"HELMPINN_EXPECT_CUDA=1 but {why}")
        pytest.skip(why)
    return cxx


def test_ctest_suite(cxx):
    """Allocation counting (2 threads and 1), finite differences, exceptions (the CUDA emulation
    checker's runs are tests/test_cuda.py's)."""
    out = run(["ctest", "--test-dir", cxx["build"], "--output-on-failure", "--timeout", "300",
               "-LE", "cuda_emulation", "-V", "-R", "helmpinn[.]errors"])
    assert "tests passed" in out, out
    assert f"CUDA (has_cuda={int(cxx['cuda'])}" in out, out
    out = run(["ctest", "--test-dir", cxx["build"], "--output-on-failure", "--timeout", "300",
               "-LE", "cuda_emulation", "-E", "helmpinn[.]errors"])
    assert "tests passed" in out and "helmpinn.alloc_1thread" in out and "helmpinn.fd" in out, out


def test_installed_package_layout(cxx):
    root, cfgdir = cxx["root"], cxx["cfgdir"]
    for h in HEADERS:
        assert (root / "include" / "helmpinn" / h).is_file(), f"header {h} not installed"
    libs = list(root.glob("lib*/libhelmpinn.a")) + list(root.glob("lib*/helmpinn.lib"))
    assert libs, f"no static library under {root}/lib*"
    assert cfgdir.parent.parent == libs[0].parent, (cfgdir, libs)
    for f in ("helmpinnConfig.cmake", "helmpinnConfigVersion.cmake", "helmpinnTargets.cmake"):
        assert (cfgdir / f).is_file(), f"{f} not installed in {cfgdir}"
    cfg = (cfgdir / "helmpinnConfig.cmake").read_text()
    assert re.search(r"set\(helmpinn_WITH_OPENMP (ON|OFF)\)", cfg), cfg
    assert re.search(r"set\(helmpinn_WITH_CUDA (ON|OFF)\)", cfg), cfg
    assert "find_dependency(OpenMP" in cfg and "find_dependency(CUDAToolkit)" in cfg
    version = re.search(r"project\(helmpinn VERSION ([0-9.]+)",
                        (REPO / "CMakeLists.txt").read_text()).group(1)
    assert f'set(PACKAGE_VERSION "{version}")' in \
        (cfgdir / "helmpinnConfigVersion.cmake").read_text()
    flags = json.loads((cfgdir / "helmpinn-flags.json").read_text())
    assert flags["version"] == version and flags["library"] == libs[0].name, flags
    assert flags["cuda"] is cxx["cuda"], flags


def _consume(src: Path, build: Path, *defs: str) -> str:
    run(["cmake", "-S", src, "-B", build, *_configure_args(), *defs])
    run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2)])
    return run(["ctest", "--test-dir", build, "--output-on-failure"])


def test_cmake_consume_installed(cxx, tmp_path):
    """find_package(helmpinn CONFIG REQUIRED) from the installed prefix."""
    _consume(REPO / "tests" / "cmake_consume", tmp_path / "b", f"-Dhelmpinn_DIR={cxx['cfgdir']}")


def test_cmake_consume_add_subdirectory(cxx, tmp_path):
    """add_subdirectory(<helmpinn source>) and the same helmpinn::core line; one CPU kernel set
    and no CUDA (this builds the core once more; the kernel sets and CUDA are the test build's)."""
    _consume(REPO / "tests" / "cmake_consume", tmp_path / "b", f"-DHELMPINN_SOURCE_DIR={REPO}",
             "-DHELMPINN_ENABLE_CUDA=OFF", "-DHELMPINN_CPU_DISPATCH=OFF", *_extra_args())


def test_example_plane1d(cxx, tmp_path):
    """The embedded 1-D solver reaches a relative L2 error below 1e-2 against exp(i k x)."""
    build = tmp_path / "b"
    run(["cmake", "-S", REPO / "examples" / "cpp", "-B", build, *_configure_args(),
         f"-Dhelmpinn_DIR={cxx['cfgdir']}"])
    run(["cmake", "--build", build])
    exe = build / ("plane1d.exe" if sys.platform == "win32" else "plane1d")
    out = run([exe], timeout=300)
    m = re.search(r"relative L2 error vs exp\(i k x\): ([0-9.eE+-]+)", out)
    assert m, out
    assert float(m.group(1)) < 1e-2, out


# ------------------------------------------------------------------ with the CUDA backend

def test_cuda_install_config_records_cuda_without_a_define(cxx_cuda):
    """The package config says the build had CUDA (a CMake variable and find_dependency), and the
    exported helmpinn::core has no CUDA compile definition and links cudart link-only."""
    cfgdir = cxx_cuda["cfgdir"]
    assert "set(helmpinn_WITH_CUDA ON)" in (cfgdir / "helmpinnConfig.cmake").read_text()
    assert json.loads((cfgdir / "helmpinn-flags.json").read_text())["cuda"] is True
    targets = (cfgdir / "helmpinnTargets.cmake").read_text()
    assert "HELMPINN_WITH_CUDA" not in targets, targets
    assert "$<LINK_ONLY:CUDA::cudart_static>" in targets, targets
    for h in (cxx_cuda["root"] / "include" / "helmpinn").glob("*.hpp"):
        text = h.read_text()
        assert not re.search(r"#\s*include\s*[<\"](cuda|driver_types)", text), h
        assert "HELMPINN_WITH_CUDA" not in text, h


def test_cmake_consume_cuda_install(cxx_cuda, tmp_path):
    """A plain C++ consumer of the CUDA-enabled install compiles without any CUDA define or
    header (main.cpp #errors on them; its CMakeLists refuses CUDA usage requirements), links, and
    runs: with no GPU it reports 0 devices and why, and a device allocation throws."""
    build = tmp_path / "b"
    _consume(REPO / "tests" / "cmake_consume", build, f"-Dhelmpinn_DIR={cxx_cuda['cfgdir']}",
             "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
    commands = json.loads((build / "compile_commands.json").read_text())
    main = [c for c in commands if c["file"].endswith("main.cpp")]
    assert main, commands
    args = main[0].get("arguments") or shlex.split(main[0]["command"])
    assert not [a for a in args if "CUDA" in a and a.startswith(("-D", "/D"))], args
    # No include directory of the consumer holds the CUDA runtime's headers.
    incs = [a[2:] or b for a, b in zip(args, args[1:] + [""]) if a.startswith("-I")]
    incs += [b for a, b in zip(args, args[1:]) if a == "-isystem"]
    assert incs, args
    assert not [d for d in incs if (Path(d) / "cuda_runtime_api.h").exists()], args
    exe = build / ("consume.exe" if sys.platform == "win32" else "consume")
    out = run([exe])
    assert "CUDA=1" in out and "OK" in out, out
    m = re.search(r"CUDA devices: (\d+)", out)
    assert m, out
    if int(m.group(1)) == 0:
        assert "DeviceBuffer without a device: helmpinn CUDA" in out, out


def test_cuda_runtime_stays_in_the_core():
    """Only cpp/src/cuda talks to the CUDA runtime: the public headers and the Python bindings
    include no CUDA header, call no cuda* function and test no HELMPINN_WITH_CUDA (the bindings
    call the core's runtime API of helmpinn/runtime.hpp)."""
    files = sorted((REPO / "cpp" / "include" / "helmpinn").glob("*.hpp"))
    files += sorted((REPO / "cpp" / "bindings").glob("*.[ch]pp"))
    if not files:
        pytest.skip(f"no helmpinn source tree at {REPO}")
    bad = []
    for f in files:
        for no, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("//")[0]
            if (re.search(r"#\s*include\s*[<\"](cuda|driver_types|cuda/)", code)
                    or re.search(r"\bcuda[A-Z]\w*\s*\(", code)
                    or "HELMPINN_WITH_CUDA" in code):
                bad.append(f"{f.relative_to(REPO)}:{no}: {line.strip()}")
    assert not bad, "CUDA outside the core:\n" + "\n".join(bad)
