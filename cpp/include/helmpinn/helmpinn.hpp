// helmpinn/helmpinn.hpp: the whole public C++ API of helmpinn. No CUDA or Python types.
//
// Embedding (CMake):   find_package(helmpinn CONFIG REQUIRED)
//                      target_link_libraries(app PRIVATE helmpinn::core)
// or add_subdirectory(<helmpinn checkout>) and the same target_link_libraries line.
//
// A training step (host memory, float or double; see examples/cpp/plane1d.cpp):
//
//     helmpinn::ModelSpec spec{2, 32, 64, 3};          // d, Fourier frequencies, width, layers
//     helmpinn::Workspace<float> ws(spec, 4096);        // allocates once
//     std::vector<float> theta(spec.num_params()), grad(theta.size()), m(..), v(..);
//     helmpinn::LossInputs<float> in;                   // pointers into your arrays
//     in.x_pde = x.data(); in.num_pde = n; in.kappa_const = k * k;
//     for (long step = 1; ...; ++step) {                // allocates nothing
//         helmpinn::LossBreakdown l = ws.value_and_grad(theta.data(), grad.data(), in);
//         helmpinn::adam_step(theta.data(), grad.data(), m.data(), v.data(), theta.size(),
//                             step, 1e-3, 0.9, 0.999, 1e-8, 0.0);
//     }
//
// Errors are C++ exceptions (std::invalid_argument naming the argument, std::runtime_error
// for an unavailable device); nothing aborts. All arrays are dense, row-major, caller-owned.
#pragma once

#include "helmpinn/device.hpp"
#include "helmpinn/primitives.hpp"
#include "helmpinn/runtime.hpp"
#include "helmpinn/spec.hpp"
#include "helmpinn/workspace.hpp"
