// plane1d: a C++ program that embeds helmpinn to solve a 1-D Helmholtz problem.
//
//     u'' + k^2 u = 0 on [0, 1],   u(0) = 1,   u'(1) - i k u(1) = 0   (Sommerfeld, outgoing)
//
// whose solution is the plane wave u = exp(i k x). The program owns its training loop: it
// samples collocation points, asks a helmpinn::Workspace for the exact loss and gradient,
// and updates the flat parameter vector with helmpinn::adam_step. Then it compares the
// network with exp(i k x) on a fine grid and prints the relative L2 error.
//
//     plane1d [steps] [k]        (defaults: 2000 steps, k = 2 pi)
//
// Exits with status 1 if the relative L2 error is not below 1e-2. The problem is small (256
// points a step), so on a busy machine OMP_WAIT_POLICY=passive (or OMP_NUM_THREADS=1) keeps
// idle OpenMP threads from spinning against other work.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <helmpinn/helmpinn.hpp>

namespace {
constexpr double pi = 3.14159265358979323846;
}

int main(int argc, char** argv) {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
    const double k = argc > 2 ? std::atof(argv[2]) : 2.0 * pi;
    using T = double;

    // The network: d = 1, 16 Fourier frequencies, 2 tanh layers of 32 units.
    const helmpinn::ModelSpec spec{1, 16, 32, 2};
    const std::size_t P = spec.num_params();

    // Initial parameters, filled through the flat layout: B ~ N(0, (k / 2 pi)^2) so that the
    // features cover the wave's frequency, Glorot-normal weights, zero biases.
    std::mt19937_64 gen(7);
    std::vector<T> theta(P, T(0)), grad(P), m(P, T(0)), v(P, T(0));
    for (const helmpinn::ParamInfo& t : spec.layout()) {
        double sd = 0.0;
        if (t.name == "B") sd = k / (2.0 * pi);
        else if (t.name[0] == 'W') sd = std::sqrt(2.0 / double(t.shape[0] + t.shape[1]));
        std::normal_distribution<double> nd(0.0, sd > 0 ? sd : 1.0);
        if (sd > 0)
            for (std::size_t i = 0; i < t.size; ++i) theta[t.offset + i] = T(nd(gen));
    }

    // Training points: collocation points resampled every step, one Dirichlet data point at
    // x = 0 and one Robin point at x = 1 with outward normal +1 and alpha = -i k.
    const std::size_t num_pde = 256;
    std::vector<T> x_pde(num_pde);
    const T x_data[1] = {T(0)}, y_data[2] = {T(1), T(0)};
    const T x_bc[1] = {T(1)}, num_bc[1] = {T(1)};

    helmpinn::LossInputs<T> in;
    in.x_pde = x_pde.data();
    in.num_pde = num_pde;
    in.kappa_const = T(k * k);     // kappa = k^2, constant; f = 0 (null)
    in.x_data = x_data;
    in.y = y_data;
    in.num_data = 1;
    in.x_bc = x_bc;
    in.normal_bc = num_bc;
    in.num_bc = 1;
    in.alpha_const[0] = T(0);      // alpha = -i k: the first-order Sommerfeld condition
    in.alpha_const[1] = T(-k);
    in.w_pde = T(1.0 / (k * k * k * k));  // the residual scaled by 1/k^2, as u itself is O(1)
    in.w_data = T(1);
    in.w_bc = T(1.0 / (k * k));

    // One workspace, allocated once: the training loop below allocates nothing.
    helmpinn::Workspace<T> ws(spec, num_pde);
    std::uniform_real_distribution<double> unif(0.0, 1.0);

    const auto t0 = std::chrono::steady_clock::now();
    helmpinn::LossBreakdown loss;
    for (int step = 1; step <= steps; ++step) {
        // Stratified resampling: one point in each of num_pde equal cells.
        for (std::size_t i = 0; i < num_pde; ++i) x_pde[i] = T((double(i) + unif(gen)) / num_pde);
        loss = ws.value_and_grad(theta.data(), grad.data(), in);
        // Learning rate: 5e-3 decaying exponentially to 1e-4 over the run.
        const double lr = 5e-3 * std::pow(1e-4 / 5e-3, double(step - 1) / std::max(steps - 1, 1));
        helmpinn::adam_step(theta.data(), grad.data(), m.data(), v.data(), P, step, lr, 0.9,
                            0.999, 1e-8, 0.0);
        if (step == 1 || step % 500 == 0 || step == steps)
            std::printf("step %5d  loss %.3e  (pde %.2e, data %.2e, bc %.2e)\n", step,
                        loss.total, loss.mean[helmpinn::terms::kPde],
                        loss.mean[helmpinn::terms::kData], loss.mean[helmpinn::terms::kBc]);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Relative L2 error against exp(i k x) on 1001 points.
    const std::size_t n_test = 1001;
    std::vector<T> xt(n_test), u(2 * n_test);
    for (std::size_t i = 0; i < n_test; ++i) xt[i] = T(double(i) / (n_test - 1));
    ws.forward(theta.data(), xt.data(), n_test, 0, u.data(), nullptr, nullptr);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < n_test; ++i) {
        const double er = u[2 * i] - std::cos(k * xt[i]), ei = u[2 * i + 1] - std::sin(k * xt[i]);
        num += er * er + ei * ei;
        den += 1.0;  // |exp(i k x)|^2 = 1
    }
    const double rel = std::sqrt(num / den);
    std::printf("helmpinn %s (%s, %d threads): k = %.4f, %d Adam steps in %.2f s\n",
                helmpinn::version(), helmpinn::cpu_isa(), helmpinn::get_num_threads(), k, steps,
                seconds);
    std::printf("relative L2 error vs exp(i k x): %.3e\n", rel);
    return rel < 1e-2 ? 0 : 1;
}
