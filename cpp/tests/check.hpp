// A tiny check macro and random-input helpers shared by helmpinn's C++ tests (no framework).
//
//     CHECK(cond, "what went wrong: " << value);   // records a failure, keeps going
//     return helmpinn_test::report("name");        // prints a summary, 0 if nothing failed
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "helmpinn/helmpinn.hpp"

namespace helmpinn_test {

inline int& failures() {
    static int n = 0;
    return n;
}
inline int& checks() {
    static int n = 0;
    return n;
}

#define CHECK(cond, msg)                                                                    \
    do {                                                                                    \
        ++::helmpinn_test::checks();                                                        \
        if (!(cond)) {                                                                      \
            ++::helmpinn_test::failures();                                                  \
            std::ostringstream hp_os_;                                                      \
            hp_os_ << msg;                                                                  \
            std::cout << "FAIL " << __FILE__ << ":" << __LINE__ << ": " #cond " -- "       \
                      << hp_os_.str() << std::endl;                                         \
        }                                                                                   \
    } while (0)

inline int report(const char* name) {
    std::cout << name << ": " << checks() << " checks, " << failures() << " failures"
              << std::endl;
    return failures() == 0 ? 0 : 1;
}

/// Uniform random numbers in [lo, hi) of a fixed seed.
struct Rng {
    std::mt19937_64 gen;
    explicit Rng(unsigned long long seed) : gen(seed) {}
    double uniform(double lo, double hi) {
        return std::uniform_real_distribution<double>(lo, hi)(gen);
    }
    double normal(double sd = 1.0) { return std::normal_distribution<double>(0.0, sd)(gen); }
    template <typename T>
    std::vector<T> uniform_vec(std::size_t n, double lo, double hi) {
        std::vector<T> v(n);
        for (auto& e : v) e = T(uniform(lo, hi));
        return v;
    }
    template <typename T>
    std::vector<T> normal_vec(std::size_t n, double sd = 1.0) {
        std::vector<T> v(n);
        for (auto& e : v) e = T(normal(sd));
        return v;
    }
    /// n unit vectors of dimension d, row-major [n, d].
    template <typename T>
    std::vector<T> unit_vectors(std::size_t n, int d) {
        std::vector<T> v(n * d);
        for (std::size_t p = 0; p < n; ++p) {
            double s = 0;
            for (int i = 0; i < d; ++i) {
                const double e = normal();
                v[p * d + i] = T(e);
                s += e * e;
            }
            s = std::sqrt(s);
            for (int i = 0; i < d; ++i) v[p * d + i] = T(double(v[p * d + i]) / s);
        }
        return v;
    }
};

/// Glorot-normal weights, small random biases (so that no bias sits at a special value) and
/// Fourier frequencies B ~ N(0, sigma^2), in the layout of ModelSpec::layout().
template <typename T>
std::vector<T> random_params(const helmpinn::ModelSpec& spec, Rng& rng, double sigma = 1.0) {
    std::vector<T> theta(spec.num_params());
    for (const auto& info : spec.layout()) {
        for (std::size_t k = 0; k < info.size; ++k) {
            double v;
            if (info.name == "B")
                v = rng.normal(sigma);
            else if (info.name[0] == 'W')
                v = rng.normal(std::sqrt(2.0 / double(info.shape[0] + info.shape[1])));
            else
                v = rng.normal(0.1);
            theta[info.offset + k] = T(v);
        }
    }
    return theta;
}

/// Every array of a LossInputs with all three terms, owned here; inputs() points into them.
template <typename T>
struct AllTerms {
    int d;
    std::size_t num_pde, num_data, num_bc;
    std::vector<T> x_pde, kappa, f, x_data, y, x_bc, normal, alpha, g;

    AllTerms(Rng& rng, int d_, std::size_t np, std::size_t nd, std::size_t nb)
        : d(d_), num_pde(np), num_data(nd), num_bc(nb) {
        x_pde = rng.uniform_vec<T>(np * d, -1, 1);
        kappa = rng.uniform_vec<T>(np, 1, 10);
        f = rng.normal_vec<T>(np * 2);
        x_data = rng.uniform_vec<T>(nd * d, -1, 1);
        y = rng.normal_vec<T>(nd * 2);
        x_bc = rng.uniform_vec<T>(nb * d, -1, 1);
        normal = rng.unit_vectors<T>(nb, d);
        alpha = rng.normal_vec<T>(nb * 2);
        g = rng.normal_vec<T>(nb * 2);
    }

    /// All terms with per-point kappa, f, alpha and g.
    helmpinn::LossInputs<T> inputs() const {
        helmpinn::LossInputs<T> in;
        in.x_pde = x_pde.data(); in.num_pde = num_pde; in.kappa = kappa.data(); in.f = f.data();
        in.x_data = x_data.data(); in.num_data = num_data; in.y = y.data();
        in.x_bc = x_bc.data(); in.num_bc = num_bc; in.normal_bc = normal.data();
        in.alpha_bc = alpha.data(); in.g_bc = g.data();
        in.w_pde = T(0.7); in.w_data = T(1.3); in.w_bc = T(0.9);
        return in;
    }
};

}  // namespace helmpinn_test
