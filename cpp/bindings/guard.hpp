// The guard against objects made by __new__ without __init__, for every class helmpinn._core
// binds. Included before any of those classes is used (device_arrays.hpp includes it first).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "helmpinn/helmpinn.hpp"

namespace helmpinn {
namespace bindings {
class DeviceArray;   // device_arrays.hpp
struct PyWorkspace;  // workspace.cpp
}  // namespace bindings
}  // namespace helmpinn

// Every class the module binds is loaded through this caster, so that an object made by
// `Class.__new__(Class)` without __init__ (memory, but no C++ object in it) raises TypeError
// when it is used (as self or as an argument) instead of handing uninitialised memory to C++.
// A new bound class is one more HELMPINN_REQUIRE_INIT line here; tests/test_hostile_bindings.py
// tries every class the module exports.
namespace pybind11 {
namespace detail {
template <typename C>
class initialised_caster : public type_caster_base<C> {
public:
    bool load(handle src, bool convert) {
        if (!type_caster_base<C>::load(src, convert)) return false;
        if (!src || src.is_none() || !isinstance<C>(src)) return true;
        auto* inst = reinterpret_cast<instance*>(src.ptr());
        if (!inst->get_value_and_holder(get_type_info(typeid(C))).holder_constructed()) {
            const std::string name = str(type::handle_of<C>().attr("__name__"));
            throw type_error(name + ": this object was made by " + name + ".__new__ without " +
                             "__init__ and holds nothing; create it with " + name + "(...)");
        }
        return true;
    }
};
}  // namespace detail
}  // namespace pybind11

#define HELMPINN_REQUIRE_INIT(C)                                            \
    namespace pybind11 {                                                    \
    namespace detail {                                                      \
    template <>                                                             \
    class type_caster<C> : public initialised_caster<C> {};                 \
    }                                                                       \
    }

HELMPINN_REQUIRE_INIT(helmpinn::ModelSpec)
HELMPINN_REQUIRE_INIT(helmpinn::LossBreakdown)
HELMPINN_REQUIRE_INIT(helmpinn::bindings::PyWorkspace)
HELMPINN_REQUIRE_INIT(helmpinn::bindings::DeviceArray)
