// The C++ API against float64 finite differences, d = 1, 2, 3, one chain of independent checks:
//   1. forward() u equals a plain, independent implementation of the network (below);
//   2. forward() grad_u and lap_u equal finite differences of that network in x;
//   3. value_and_grad()'s loss breakdown equals the loss computed here from forward() outputs;
//   4. value_and_grad()'s gradient equals finite differences of its loss in every parameter,
//      for all terms together and each alone, per-point and constant kappa/alpha, frozen B;
//   5. float32 agrees with float64; results are bitwise the same on 1 and 2 threads.
// Finite differences are fourth-order central (error O(h^4)), so they resolve 1e-8 relative.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "check.hpp"

namespace {

using helmpinn::LossBreakdown;
using helmpinn::LossInputs;
using helmpinn::ModelSpec;
using helmpinn::Workspace;
using helmpinn::terms::kBc;
using helmpinn::terms::kData;
using helmpinn::terms::kPde;
using helmpinn_test::AllTerms;
using helmpinn_test::Rng;

constexpr double kTwoPi = 6.283185307179586476925286766559;

/// u(x) of the network, written from spec.hpp's definition and nothing else.
void reference_u(const ModelSpec& sp, const std::vector<double>& th, const double* x,
                 double out[2]) {
    const int d = sp.in_dim, m = sp.ff_dim, H = sp.hidden_dim, L = sp.num_hidden_layers;
    std::vector<double> a(2 * m), z;
    for (int j = 0; j < m; ++j) {
        double s = 0;
        for (int i = 0; i < d; ++i) s += kTwoPi * x[i] * th[sp.offset_B() + std::size_t(i) * m + j];
        a[j] = std::sin(s);
        a[m + j] = std::cos(s);
    }
    for (int l = 0; l <= L; ++l) {
        const int in = sp.layer_in(l), outw = sp.layer_out(l);
        z.assign(outw, 0.0);
        for (int o = 0; o < outw; ++o) {
            double acc = th[sp.offset_b(l) + o];
            for (int i = 0; i < in; ++i) acc += th[sp.offset_W(l) + std::size_t(o) * in + i] * a[i];
            z[o] = l < L ? std::tanh(acc) : acc;
        }
        a = z;
    }
    (void)H;
    out[0] = a[0];
    out[1] = a[1];
}

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
        num = std::max(num, std::abs(got[k] - want[k]));
        den = std::max(den, std::abs(want[k]));
    }
    return num / std::max(den, 1e-300);
}

/// Fourth-order central difference of f at 0 with step h.
double d1(const std::function<double(double)>& f, double h) {
    return (-f(2 * h) + 8 * f(h) - 8 * f(-h) + f(-2 * h)) / (12 * h);
}
double d2(const std::function<double(double)>& f, double h) {
    return (-f(2 * h) + 16 * f(h) - 30 * f(0) + 16 * f(-h) - f(-2 * h)) / (12 * h * h);
}

