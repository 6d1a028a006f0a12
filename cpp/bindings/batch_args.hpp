// The batch keywords every loss-level call takes (value_and_grad, residuals, jacobian, jvp, vjp),
// and the core's LossInputs built from them. Nothing here names a term or an array: both come
// from the loss-term table (cpp/src/common/loss_terms.hpp), which loss_terms() also hands to
// Python.
#pragma once

#include <utility>
#include <vector>

#include "../src/common/loss_terms.hpp"
#include "common.hpp"

namespace helmpinn {
namespace bindings {

/// The batch keywords of one call, parsed once from **kwargs.
struct BatchArgs {
    py::dict arrays;                            ///< the given arrays and constants, by keyword
    py::object counts = py::none();             ///< counts=, or None
    py::object batch_dtype = py::none();        ///< the dtype a batch= object reports, else None
    double weights[terms::kNumTerms] = {1.0, 1.0, 1.0};  ///< w_<term>, indexed by terms::Term
    bool train_fourier = true, check_finite = false;
};

/// Parses **kwargs of call `op`. batch= is any object with a method __helmpinn_batch__()
/// returning (a dict of array keywords and optionally "counts", its dtype): helmpinn.Batch is
/// one. Its entries stand in for the array keywords, which may then not be given as well.
/// Raises TypeError naming any keyword that is not one of the table's or the options.
BatchArgs parse_batch(const py::kwargs& kw, const char* op);

/// The checked arrays of one call with their names, for the caller's overlap checks.
template <typename T>
using Inputs = std::vector<std::pair<Checked<T>, const char*>>;

/// The core's LossInputs from the batch keywords: every array checked (dtype, shape, contiguity,
/// device), every constant converted to T (overflow refused), and listed in `inputs`.
template <typename T, typename Space>
LossInputs<T> build_inputs(const ModelSpec& spec, Space& space, const BatchArgs& b,
                           Inputs<T>& inputs);

/// The term table for Python (helmpinn._core.loss_terms()).
py::list loss_terms();

}  // namespace bindings
}  // namespace helmpinn
