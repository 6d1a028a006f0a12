"""The C++ side, driven from pytest: builds helmpinn with its C++ tests in a temporary directory
once per session, then runs the ctest suite (allocation counting, finite differences,
exceptions), installs the CMake package and builds against it the consumer project
(tests/cmake_consume) both from the installed prefix and via add_subdirectory, and the C++
example (examples/cpp/plane1d), which must reach a relative L2 error below 1e-2.

Skipped, with the reason shown, only when cmake or a C++ compiler is missing or the source tree
is not next to this file. Extra configure arguments: HELMPINN_TEST_CMAKE_ARGS (e.g. to test a
CUDA build: "-DHELMPINN_ENABLE_CUDA=ON").
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


def build_and_install(base: Path) -> dict[str, Path]:
    """Configures, builds (with the C++ tests) and installs helmpinn under base, once: a later
    call (another test module, the same session) finds the 'done' marker and returns at once."""
    build, prefix, done = base / "build", base / "prefix", base / "done"
    if not done.exists():
        run(["cmake", "-S", REPO, "-B", build, *_configure_args(), "-DHELMPINN_BUILD_TESTS=ON",
             "-DHELMPINN_PYTHON=OFF", "-DHELMPINN_INSTALL=ON", "-DHELMPINN_ENABLE_CUDA=OFF",
             *_extra_args()])
        run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 2)])
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