void check_forward(int d) {
    const ModelSpec sp{d, 4, 7, 3};
    Rng rng(100 + d);
    const auto th = helmpinn_test::random_params<double>(sp, rng);
    const std::size_t n = 23;  // three chunks of 8, the last partial
    const auto x = rng.uniform_vec<double>(n * d, -1, 1);
    Workspace<double> ws(sp, 8);
    std::vector<double> u(n * 2), gu(n * d * 2), lap(n * 2);
    ws.forward(th.data(), x.data(), n, 2, u.data(), gu.data(), lap.data());

    std::vector<double> u_ref(n * 2), gu_fd(n * d * 2), lap_fd(n * 2, 0.0);
    for (std::size_t p = 0; p < n; ++p) {
        reference_u(sp, th, &x[p * d], &u_ref[p * 2]);
        for (int c = 0; c < 2; ++c)
            for (int i = 0; i < d; ++i) {
                auto f = [&](double t) {
                    std::vector<double> xp(x.begin() + p * d, x.begin() + (p + 1) * d);
                    xp[i] += t;
                    double o[2];
                    reference_u(sp, th, xp.data(), o);
                    return o[c];
                };
                gu_fd[(p * d + i) * 2 + c] = d1(f, 1e-4);
                lap_fd[p * 2 + c] += d2(f, 1e-3);
            }
    }
    const double eu = rel_err(u, u_ref), eg = rel_err(gu, gu_fd), el = rel_err(lap, lap_fd);
    std::printf("  d=%d forward: u vs reference %.2e, grad_u vs FD %.2e, lap_u vs FD %.2e\n", d,
                eu, eg, el);
    CHECK(eu < 1e-13, "d=" << d << " u differs from the reference network: " << eu);
    CHECK(eg < 1e-8, "d=" << d << " grad_u differs from finite differences: " << eg);
    CHECK(el < 1e-6, "d=" << d << " lap_u differs from finite differences: " << el);

    // derivatives = 0 and 1 give the same u (and grad_u) as derivatives = 2.
    std::vector<double> u0(n * 2), u1(n * 2), g1(n * d * 2);
    ws.forward(th.data(), x.data(), n, 0, u0.data(), nullptr, nullptr);
    ws.forward(th.data(), x.data(), n, 1, u1.data(), g1.data(), nullptr);
    CHECK(u0 == u && u1 == u && g1 == gu, "d=" << d << " forward(derivatives=0/1) differs from 2");
    // The caches hold the last chunk.
    const auto& b = ws.buffers();
    const std::size_t last0 = 16, nl = n - last0;
    bool cache_ok = b.batch_size == 8 && b.max_streams == d + 2;
    for (std::size_t p = 0; p < nl && cache_ok; ++p)
        for (int i = 0; i < d; ++i)
            cache_ok = cache_ok && b.x_input[p * d + i] == x[(last0 + p) * d + i] &&
                       b.du_dx[(p * d + i) * 2] == g1[((last0 + p) * d + i) * 2];
    CHECK(cache_ok, "d=" << d << " workspace caches do not hold the last chunk");
}

/// The loss of `in` computed here from forward() outputs (MATH.md, Loss).
LossBreakdown loss_from_forward(Workspace<double>& ws, const std::vector<double>& th,
                                const LossInputs<double>& in) {
    const int d = ws.spec().in_dim;
    LossBreakdown out;
    if (in.num_pde) {
        const std::size_t n = in.num_pde;
        std::vector<double> u(n * 2), lap(n * 2);
        ws.forward(th.data(), in.x_pde, n, 2, u.data(), nullptr, lap.data());
        double s = 0;
        for (std::size_t p = 0; p < n; ++p) {
            const double k = in.kappa ? in.kappa[p] : in.kappa_const;
            for (int c = 0; c < 2; ++c) {
                const double r = lap[p * 2 + c] + k * u[p * 2 + c] - (in.f ? in.f[p * 2 + c] : 0.0);
                s += r * r;
            }
        }
        out.mean[kPde] = s / double(n);
    }
    if (in.num_data) {
        const std::size_t n = in.num_data;
        std::vector<double> u(n * 2);
        ws.forward(th.data(), in.x_data, n, 0, u.data(), nullptr, nullptr);
        double s = 0;
        for (std::size_t k = 0; k < n * 2; ++k) s += (u[k] - in.y[k]) * (u[k] - in.y[k]);
        out.mean[kData] = s / double(n);
    }
    if (in.num_bc) {
        const std::size_t n = in.num_bc;
        std::vector<double> u(n * 2), gu(n * d * 2);
        ws.forward(th.data(), in.x_bc, n, 1, u.data(), gu.data(), nullptr);
        double s = 0;
        for (std::size_t p = 0; p < n; ++p) {
            const double ar = in.alpha_bc ? in.alpha_bc[p * 2] : in.alpha_const[0];
            const double ai = in.alpha_bc ? in.alpha_bc[p * 2 + 1] : in.alpha_const[1];
            const double ur = u[p * 2], ui = u[p * 2 + 1];
            double rho[2] = {ar * ur - ai * ui, ar * ui + ai * ur};
            for (int c = 0; c < 2; ++c) {
                for (int i = 0; i < d; ++i) rho[c] += in.normal_bc[p * d + i] * gu[(p * d + i) * 2 + c];
                rho[c] -= in.g_bc ? in.g_bc[p * 2 + c] : 0.0;
                s += rho[c] * rho[c];
            }
        }
        out.mean[kBc] = s / double(n);
    }
    out.total = in.w_pde * out.mean[kPde] + in.w_data * out.mean[kData] + in.w_bc * out.mean[kBc];
    return out;
}

