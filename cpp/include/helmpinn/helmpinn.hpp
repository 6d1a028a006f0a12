// helmpinn/helmpinn.hpp: the whole public C++ API of helmpinn. No CUDA or Python types.
#pragma once

#include "helmpinn/primitives.hpp"
#include "helmpinn/runtime.hpp"
#include "helmpinn/spec.hpp"
#include "helmpinn/workspace.hpp"
