"""The C++ side, driven from pytest: builds helmpinn with its C++ tests in a temporary directory
once per session, then runs the ctest suite (allocation counting, finite differences,
exceptions), installs the CMake package and builds against it the consumer project
(tests/cmake_consume) both from the installed prefix and via add_subdirectory, and the C++
example (examples/cpp/plane1d), which must reach a relative L2 error below 1e-2.

The same consumer is also built against an install of helmpinn built WITH its CUDA backend (nvcc
needed, no GPU: build, link and run, which must report 0 devices cleanly there): a plain C++
program that gets no CUDA define, no CUDA include directory and no CUDA header from
helmpinn::core, and the C++ error tests of that build (the device runtime without a device).

Skipped, with the reason shown, only when cmake or a C++ compiler is missing or the source tree
is not next to this file (the CUDA install: also when nvcc is missing). Extra configure
arguments: HELMPINN_TEST_CMAKE_ARGS (e.g. to test a CUDA build: "-DHELMPINN_ENABLE_CUDA=ON");
the CUDA install compiles for HELMPINN_TEST_CUDA_ARCHITECTURES (default 80-virtual: PTX only,
the quickest build that links).
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


def build_and_install(base: Path, *args: str) -> dict[str, Path]:
    """Configures, builds (with the C++ tests) and installs helmpinn under base, once: a later
    call (another test module, the same session) finds the 'done' marker and returns at once.
    args: configure arguments after the default ones (default: without CUDA, then
    HELMPINN_TEST_CMAKE_ARGS)."""
    build, prefix, done = base / "build", base / "prefix", base / "done"
    if not done.exists():
        # The CUDA emulation checker (also a ctest target) is built and run by tests/test_cuda.py.
        run(["cmake", "-S", REPO, "-B", build, *_configure_args(), "-DHELMPINN_BUILD_TESTS=ON",
             "-DHELMPINN_BUILD_CUDA_EMULATION=OFF",
             "-DHELMPINN_PYTHON=OFF", "-DHELMPINN_INSTALL=ON",
             *(args or ("-DHELMPINN_ENABLE_CUDA=OFF", *_extra_args()))])
        run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2)], timeout=1800)
        run(["cmake", "--install", build, "--prefix", prefix])
        done.write_text("ok\n")
    return {"build": build, "prefix": prefix}


@pytest.fixture(scope="session")
def cxx(tmp_path_factory) -> dict[str, Path]:
    """{'build': build dir with the ctest suite, 'prefix': installed helmpinn}."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.getbasetemp() / "helmpinn-cxx"
    base.mkdir(exist_ok=True)
    return build_and_install(base)


def test_ctest_suite(cxx):
    """Allocation counting (2 threads and 1), finite differences, exceptions."""
    out = run(["ctest", "--test-dir", cxx["build"], "--output-on-failure", "--timeout", "300"])
    assert "tests passed" in out, out


def test_installed_package_layout(cxx):
    prefix = cxx["prefix"]
    for h in HEADERS:
        assert (prefix / "include" / "helmpinn" / h).is_file(), f"header {h} not installed"
    libs = list(prefix.glob("lib*/libhelmpinn.a")) + list(prefix.glob("lib*/helmpinn.lib"))
    assert libs, f"no static library under {prefix}/lib*"
    cfgdir = libs[0].parent / "cmake" / "helmpinn"
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


def _consume(src: Path, build: Path, *defs: str) -> str:
    run(["cmake", "-S", src, "-B", build, *_configure_args(), *defs])
    run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2)])
    return run(["ctest", "--test-dir", build, "--output-on-failure"])


def test_cmake_consume_installed(cxx, tmp_path):
    """find_package(helmpinn CONFIG REQUIRED) from the installed prefix."""
    _consume(REPO / "tests" / "cmake_consume", tmp_path / "b",
             f"-DCMAKE_PREFIX_PATH={cxx['prefix']}")


def test_cmake_consume_add_subdirectory(cxx, tmp_path):
    """add_subdirectory(<helmpinn source>) and the same helmpinn::core line."""
    _consume(REPO / "tests" / "cmake_consume", tmp_path / "b", f"-DHELMPINN_SOURCE_DIR={REPO}",
             "-DHELMPINN_ENABLE_CUDA=OFF", *_extra_args())