void check_gradient(int d, const std::string& name, const ModelSpec& sp,
                    const std::vector<double>& th, const LossInputs<double>& in,
                    std::size_t batch) {
    Workspace<double> ws(sp, batch);
    const std::size_t P = sp.num_params();
    std::vector<double> g(P, 777.0), scratch(P);
    const LossBreakdown lb = ws.value_and_grad(th.data(), g.data(), in);
    const LossBreakdown ref = loss_from_forward(ws, th, in);
    const double el = std::abs(lb.total - ref.total) / std::max(std::abs(ref.total), 1e-300);
    const double *m = lb.mean, *r = ref.mean;
    CHECK(el < 1e-12 && std::abs(m[kPde] - r[kPde]) <= 1e-12 * (1 + r[kPde]) &&
              std::abs(m[kData] - r[kData]) <= 1e-12 * (1 + r[kData]) &&
              std::abs(m[kBc] - r[kBc]) <= 1e-12 * (1 + r[kBc]),
          "d=" << d << " " << name << ": loss (" << lb.total << "; pde " << m[kPde] << ", data "
               << m[kData] << ", bc " << m[kBc] << ") differs from the loss of forward() outputs ("
               << ref.total << "; " << r[kPde] << ", " << r[kData] << ", " << r[kBc] << ")");

    std::vector<double> fd(P), tp(th);
    for (std::size_t k = 0; k < P; ++k) {
        auto f = [&](double t) {
            tp[k] = th[k] + t;
            const double v = ws.value_and_grad(tp.data(), scratch.data(), in).total;
            tp[k] = th[k];
            return v;
        };
        fd[k] = d1(f, 1e-4);
    }
    const std::size_t nB = std::size_t(sp.in_dim) * sp.ff_dim;
    if (!in.train_fourier) {
        bool zero = true;
        for (std::size_t k = 0; k < nB; ++k) zero = zero && g[k] == 0.0;
        CHECK(zero, "d=" << d << " " << name << ": frozen B must have an exactly zero gradient");
        for (std::size_t k = 0; k < nB; ++k) fd[k] = 0.0;
    }
    const double e = rel_err(g, fd);
    std::printf("  d=%d %-34s loss %.6e  |grad - FD|/|FD| = %.2e\n", d, name.c_str(), lb.total, e);
    CHECK(e < 1e-7, "d=" << d << " " << name << ": gradient differs from finite differences by "
                         << e << " (relative, max norm)");
}

