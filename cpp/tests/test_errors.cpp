// Errors are exceptions with messages that name the argument, never aborts or partial writes:
// std::invalid_argument for bad specs, sizes, options and null pointers (checked before any
// work: the output buffers are left untouched), std::runtime_error from the CUDA stub of a
// build without CUDA (the backend, the device primitives and the device runtime API).
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "../src/common/loss_terms.hpp"  // the loss-term table (private to the core)
#include "check.hpp"

namespace {

using helmpinn::copy_to_device;
using helmpinn::copy_to_host;
using helmpinn::current_device;
using helmpinn::Device;
using helmpinn::device_for_pointer;
using helmpinn::DeviceBuffer;
using helmpinn::DeviceScope;
using helmpinn::pointer_info;
using helmpinn::stream_wait;
using helmpinn::LossInputs;
using helmpinn::ModelSpec;
using helmpinn::Workspace;
using helmpinn_test::AllTerms;
using helmpinn_test::Rng;

/// True when `word` occurs in `text` as a whole word (not inside an identifier), so that a
/// one-letter argument name such as "m" is not found inside "must".
bool names(const std::string& text, const std::string& word) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
        const bool left = at == 0 || !ident(text[at - 1]);
        const std::size_t end = at + word.size();
        const bool right = end >= text.size() || !ident(text[end]);
        if (left && right) return true;
    }
    return false;
}

/// fn() must throw E (or a subclass) whose what() names `needle` as a whole word.
template <typename E, typename F>
void expect_throw(const std::string& label, const std::string& needle, F&& fn) {
    try {
        fn();
    } catch (const E& e) {
        const std::string what = e.what();
        CHECK(names(what, needle),
              label << ": message \"" << what << "\" does not name \"" << needle << "\"");
        std::printf("  ok  %-44s -> \"%s\"\n", label.c_str(), what.c_str());
        return;
    } catch (const std::exception& e) {
        CHECK(false, label << ": threw the wrong exception type: " << e.what());
        return;
    } catch (...) {
        CHECK(false, label << ": threw a non-std exception");
        return;
    }
    CHECK(false, label << ": did not throw (expected a message naming \"" << needle << "\")");
}

void specs() {
    std::printf("ModelSpec and Workspace construction\n");
    struct Bad {
        ModelSpec spec;
        const char* name;
    } bad[] = {{{0, 4, 8, 2}, "in_dim"},          {{4, 4, 8, 2}, "in_dim"},
               {{2, 0, 8, 2}, "ff_dim"},          {{2, -3, 8, 2}, "ff_dim"},
               {{2, 4, 0, 2}, "hidden_dim"},      {{2, 4, 8, 0}, "num_hidden_layers"},
               {{2, 4, 8, 16}, "num_hidden_layers"}};
    for (const auto& b : bad) {
        const std::string s = "{" + std::to_string(b.spec.in_dim) + "," +
                              std::to_string(b.spec.ff_dim) + "," +
                              std::to_string(b.spec.hidden_dim) + "," +
                              std::to_string(b.spec.num_hidden_layers) + "}";
        expect_throw<std::invalid_argument>("ModelSpec" + s + ".validate()", b.name,
                                            [&] { b.spec.validate(); });
        expect_throw<std::invalid_argument>("Workspace<double>(ModelSpec" + s + ")", b.name,
                                            [&] { Workspace<double> ws(b.spec, 16); });
        expect_throw<std::invalid_argument>("Workspace<float>(ModelSpec" + s + ")", b.name,
                                            [&] { Workspace<float> ws(b.spec, 16); });
    }
    expect_throw<std::invalid_argument>("Workspace(batch_size=0)", "batch_size",
                                        [] { Workspace<double> ws(ModelSpec{1, 2, 3, 1}, 0); });
    expect_throw<std::invalid_argument>("set_num_threads(0)", "n",
                                        [] { helmpinn::set_num_threads(0); });
    expect_throw<std::invalid_argument>("parallel_tasks(n=-1)", "n", [] {
        helmpinn::parallel_tasks(-1, [](std::int64_t, void*) {}, nullptr);
    });
    expect_throw<std::invalid_argument>("parallel_tasks(task=null)", "task",
                                        [] { helmpinn::parallel_tasks(3, nullptr, nullptr); });
}

