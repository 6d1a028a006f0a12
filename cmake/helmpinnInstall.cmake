# Install rules and the CMake package config of helmpinn:
#
#     find_package(helmpinn CONFIG REQUIRED)
#     target_link_libraries(app PRIVATE helmpinn::core)
#
# Included from the top-level CMakeLists.txt (when HELMPINN_INSTALL is ON), after helmpinn_core
# and HELMPINN_WITH_OPENMP / HELMPINN_WITH_CUDA are known.
#
# Layout of an ordinary install (cmake --install build --prefix P):
#     P/include/helmpinn/*.hpp
#     P/lib/libhelmpinn.a
#     P/lib/cmake/helmpinn/{helmpinnConfig,helmpinnConfigVersion,helmpinnTargets*}.cmake
#     P/lib/cmake/helmpinn/helmpinn-flags.json   compile/link arguments for builds without CMake
#
# In a wheel build (scikit-build-core defines SKBUILD and installs into site-packages) the same
# files go *inside the Python package*, below helmpinn/, so that a pip-installed helmpinn can be
# embedded too: find_package(helmpinn) with helmpinn_DIR=$(python -c "import helmpinn;
# print(helmpinn.get_cmake_dir())") and Cython extensions that cimport helmpinn.core and link
# helmpinn/lib/libhelmpinn.a. It costs a few hundred kB (headers + one static library).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

if(DEFINED SKBUILD)
  set(_hp_prefix helmpinn/)
  set(HELMPINN_INSTALL_INCLUDEDIR "${_hp_prefix}include")
  set(HELMPINN_INSTALL_LIBDIR "${_hp_prefix}lib")
else()
  set(HELMPINN_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
  set(HELMPINN_INSTALL_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
endif()
set(HELMPINN_INSTALL_CMAKEDIR "${HELMPINN_INSTALL_LIBDIR}/cmake/helmpinn"
    CACHE STRING "Where helmpinnConfig.cmake is installed, relative to the prefix")
mark_as_advanced(HELMPINN_INSTALL_CMAKEDIR)

# The installed include directory comes from INCLUDES DESTINATION below (the target itself
# names only its build-tree include directory), so that it follows the layout above.

# Every library helmpinn::core needs at link time must be in the export set. The CUDA backend
# (cpp/src/cuda) may add its own static targets to HELMPINN_EXPORT_EXTRA_TARGETS.
set(_hp_targets helmpinn_core)
foreach(_t IN LISTS HELMPINN_EXPORT_EXTRA_TARGETS)
  if(TARGET ${_t})
    list(APPEND _hp_targets ${_t})
  endif()
endforeach()

install(TARGETS ${_hp_targets}
  EXPORT helmpinnTargets
  ARCHIVE DESTINATION "${HELMPINN_INSTALL_LIBDIR}" COMPONENT helmpinn_dev
  LIBRARY DESTINATION "${HELMPINN_INSTALL_LIBDIR}" COMPONENT helmpinn_dev
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT helmpinn_dev
  INCLUDES DESTINATION "${HELMPINN_INSTALL_INCLUDEDIR}")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/cpp/include/helmpinn"
  DESTINATION "${HELMPINN_INSTALL_INCLUDEDIR}" COMPONENT helmpinn_dev
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(EXPORT helmpinnTargets
  NAMESPACE helmpinn::
  DESTINATION "${HELMPINN_INSTALL_CMAKEDIR}"
  COMPONENT helmpinn_dev)

# What the config needs to know about this build (the top-level CMakeLists sets both ON or OFF).
set(HELMPINN_CONFIG_WITH_OPENMP ${HELMPINN_WITH_OPENMP})
set(HELMPINN_CONFIG_WITH_CUDA ${HELMPINN_WITH_CUDA})

configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/helmpinnConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/helmpinnConfig.cmake"
  INSTALL_DESTINATION "${HELMPINN_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/helmpinnConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/helmpinnConfig.cmake"
  "${PROJECT_BINARY_DIR}/helmpinnConfigVersion.cmake"
  DESTINATION "${HELMPINN_INSTALL_CMAKEDIR}"
  COMPONENT helmpinn_dev)

# ---- helmpinn-flags.json: how to compile and link against the library without CMake ----------
# Read by helmpinn.get_build_flags() (a setuptools Extension for Cython code, for example):
# the library's file name, and the compile and link arguments its static archive needs
# (OpenMP's flags; with the CUDA backend, the static CUDA runtime and its system libraries).
function(_helmpinn_json_list out)
  set(items "")
  foreach(a IN LISTS ARGN)
    string(REPLACE "\\" "\\\\" a "${a}")
    string(REPLACE "\"" "\\\"" a "${a}")
    list(APPEND items "\"${a}\"")
  endforeach()
  list(JOIN items ", " joined)
  set(${out} "[${joined}]" PARENT_SCOPE)
endfunction()

if(MSVC)
  set(_hp_compile /std:c++17)
else()
  set(_hp_compile -std=c++17)
endif()
set(_hp_link "")
if(HELMPINN_WITH_OPENMP)
  separate_arguments(_hp_omp NATIVE_COMMAND "${OpenMP_CXX_FLAGS}")
  list(APPEND _hp_compile ${_hp_omp})
  list(APPEND _hp_link ${_hp_omp})
endif()
if(HELMPINN_WITH_CUDA)
  find_package(CUDAToolkit QUIET)
  if(TARGET CUDA::cudart_static)
    list(APPEND _hp_link "$<TARGET_FILE:CUDA::cudart_static>")
    if(UNIX AND NOT APPLE)
      list(APPEND _hp_link -ldl -lrt -lpthread)
    endif()
  endif()
endif()
_helmpinn_json_list(_hp_compile_json ${_hp_compile})
_helmpinn_json_list(_hp_link_json ${_hp_link})
if(HELMPINN_CONFIG_WITH_OPENMP)
  set(_hp_omp_json true)
else()
  set(_hp_omp_json false)
endif()
if(HELMPINN_CONFIG_WITH_CUDA)
  set(_hp_cuda_json true)
else()
  set(_hp_cuda_json false)
endif()
file(GENERATE OUTPUT "${PROJECT_BINARY_DIR}/helmpinn-flags.json" CONTENT "{
  \"version\": \"${PROJECT_VERSION}\",
  \"library\": \"$<TARGET_FILE_NAME:helmpinn_core>\",
  \"openmp\": ${_hp_omp_json},
  \"cuda\": ${_hp_cuda_json},
  \"compile_args\": ${_hp_compile_json},
  \"link_args\": ${_hp_link_json}
}
")
install(FILES "${PROJECT_BINARY_DIR}/helmpinn-flags.json"
  DESTINATION "${HELMPINN_INSTALL_CMAKEDIR}"
  COMPONENT helmpinn_dev)

unset(_hp_compile)
unset(_hp_link)
unset(_hp_prefix)
unset(_hp_inc)
unset(_hp_targets)
