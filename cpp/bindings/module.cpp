// helmpinn._core: the pybind11 module. It converts and checks, nothing else: every array is
// checked (arrays.hpp, device_arrays.hpp) before the C++ core runs, and the GIL is released
// while it runs. The parts, one file each: spec.cpp (ModelSpec, LossBreakdown, loss_terms),
// batch_args.cpp (the batch keywords, looped over the loss-term table), workspace.cpp
// (Workspace), primitives.cpp (the seed primitives), runtime.cpp (DeviceArray, threads,
// devices); common.hpp and guard.hpp hold what they share.
#include "common.hpp"

PYBIND11_MODULE(_core, mod) {
    namespace bindings = helmpinn::bindings;
    mod.doc() = "helmpinn's compiled core: exact Helmholtz PINN losses and gradients.";
    mod.attr("__version__") = helmpinn::version();
    bindings::register_spec(mod);
    bindings::register_workspace(mod);
    bindings::register_primitives(mod);
    bindings::register_runtime(mod);
}