template <typename T>
void workspace_calls(const char* tname) {
    std::printf("Workspace<%s> calls\n", tname);
    const ModelSpec sp{2, 3, 5, 2};
    Rng rng(5);
    const auto th = helmpinn_test::random_params<T>(sp, rng);
    Workspace<T> ws(sp, 8);
    const std::size_t n = 6, P = sp.num_params();
    const auto x = rng.uniform_vec<T>(n * 2, -1, 1);
    std::vector<T> u(n * 2, T(777));
    const std::string pre = std::string(tname) + " ";

    expect_throw<std::invalid_argument>(pre + "forward(params=null)", "params", [&] {
        ws.forward(nullptr, x.data(), n, 0, u.data(), nullptr, nullptr);
    });
    expect_throw<std::invalid_argument>(pre + "forward(x=null, n=6)", "x", [&] {
        ws.forward(th.data(), nullptr, n, 0, u.data(), nullptr, nullptr);
    });
    for (int der : {-1, 3})
        expect_throw<std::invalid_argument>(pre + "forward(derivatives=" + std::to_string(der) + ")",
                                            "derivatives", [&] {
                                                ws.forward(th.data(), x.data(), n, der, u.data(),
                                                           nullptr, nullptr);
                                            });
    bool untouched = true;
    for (T v : u) untouched = untouched && v == T(777);
    CHECK(untouched, pre << "forward wrote its output before raising");

    const AllTerms<T> t(rng, 2, 7, 5, 4);
    const LossInputs<T> good = t.inputs();
    std::vector<T> g(P, T(777));
    auto vg = [&](const LossInputs<T>& in) { ws.value_and_grad(th.data(), g.data(), in); };
    struct Case {
        const char* label;
        const char* needle;
        void (*edit)(LossInputs<T>&);
    };
    const T nan = std::numeric_limits<T>::quiet_NaN();
    static std::vector<T> poisoned;  // arrays with one NaN, for check_finite
    const Case cases[] = {
        {"x_pde=null, num_pde>0", "x_pde", [](LossInputs<T>& in) { in.x_pde = nullptr; }},
        {"x_data=null, num_data>0", "x_data", [](LossInputs<T>& in) { in.x_data = nullptr; }},
        {"y=null with x_data", "y", [](LossInputs<T>& in) { in.y = nullptr; }},
        {"x_bc=null, num_bc>0", "x_bc", [](LossInputs<T>& in) { in.x_bc = nullptr; }},
        {"normal_bc=null with x_bc", "n_bc", [](LossInputs<T>& in) { in.normal_bc = nullptr; }},
        // the operator's a: a_lap only with pde_operator, never with a_pde or a changed a_const
        // (the checks come before any array is read: x_pde stands in for the coefficients)
        {"a_lap without pde_operator", "pde_operator is false",
         [](LossInputs<T>& in) { in.a_lap = in.x_pde; }},
        {"a_lap with a_pde", "a_pde (an a per axis) or a_lap (one a), not both",
         [](LossInputs<T>& in) { in.pde_operator = true, in.a_pde = in.a_lap = in.x_pde; }},
        {"a_lap with a_const", "a_const is not read with a_lap",
         [](LossInputs<T>& in) { in.pde_operator = true, in.a_lap = in.x_pde, in.a_const[1] = T(1); }},
    };
    for (const auto& c : cases) {
        LossInputs<T> in = good;
        c.edit(in);
        expect_throw<std::invalid_argument>(pre + "value_and_grad(" + c.label + ")", c.needle,
                                            [&] { vg(in); });
    }
    expect_throw<std::invalid_argument>(pre + "value_and_grad(params=null)", "params",
                                        [&] { ws.value_and_grad(nullptr, g.data(), good); });
    expect_throw<std::invalid_argument>(pre + "value_and_grad(grad=null)", "grad",
                                        [&] { ws.value_and_grad(th.data(), nullptr, good); });

    // check_finite names the array holding a NaN or Inf.
    struct Poison {
        const char* name;
        std::vector<T> AllTerms<T>::*member;
        const T* LossInputs<T>::*field;
    };
    const Poison poison[] = {
        {"x_pde", &AllTerms<T>::x_pde, &LossInputs<T>::x_pde},
        {"kappa", &AllTerms<T>::kappa, &LossInputs<T>::kappa},
        {"f", &AllTerms<T>::f, &LossInputs<T>::f},
        {"x_data", &AllTerms<T>::x_data, &LossInputs<T>::x_data},
        {"y", &AllTerms<T>::y, &LossInputs<T>::y},
        {"x_bc", &AllTerms<T>::x_bc, &LossInputs<T>::x_bc},
        {"n_bc", &AllTerms<T>::normal, &LossInputs<T>::normal_bc},
        {"alpha_bc", &AllTerms<T>::alpha, &LossInputs<T>::alpha_bc},
        {"g_bc", &AllTerms<T>::g, &LossInputs<T>::g_bc},
    };
    for (const auto& p : poison) {
        poisoned = t.*(p.member);
        poisoned[poisoned.size() / 2] = nan;
        LossInputs<T> in = good;
        in.check_finite = true;
        in.*(p.field) = poisoned.data();
        expect_throw<std::invalid_argument>(pre + "value_and_grad(check_finite, NaN in " +
                                                p.name + ")",
                                            p.name, [&] { vg(in); });
    }
    {
        std::vector<T> bad_theta(th);
        bad_theta[P - 1] = std::numeric_limits<T>::infinity();
        LossInputs<T> in = good;
        in.check_finite = true;
        expect_throw<std::invalid_argument>(pre + "value_and_grad(check_finite, Inf in params)",
                                            "params", [&] {
                                                ws.value_and_grad(bad_theta.data(), g.data(), in);
                                            });
        in.kappa = nullptr;
        in.kappa_const = nan;
        expect_throw<std::invalid_argument>(pre + "value_and_grad(check_finite, kappa_const=NaN)",
                                            "kappa", [&] { vg(in); });
        // jvp's v and vjp's w are scanned too (named v, w)
        LossInputs<T> ok = good;
        ok.check_finite = true;
        const std::size_t R = ws.num_residuals(ok);
        std::vector<T> v(P, T(0)), w(R, T(0)), out(R > P ? R : P);
        v[1] = nan;
        w[2] = nan;
        expect_throw<std::invalid_argument>(pre + "jvp(check_finite, NaN in v)", "v contains NaN",
                                            [&] { ws.jvp(th.data(), v.data(), ok, out.data()); });
        expect_throw<std::invalid_argument>(pre + "vjp(check_finite, NaN in w)", "w contains NaN",
                                            [&] { ws.vjp(th.data(), w.data(), ok, out.data()); });
    }
    untouched = true;
    for (T v : g) untouched = untouched && v == T(777);
    CHECK(untouched, pre << "value_and_grad wrote grad before raising");

    // With valid inputs the same workspace still runs.
    const double loss = ws.value_and_grad(th.data(), g.data(), good).total;
    CHECK(std::isfinite(loss) && loss > 0, pre << "valid value_and_grad gave " << loss);
}