void check_gradients(int d) {
    const ModelSpec sp{d, 3, 6, 2};
    Rng rng(200 + d);
    const auto th = helmpinn_test::random_params<double>(sp, rng);
    const AllTerms<double> t(rng, d, 13, 11, 9);
    const LossInputs<double> all = t.inputs();
    const std::size_t batch = 5;  // every term takes several chunks

    check_gradient(d, "all terms, per-point kappa/alpha", sp, th, all, batch);
    LossInputs<double> one = all;
    one.num_data = one.num_bc = 0;
    check_gradient(d, "pde only", sp, th, one, batch);
    one = all;
    one.num_pde = one.num_bc = 0;
    check_gradient(d, "data only", sp, th, one, batch);
    one = all;
    one.num_pde = one.num_data = 0;
    check_gradient(d, "bc only (Robin, complex alpha)", sp, th, one, batch);

    LossInputs<double> sc = all;  // constant kappa, Sommerfeld alpha = -ik, no sources
    sc.kappa = nullptr;
    sc.kappa_const = 6.25;
    sc.f = nullptr;
    sc.alpha_bc = nullptr;
    sc.alpha_const[0] = 0.0;
    sc.alpha_const[1] = -2.5;
    sc.g_bc = nullptr;
    check_gradient(d, "all terms, scalar kappa, Sommerfeld", sp, th, sc, batch);

    LossInputs<double> fr = all;
    fr.train_fourier = false;
    check_gradient(d, "all terms, frozen B", sp, th, fr, 64);  // one chunk

    // float32 against float64 on the same (well-scaled) inputs.
    std::vector<float> thf(th.begin(), th.end());
    std::vector<float> xs[9];
    const std::vector<double>* src[9] = {&t.x_pde, &t.kappa, &t.f, &t.x_data, &t.y,
                                         &t.x_bc, &t.normal, &t.alpha, &t.g};
    for (int k = 0; k < 9; ++k) xs[k].assign(src[k]->begin(), src[k]->end());
    LossInputs<float> inf;
    inf.x_pde = xs[0].data(); inf.num_pde = all.num_pde; inf.kappa = xs[1].data(); inf.f = xs[2].data();
    inf.x_data = xs[3].data(); inf.num_data = all.num_data; inf.y = xs[4].data();
    inf.x_bc = xs[5].data(); inf.num_bc = all.num_bc; inf.normal_bc = xs[6].data();
    inf.alpha_bc = xs[7].data(); inf.g_bc = xs[8].data();
    inf.w_pde = float(all.w_pde); inf.w_data = float(all.w_data); inf.w_bc = float(all.w_bc);
    Workspace<float> wsf(sp, batch);
    Workspace<double> wsd(sp, batch);
    std::vector<float> gf(sp.num_params());
    std::vector<double> gd(sp.num_params());
    const double lf = wsf.value_and_grad(thf.data(), gf.data(), inf).total;
    const double ld = wsd.value_and_grad(th.data(), gd.data(), all).total;
    const double eg = rel_err(std::vector<double>(gf.begin(), gf.end()), gd);
    std::printf("  d=%d float32 vs float64: loss %.2e, gradient %.2e (relative)\n", d,
                std::abs(lf - ld) / ld, eg);
    CHECK(std::abs(lf - ld) / ld < 1e-4 && eg < 1e-4,
          "d=" << d << " float32 loss/gradient differ from float64: " << std::abs(lf - ld) / ld
               << ", " << eg);

    // Bitwise the same on 1 and 2 threads (fixed-order reduction).
    std::vector<double> g1(sp.num_params()), g2(sp.num_params());
    const int before = helmpinn::get_num_threads();
    helmpinn::set_num_threads(1);
    const double l1 = wsd.value_and_grad(th.data(), g1.data(), all).total;
    helmpinn::set_num_threads(2);
    const double l2 = wsd.value_and_grad(th.data(), g2.data(), all).total;
    helmpinn::set_num_threads(before);
    CHECK(l1 == l2 && g1 == g2, "d=" << d << " results differ between 1 and 2 threads");

#if defined(_OPENMP)
    // From inside the caller's own OpenMP team, one Workspace per thread and more threads than
    // the machine has: each call runs on its own thread (with its own scratch) and gives the
    // same bits.
    const int nt = 3 * omp_get_num_procs() + 1;
    std::vector<std::vector<double>> gt(nt, std::vector<double>(sp.num_params()));
    std::vector<double> lt(nt);
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; ++t) {
        Workspace<double> w(sp, batch);
        lt[t] = w.value_and_grad(th.data(), gt[t].data(), all).total;
    }
    for (int t = 0; t < nt; ++t)
        CHECK(lt[t] == l1 && gt[t] == g1,
              "d=" << d << " value_and_grad inside the caller's OpenMP thread " << t
                   << " differs from the plain call");
#endif
}

}  // namespace

int main() {
    std::printf("helmpinn %s (OpenMP=%d, threads=%d, isa=%s)\n", helmpinn::version(),
                int(helmpinn::has_openmp()), helmpinn::get_num_threads(), helmpinn::cpu_isa());
    for (int d = 1; d <= 3; ++d) {
        check_forward(d);
        check_gradients(d);
    }
    return helmpinn_test::report("test_fd");
}
