"""Where a pip-installed helmpinn keeps its C++ package (headers, static library, CMake config),
for embedding it in C++ (find_package) and Cython (cimport helmpinn.core)."""
from __future__ import annotations

import json
import os

__all__ = ["get_build_flags", "get_cmake_dir", "get_include", "get_library_dir"]


def _cxx_path(*parts: str) -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist: this helmpinn does not ship its C++ package (a development "
            "build?). Install it with `cmake --install <build> --prefix <prefix>` and use "
            "<prefix>/include, <prefix>/lib and <prefix>/lib/cmake/helmpinn instead.")
    return path


def get_include() -> str:
    """Directory of the C++ headers, <helmpinn/helmpinn.hpp> (a compiler's -I)."""
    return _cxx_path("include")


def get_library_dir() -> str:
    """Directory of the static C++ library libhelmpinn.a."""
    return _cxx_path("lib")


def get_cmake_dir() -> str:
    """Directory of helmpinnConfig.cmake, for CMake's -Dhelmpinn_DIR=..."""
    return _cxx_path("lib", "cmake", "helmpinn")


def get_build_flags() -> dict:
    """Keyword arguments of a setuptools.Extension that uses the C++ API (from Cython):
    language, include_dirs, extra_objects (libhelmpinn.a), extra_compile_args (C++17, OpenMP)
    and extra_link_args (OpenMP; the static CUDA runtime when helmpinn was built with CUDA)."""
    with open(os.path.join(get_cmake_dir(), "helmpinn-flags.json")) as fh:
        info = json.load(fh)
    return {"language": "c++",
            "include_dirs": [get_include()],
            "extra_objects": [os.path.join(get_library_dir(), info["library"])],
            "extra_compile_args": list(info["compile_args"]),
            "extra_link_args": list(info["link_args"])}