void primitives() {
    std::printf("primitives\n");
    std::vector<double> a(8, 1.0), b(8, 1.0), c(8, 0.0), d(8, 0.0);
    expect_throw<std::invalid_argument>("adam_step(step=0)", "step", [&] {
        helmpinn::adam_step(a.data(), b.data(), c.data(), d.data(), 8, 0, 1e-3, 0.9, 0.999, 1e-8, 0);
    });
    expect_throw<std::invalid_argument>("adam_step(params=null)", "params", [&] {
        helmpinn::adam_step<double>(nullptr, b.data(), c.data(), d.data(), 8, 1, 1e-3, 0.9, 0.999,
                                    1e-8, 0);
    });
    expect_throw<std::invalid_argument>("adam_step(grad=null)", "grad", [&] {
        helmpinn::adam_step<double>(a.data(), nullptr, c.data(), d.data(), 8, 1, 1e-3, 0.9, 0.999,
                                    1e-8, 0);
    });
    expect_throw<std::invalid_argument>("adam_step(m=null)", "m", [&] {
        helmpinn::adam_step<double>(a.data(), b.data(), nullptr, d.data(), 8, 1, 1e-3, 0.9, 0.999,
                                    1e-8, 0);
    });
    expect_throw<std::invalid_argument>("adam_step(v=null)", "v", [&] {
        helmpinn::adam_step<double>(a.data(), b.data(), c.data(), nullptr, 8, 1, 1e-3, 0.9, 0.999,
                                    1e-8, 0);
    });
    expect_throw<std::invalid_argument>("mse_backward(target=null)", "target", [&] {
        helmpinn::mse_backward<double>(a.data(), nullptr, 4, 2, c.data());
    });
    expect_throw<std::invalid_argument>("layer_backward(W=null)", "W", [&] {
        helmpinn::layer_backward<double>(a.data(), a.data(), a.data(), nullptr, 2, 2, 2, true,
                                         c.data(), d.data(), nullptr);
    });
    expect_throw<std::invalid_argument>("layer_backward(h=null, tanh)", "h", [&] {
        helmpinn::layer_backward<double>(a.data(), nullptr, a.data(), a.data(), 2, 2, 2, true,
                                         c.data(), d.data(), nullptr);
    });
    expect_throw<std::invalid_argument>("fourier_backward(dB=null)", "dB", [&] {
        helmpinn::fourier_backward<double>(a.data(), a.data(), a.data(), 2, 1, 2, nullptr);
    });
    // The Device::cpu form is the host form.
    expect_throw<std::invalid_argument>("mse_backward(out=null, Device::cpu)", "out", [&] {
        helmpinn::mse_backward<double>(a.data(), b.data(), 4, 2, nullptr, Device::cpu);
    });
    helmpinn::mse_backward(a.data(), c.data(), 4, 2, d.data(), Device::cpu);
    CHECK(d[0] == 0.5 && d[7] == 0.5, "mse_backward(Device::cpu) gave " << d[0] << ", " << d[7]);
}

