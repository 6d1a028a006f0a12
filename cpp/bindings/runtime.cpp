// The runtime: DeviceArray, the thread count, the CPU's kernel sets and the CUDA devices.
#include <string>

#include "common.hpp"

namespace helmpinn {
namespace bindings {

void register_runtime(py::module_& mod) {
    bindings::register_device_array(mod);

    mod.def("has_openmp", &helmpinn::has_openmp);
    mod.def("has_cuda", &helmpinn::has_cuda);
    mod.def("cuda_device_count", &helmpinn::cuda_device_count);
    mod.def("cuda_device_error", []() -> py::object {
        const std::string e = helmpinn::cuda_device_error();
        return e.empty() ? py::object(py::none()) : py::object(py::str(e));
    }, "Why cuda_device_count() is 0 (the CUDA runtime's error), or None when there are devices.");
    mod.def("get_num_threads", &helmpinn::get_num_threads);
    mod.def("set_num_threads", &helmpinn::set_num_threads, py::arg("n"));
    mod.def("cpu_isa", &helmpinn::cpu_isa);
    mod.def("cpu_kernel_sets", [] {
        py::list out;
        std::string sets = helmpinn::cpu_kernel_sets();
        for (std::size_t a = 0, b; a <= sets.size(); a = b + 1) {
            b = sets.find(',', a);
            if (b == std::string::npos) b = sets.size();
            out.append(sets.substr(a, b - a));
        }
        return out;
    });
}

}  // namespace bindings
}  // namespace helmpinn
