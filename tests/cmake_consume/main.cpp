// The consumer's program: one tiny value_and_grad through the installed (or sub-project) API,
// checked against a central finite difference. Exits non-zero on any failure.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <helmpinn/helmpinn.hpp>

// The public API is plain C++ whatever the library was built with: no helmpinn build define and
// no CUDA header reaches a consumer (CMakeLists.txt checks the target's usage requirements).
#if defined(HELMPINN_WITH_CUDA)
#error "HELMPINN_WITH_CUDA leaked into a consumer of helmpinn::core"
#endif
#if defined(CUDART_VERSION) || defined(__CUDA_RUNTIME_H__) || defined(__CUDA_RUNTIME_API_H__) || \
    defined(__DRIVER_TYPES_H__)
#error "a helmpinn header included a CUDA header"
#endif

#ifndef HELMPINN_EXPECT_VERSION  // set by CMakeLists.txt to the package config's version
#define HELMPINN_EXPECT_VERSION ""
#endif

int main() {
    try {
        std::printf("helmpinn %s (OpenMP=%d, CUDA=%d, isa=%s, threads=%d)\n", helmpinn::version(),
                    int(helmpinn::has_openmp()), int(helmpinn::has_cuda()), helmpinn::cpu_isa(),
                    helmpinn::get_num_threads());
        const char* expect = HELMPINN_EXPECT_VERSION;
        if (expect[0] && std::strcmp(expect, helmpinn::version()) != 0) {
            std::printf("FAIL: library version %s, package config says %s\n", helmpinn::version(),
                        expect);
            return 1;
        }

        // The CUDA runtime API links in every build. Without a usable device it reports 0
        // devices and why, and the device calls throw (never abort).
        const int devices = helmpinn::cuda_device_count();
        const std::string why = helmpinn::cuda_device_error();
        std::printf("CUDA devices: %d%s%s\n", devices, why.empty() ? "" : " -- ", why.c_str());
        if (!helmpinn::has_cuda() && (devices != 0 || why.empty())) {
            std::printf("FAIL: a build without CUDA reports %d devices (%s)\n", devices, why.c_str());
            return 1;
        }
        if (devices == 0) {
            try {
                helmpinn::DeviceBuffer b(64, 0);
                std::printf("FAIL: DeviceBuffer allocated with no CUDA device\n");
                return 1;
            } catch (const std::runtime_error& e) {
                std::printf("DeviceBuffer without a device: %s\n", e.what());
            }
        } else {  // a GPU: one round trip through the runtime API
            helmpinn::DeviceBuffer b(sizeof(double) * 4, 0);
            const double src[4] = {1, 2, 3, 4};
            double back[4] = {};
            helmpinn::copy_to_device(b.data(), src, sizeof src, 0);
            helmpinn::copy_to_host(back, b.data(), sizeof back, 0);
            if (helmpinn::device_for_pointer(b.data()) != 0 ||
                helmpinn::device_for_pointer(back) != -1 || std::memcmp(src, back, sizeof src)) {
                std::printf("FAIL: device buffer round trip\n");
                return 1;
            }
        }

        const helmpinn::ModelSpec spec{2, 3, 8, 2};
        const std::size_t P = spec.num_params();
        std::vector<double> theta(P), grad(P);
        for (std::size_t i = 0; i < P; ++i) theta[i] = 0.3 * std::sin(1.7 * double(i) + 0.2);

        const double x_pde[] = {0.1, 0.2, -0.3, 0.4, 0.5, -0.6};
        const double x_data[] = {0.0, 0.0}, y[] = {1.0, 0.0};
        const double x_bc[] = {1.0, 0.0}, num_bc[] = {1.0, 0.0};
        helmpinn::LossInputs<double> in;
        in.x_pde = x_pde;
        in.num_pde = 3;
        in.kappa_const = 4.0;
        in.x_data = x_data;
        in.y = y;
        in.num_data = 1;
        in.x_bc = x_bc;
        in.normal_bc = num_bc;
        in.num_bc = 1;
        in.alpha_const[1] = -2.0;

        helmpinn::Workspace<double> ws(spec, 2);
        const helmpinn::LossBreakdown loss = ws.value_and_grad(theta.data(), grad.data(), in);

        // Central difference in one weight of the first hidden layer.
        const std::size_t k = spec.offset_W(0) + 3;
        std::vector<double> scratch(P), tp(theta);
        const double h = 1e-6;
        tp[k] = theta[k] + h;
        const double lp = ws.value_and_grad(tp.data(), scratch.data(), in).total;
        tp[k] = theta[k] - h;
        const double lm = ws.value_and_grad(tp.data(), scratch.data(), in).total;
        const double fd = (lp - lm) / (2 * h);
        const double err = std::abs(fd - grad[k]) / std::max(std::abs(fd), 1e-12);

        std::printf("loss %.10g (pde %.4g, data %.4g, bc %.4g); dL/dtheta[%zu] = %.10g, FD %.10g, "
                    "rel. error %.2e\n",
                    loss.total, loss.mean[helmpinn::terms::kPde],
                    loss.mean[helmpinn::terms::kData], loss.mean[helmpinn::terms::kBc], k,
                    grad[k], fd, err);
        if (!(std::isfinite(loss.total) && loss.total > 0 && err < 1e-6)) {
            std::printf("FAIL\n");
            return 1;
        }
        std::printf("OK\n");
        return 0;
    } catch (const std::exception& e) {
        std::printf("FAIL: exception: %s\n", e.what());
        return 1;
    }
}