// Sizes that overflow (issue 16): refused with a message, never wrapped into a small buffer.
void hostile_sizes() {
    std::printf("overflowing sizes and hyper-parameters\n");
    const int big = std::numeric_limits<int>::max();
    expect_throw<std::invalid_argument>("ModelSpec{1, 2^31-2, 2^31-100, 1}.validate()", "ff_dim",
                                        [&] { ModelSpec{1, big - 1, big - 99, 1}.validate(); });
    expect_throw<std::invalid_argument>("ModelSpec{1, 2^31-2, ...}.num_params()", "ff_dim",
                                        [&] { (void)ModelSpec{1, big - 1, big - 99, 1}.num_params(); });
    expect_throw<std::invalid_argument>("ModelSpec{1, 2^30-1, 2^31-100, 1}.validate()", "large",
                                        [&] { ModelSpec{1, (1 << 30) - 1, big - 99, 1}.validate(); });
    expect_throw<std::invalid_argument>("ModelSpec{3, 32, 10^9, 3}.validate()", "large",
                                        [&] { ModelSpec{3, 32, 1000000000, 3}.validate(); });
    // 15 layers of 2e9 x 2e9 weights: 6e19 parameters, beyond std::size_t
    expect_throw<std::invalid_argument>("ModelSpec{3, 32, 2*10^9, 15}.num_params()", "large",
                                        [&] { (void)ModelSpec{3, 32, 2000000000, 15}.num_params(); });
    // batch_size * (bytes per point) overflows std::size_t: bad_alloc with a message.
    expect_throw<std::bad_alloc>("Workspace<float>(batch_size=2^62)", "overflow", [] {
        Workspace<float> ws(ModelSpec{2, 8, 16, 2}, std::size_t(1) << 62);
    });
    expect_throw<std::bad_alloc>("Workspace<double>(batch_size=SIZE_MAX)", "overflow", [] {
        Workspace<double> ws(ModelSpec{2, 8, 16, 2}, std::numeric_limits<std::size_t>::max());
    });
    // Fits in std::size_t, but not in any machine: refused before allocating, with the bytes.
    expect_throw<std::bad_alloc>("Workspace<float>(ModelSpec{3, 32, 10^8, 3})", "bytes", [] {
        Workspace<float> ws(ModelSpec{3, 32, 100000000, 3}, 1);
    });
    expect_throw<std::bad_alloc>("Workspace<double>(batch_size=2^44)", "memory", [] {
        Workspace<double> ws(ModelSpec{2, 8, 16, 2}, std::size_t(1) << 44);
    });
    expect_throw<std::bad_alloc>("mse_backward(n * cols overflows)", "mse_backward", [] {
        double a = 0;
        helmpinn::mse_backward<double>(&a, &a, std::size_t(1) << 40, std::size_t(1) << 40, &a);
    });

    // Adam hyper-parameters that would turn every parameter into NaN or Inf: refused before
    // touching the buffers.
    const double nan = std::numeric_limits<double>::quiet_NaN(),
                 inf = std::numeric_limits<double>::infinity();
    struct BadAdam {
        double lr, b1, b2, eps, wd;
        const char* name;
    } bad[] = {{1e-3, 0.9, 0.999, 0.0, 0, "eps"},     {1e-3, 0.9, 0.999, -1e-8, 0, "eps"},
               {1e-3, 0.9, 0.999, nan, 0, "eps"},     {1e-3, 1.0, 0.999, 1e-8, 0, "beta1"},
               {1e-3, 0.9, 1.0, 1e-8, 0, "beta2"},    {1e-3, nan, 0.999, 1e-8, 0, "beta1"},
               {1e-3, 0.9, nan, 1e-8, 0, "beta2"},    {1e-3, -0.1, 0.999, 1e-8, 0, "beta1"},
               {inf, 0.9, 0.999, 1e-8, 0, "lr"},      {nan, 0.9, 0.999, 1e-8, 0, "lr"},
               {-1e-3, 0.9, 0.999, 1e-8, 0, "lr"},    {1e-3, 0.9, 0.999, 1e-8, nan, "weight_decay"},
               {1e-3, 0.9, 0.999, 1e-8, inf, "weight_decay"}};
    for (const auto& b : bad) {
        std::vector<double> p(4, 1.0), g(4, 0.0), m(4, 0.0), v(4, 0.0);
        char label[160];
        std::snprintf(label, sizeof label, "adam_step(lr=%g, b1=%g, b2=%g, eps=%g, wd=%g)", b.lr,
                      b.b1, b.b2, b.eps, b.wd);
        expect_throw<std::invalid_argument>(label, b.name, [&] {
            helmpinn::adam_step(p.data(), g.data(), m.data(), v.data(), 4, 1, b.lr, b.b1, b.b2,
                                b.eps, b.wd);
        });
        CHECK(p[0] == 1.0 && m[0] == 0.0 && v[0] == 0.0, label << ": touched the buffers");
    }
}