def test_example_plane1d(cxx, tmp_path):
    """The embedded 1-D solver reaches a relative L2 error below 1e-2 against exp(i k x)."""
    build = tmp_path / "b"
    run(["cmake", "-S", REPO / "examples" / "cpp", "-B", build, *_configure_args(),
         f"-DCMAKE_PREFIX_PATH={cxx['prefix']}"])
    run(["cmake", "--build", build])
    exe = build / ("plane1d.exe" if sys.platform == "win32" else "plane1d")
    out = run([exe], timeout=300)
    m = re.search(r"relative L2 error vs exp\(i k x\): ([0-9.eE+-]+)", out)
    assert m, out
    assert float(m.group(1)) < 1e-2, out


# ------------------------------------------------------------------ a CUDA-enabled install

def _nvcc() -> str | None:
    cudacxx = os.environ.get("CUDACXX")
    if cudacxx and shutil.which(cudacxx):
        return shutil.which(cudacxx)
    return shutil.which("nvcc")


needs_nvcc = pytest.mark.skipif(_nvcc() is None,
                                reason="nvcc not found (PATH, CUDACXX): helmpinn cannot be built "
                                       "with its CUDA backend here")


@pytest.fixture(scope="session")
def cxx_cuda(tmp_path_factory) -> dict[str, Path]:
    """helmpinn built with its CUDA backend (and its C++ tests) and installed, once a session."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.getbasetemp() / "helmpinn-cxx-cuda"
    base.mkdir(exist_ok=True)
    archs = os.environ.get("HELMPINN_TEST_CUDA_ARCHITECTURES", "80-virtual")
    return build_and_install(base, "-DHELMPINN_ENABLE_CUDA=ON",
                             f"-DCMAKE_CUDA_COMPILER={_nvcc()}",
                             f"-DCMAKE_CUDA_ARCHITECTURES={archs}")


@needs_nvcc
def test_cuda_install_config_records_cuda_without_a_define(cxx_cuda):
    """The package config says the build had CUDA (a CMake variable and find_dependency), and the
    exported helmpinn::core has no CUDA compile definition and links cudart link-only."""
    prefix = cxx_cuda["prefix"]
    cfgdir = next(prefix.glob("lib*/cmake/helmpinn"))
    assert "set(helmpinn_WITH_CUDA ON)" in (cfgdir / "helmpinnConfig.cmake").read_text()
    assert json.loads((cfgdir / "helmpinn-flags.json").read_text())["cuda"] is True
    targets = (cfgdir / "helmpinnTargets.cmake").read_text()
    assert "HELMPINN_WITH_CUDA" not in targets, targets
    assert "$<LINK_ONLY:CUDA::cudart_static>" in targets, targets
    for h in (prefix / "include" / "helmpinn").glob("*.hpp"):
        text = h.read_text()
        assert not re.search(r"#\s*include\s*[<\"](cuda|driver_types)", text), h
        assert "HELMPINN_WITH_CUDA" not in text, h


@needs_nvcc
def test_cuda_install_ctest_errors(cxx_cuda):
    """The C++ error tests of the CUDA build: the device runtime throws, never aborts, without a
    device (or checks a device when there is one)."""
    out = run(["ctest", "--test-dir", cxx_cuda["build"], "--output-on-failure", "-V",
               "-R", "helmpinn.errors", "--timeout", "300"])
    assert "CUDA (has_cuda=1" in out and "tests passed" in out, out


@needs_nvcc
def test_cmake_consume_cuda_install(cxx_cuda, tmp_path):
    """A plain C++ consumer of the CUDA-enabled install compiles without any CUDA define or
    header (main.cpp #errors on them; its CMakeLists refuses CUDA usage requirements), links, and
    runs: with no GPU it reports 0 devices and why, and a device allocation throws."""
    build = tmp_path / "b"
    _consume(REPO / "tests" / "cmake_consume", build, f"-DCMAKE_PREFIX_PATH={cxx_cuda['prefix']}",
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