void cuda_stub() {
    const int devices = helmpinn::cuda_device_count();
    std::printf("CUDA (has_cuda=%d, devices=%d)\n", int(helmpinn::has_cuda()), devices);
    if (!helmpinn::has_cuda()) {  // the stub linked in a build without CUDA
        CHECK(devices == 0, "a build without CUDA reports " << devices << " CUDA devices");
        expect_throw<std::runtime_error>("Workspace<float>(device=cuda)", "without CUDA", [] {
            Workspace<float> ws(ModelSpec{1, 2, 3, 1}, 8, Device::cuda);
        });
        expect_throw<std::runtime_error>("Workspace<double>(device=cuda)", "without CUDA", [] {
            Workspace<double> ws(ModelSpec{1, 2, 3, 1}, 8, Device::cuda, 0);
        });
        // The seed primitives' Device::cuda forms, too.
        std::vector<float> a(16, 1.0f);
        float* p = a.data();
        expect_throw<std::runtime_error>("mse_backward(Device::cuda)", "without CUDA", [&] {
            helmpinn::mse_backward(p, p, 2, 2, p + 4, Device::cuda);
        });
        expect_throw<std::runtime_error>("layer_backward(Device::cuda)", "without CUDA", [&] {
            helmpinn::layer_backward<float>(p, p, p, p, 2, 2, 2, true, p + 8, p + 12, nullptr,
                                            Device::cuda, nullptr);
        });
        expect_throw<std::runtime_error>("fourier_backward(Device::cuda)", "without CUDA", [&] {
            helmpinn::fourier_backward(p, p, p, 2, 1, 2, p + 8, Device::cuda);
        });
        expect_throw<std::runtime_error>("adam_step(Device::cuda)", "without CUDA", [&] {
            helmpinn::adam_step(p, p + 4, p + 8, p + 12, 4, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0,
                                Device::cuda);
        });
        // The device runtime of helmpinn/runtime.hpp: every call names itself and the reason.
        expect_throw<std::runtime_error>("current_device()", "current_device: helmpinn was built "
                                         "without CUDA support", [] { (void)current_device(); });
        expect_throw<std::runtime_error>("DeviceScope(0)", "DeviceScope: helmpinn was built "
                                         "without CUDA support", [] { DeviceScope s(0); });
        expect_throw<std::runtime_error>("DeviceBuffer(64, 0)", "DeviceBuffer: helmpinn was built "
                                         "without CUDA support", [] { DeviceBuffer b(64, 0); });
        expect_throw<std::runtime_error>("pointer_info(host)", "pointer_info: helmpinn was built "
                                         "without CUDA support", [&] { (void)pointer_info(p); });
        expect_throw<std::runtime_error>("device_for_pointer(host)", "device_for_pointer: helmpinn "
                                         "was built without CUDA support",
                                         [&] { (void)device_for_pointer(p); });
        expect_throw<std::runtime_error>("copy_to_device", "copy_to_device: helmpinn was built "
                                         "without CUDA support",
                                         [&] { copy_to_device(p, p + 4, 4, 0); });
        expect_throw<std::runtime_error>("copy_to_host", "copy_to_host: helmpinn was built "
                                         "without CUDA support",
                                         [&] { copy_to_host(p, p + 4, 4, 0); });
        expect_throw<std::runtime_error>("stream_wait", "stream_wait: helmpinn was built "
                                         "without CUDA support",
                                         [] { stream_wait(nullptr, nullptr, 0); });
        const DeviceBuffer empty;  // an empty buffer needs no CUDA
        CHECK(empty.empty() && empty.bytes() == 0 && empty.data() == nullptr,
              "a default DeviceBuffer is not empty");
        return;
    }
    // A CUDA build: a device that does not exist is a runtime_error naming the device, too.
    expect_throw<std::runtime_error>("Workspace<float>(device=cuda, id=devices)", "device", [&] {
        Workspace<float> ws(ModelSpec{1, 2, 3, 1}, 8, Device::cuda, devices);
    });
    if (devices == 0) {
        expect_throw<std::runtime_error>("Workspace<double>(device=cuda) without a GPU", "device",
                                         [] {
                                             Workspace<double> ws(ModelSpec{1, 2, 3, 1}, 8,
                                                                  Device::cuda);
                                         });
        std::vector<float> a(16, 1.0f);
        expect_throw<std::runtime_error>("mse_backward(Device::cuda) without a GPU", "mse_backward",
                                         [&] {
                                             helmpinn::mse_backward(a.data(), a.data(), 2, 2,
                                                                    a.data() + 4, Device::cuda);
                                         });
        // The device runtime without a GPU: errors from the CUDA runtime, never an abort.
        expect_throw<std::runtime_error>("DeviceScope(0) without a GPU", "device 0",
                                         [] { DeviceScope s(0); });
        expect_throw<std::runtime_error>("DeviceBuffer(64, 0) without a GPU", "helmpinn CUDA",
                                         [] { DeviceBuffer b(64, 0); });
        std::printf("  note: no CUDA device here; the CUDA backend itself is not exercised\n");
    }
}

// The loss-term table: each term's arrays are one run, its points first (the binding and the
// checks rely on it), at most kMaxTermArrays; an entry outside the table is an error, never the
// Robin term.
void term_table() {
    namespace terms = helmpinn::terms;
    const auto* arrays = terms::array_table<double>();
    int previous = -1;
    for (int a = 0; a < terms::num_arrays<double>(); ++a) {
        const int t = arrays[a].term;
        CHECK(t == previous || t == previous + 1, "array " << arrays[a].name << " out of order");
        if (t != previous)
            CHECK(arrays[a].array == terms::term_table<double>()[t].x &&
                      arrays[a].extent == terms::Extent::d && arrays[a].required,
                  "array " << arrays[a].name << " should be term " << t << "'s points");
        previous = t;
    }
    CHECK(previous == terms::kNumTerms - 1, "the array table covers " << previous + 1 << " terms");
    LossInputs<double> in;
    for (int t = 0; t < terms::kNumTerms; ++t) {
        terms::TermArray<double> out[terms::kMaxTermArrays];
        CHECK(terms::term_arrays(in, t, 2, out) <= terms::kMaxTermArrays, "term " << t);
    }
    expect_throw<std::logic_error>("with_term(99)", "out of range",
                                   [] { terms::with_term(99, [](auto) {}); });
}

}  // namespace

int main() {
    term_table();
    specs();
    workspace_calls<float>("float");
    workspace_calls<double>("double");
    primitives();
    hostile_sizes();
    cuda_stub();
    return helmpinn_test::report("test_errors");
}
