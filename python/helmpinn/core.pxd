# cython: language_level=3
# distutils: language = c++
"""Cython declarations of helmpinn's C++ API (cpp/include/helmpinn/*.hpp).

    from helmpinn.core cimport ModelSpec, Workspace, LossInputs, LossBreakdown, adam_step

lets Cython code call the C++ core directly, without the Python bindings in between. The
extension must be compiled as C++17 against the headers that ship with the package
(helmpinn.get_include()) and link the static library libhelmpinn.a (helmpinn.get_library_dir())
with OpenMP (-fopenmp) when helmpinn.has_openmp() is true. See the README, "Use from Cython".

Every function is declared nogil: the core never touches Python. Functions that can fail are
declared `except +`, so a std::invalid_argument arrives as ValueError and a std::runtime_error
as RuntimeError. Pointers are host memory for Device.cpu.

The CUDA runtime of runtime.hpp (current_device, DeviceScope, pointer_info, device_for_pointer,
DeviceBuffer, copy_to_device, copy_to_host, stream_wait) is declared in every build: in a build
without CUDA each of them raises RuntimeError("<function>: helmpinn was built without CUDA
support"), and with CUDA but no usable device RuntimeError with the CUDA runtime's error. A
stream is a void* (a cudaStream_t; NULL = the legacy default stream). DeviceScope has no
default constructor and DeviceBuffer cannot be copied: make them with `new` (and `del` them),
e.g. ``cdef DeviceBuffer* buf = new DeviceBuffer(nbytes, 0)``; an empty DeviceBuffer
(``cdef DeviceBuffer b``) and a default PointerInfo need no GPU.
"""
from libc.stdint cimport int64_t
from libcpp cimport bool
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "helmpinn/helmpinn.hpp" namespace "helmpinn::terms" nogil:
    # the loss terms in the core's table order (workspace.hpp's terms::Term): LossBreakdown.mean's
    # indices
    const int kPde
    const int kData
    const int kBc
    const int kNumTerms


cdef extern from "helmpinn/helmpinn.hpp" namespace "helmpinn" nogil:

    # ---- runtime.hpp -----------------------------------------------------------------------
    const char* version()
    bool has_openmp()
    int get_num_threads()
    void set_num_threads(int n) except +
    bool has_cuda()
    int cuda_device_count()
    string cuda_device_error()
    const char* cpu_isa()
    const char* cpu_kernel_sets()
    # task(i, context) for every i in [0, n) on the engine's threads; task must not raise
    void parallel_tasks(int64_t n, void (*task)(int64_t, void*) noexcept nogil, void* context) except +

    # the CUDA runtime (see above: RuntimeError without CUDA support or without the device)
    int current_device() except +

    cdef cppclass DeviceScope:
        # makes `device` current until it is deleted, then restores the previous one
        DeviceScope(int device) except +
        int previous() const

    cdef enum class MemoryKind:
        host
        pinned_host
        device
        managed

    cdef cppclass PointerInfo:
        MemoryKind kind    # MemoryKind.host by default
        int device         # the owning device; -1 for host memory
        bool on_device() const

    PointerInfo pointer_info(const void* ptr) except +
    int device_for_pointer(const void* ptr) except +

    cdef cppclass DeviceBuffer:
        DeviceBuffer()                                # empty: data() == NULL, no GPU needed
        DeviceBuffer(size_t bytes, int device) except +
        void* data() const
        size_t bytes() const
        int device() const
        bool empty() const
        void reset()                                  # frees the memory now

    void copy_to_device(void* dst, const void* src, size_t bytes, int device) except +
    void copy_to_host(void* dst, const void* src, size_t bytes, int device) except +
    void stream_wait(void* consumer, void* producer, int device) except +

    # ---- spec.hpp: the model's shape and the flat parameter layout -------------------------
    cdef cppclass ParamInfo:
        string name
        vector[size_t] shape
        size_t offset
        size_t size

    cdef cppclass ModelSpec:
        int in_dim
        int ff_dim
        int hidden_dim
        int num_hidden_layers
        ModelSpec()
        void validate() except +
        int num_layers()
        int layer_in(int l)
        int layer_out(int l)
        size_t offset_B()
        size_t offset_W(int l)
        size_t offset_b(int l)
        size_t num_params()
        int max_width()
        vector[ParamInfo] layout() except +
        double flops_per_point(int streams)
        bool operator==(const ModelSpec&)
        bool operator!=(const ModelSpec&)

    # ---- workspace.hpp ---------------------------------------------------------------------
    cdef enum class Device:
        cpu
        cuda

    cdef cppclass LossInputs[T]:
        LossInputs()
        const T* x_pde
        size_t num_pde
        const T* kappa
        T kappa_const
        const T* f
        bool pde_operator
        const T* a_pde
        T a_const[2]
        const T* a_lap
        const T* b_pde
        T b_const[2]
        const T* c_pde
        T c_const[2]
        const T* x_data
        size_t num_data
        const T* y
        const T* x_bc
        size_t num_bc
        const T* normal_bc
        const T* alpha_bc
        T alpha_const[2]
        const T* g_bc
        T w_pde
        T w_data
        T w_bc
        size_t count_pde
        size_t count_data
        size_t count_bc
        bool train_fourier
        bool check_finite

    cdef cppclass LossBreakdown:
        double total
        double mean[3]     # each term's unweighted mean, indexed by kPde, kData, kBc

    cdef cppclass LossOutputs[T]:
        LossOutputs()
        LossBreakdown loss
        T* residuals
        T* grad_kappa

    cdef cppclass WorkspaceBuffers[T]:
        int max_streams
        size_t batch_size
        T* x_input
        T* features
        T* z[16]   # helmpinn::max_layers
        T* h[16]
        T* du_dx
        T* d2u_dx2
        T* grad

    cdef cppclass Workspace[T]:
        # Allocates every buffer once; throws ValueError on a bad spec or batch_size.
        Workspace(const ModelSpec& spec, size_t batch_size) except +
        Workspace(const ModelSpec& spec, size_t batch_size, Device device) except +
        Workspace(const ModelSpec& spec, size_t batch_size, Device device, int device_id) except +
        const ModelSpec& spec()
        size_t batch_size()
        Device device()
        int device_id()
        size_t memory_bytes()
        const WorkspaceBuffers[T]& buffers()
        void forward(const T* params, const T* x, size_t n, int derivatives, T* u, T* grad_u,
                     T* lap_u) except +
        void forward(const T* params, const T* x, size_t n, int derivatives, T* u, T* grad_u,
                     T* lap_u, void* stream) except +
        LossBreakdown value_and_grad(const T* params, T* grad, const LossInputs[T]& inputs) except +
        LossBreakdown value_and_grad(const T* params, T* grad, const LossInputs[T]& inputs,
                                     void* stream) except +
        void value_and_grad(const T* params, T* grad, const LossInputs[T]& inputs,
                            LossOutputs[T]& outputs) except +
        # The residual level (R = num_residuals(inputs) rows; see workspace.hpp)
        size_t num_residuals(const LossInputs[T]& inputs)
        void residuals(const T* params, const LossInputs[T]& inputs, T* r) except +
        void jacobian(const T* params, const LossInputs[T]& inputs, size_t row_begin,
                      size_t row_end, T* J) except +
        void jvp(const T* params, const T* v, const LossInputs[T]& inputs, T* Jv) except +
        void vjp(const T* params, const T* w, const LossInputs[T]& inputs, T* JTw) except +
        void zero_grad() except +
        void zero_grad(void* stream) except +

    # ---- primitives.hpp: the seed's backward primitives and Adam ---------------------------
    void mse_backward[T](const T* pred, const T* target, size_t n, size_t cols, T* out) except +
    void layer_backward[T](const T* dL_dh, const T* h, const T* h_prev, const T* W, size_t n,
                           size_t out_dim, size_t in_dim, bool apply_tanh_grad, T* dW, T* db,
                           T* dh_prev) except +
    void fourier_backward[T](const T* dL_dphi, const T* x, const T* B, size_t n, size_t d,
                             size_t m, T* dB) except +
    void adam_step[T](T* params, const T* grad, T* m, T* v, size_t n, long step, double lr,
                      double beta1, double beta2, double eps, double weight_decay) except +
    # the same with the memory's Device (Device.cuda: device pointers, `stream` a cudaStream_t)
    void mse_backward[T](const T* pred, const T* target, size_t n, size_t cols, T* out,
                         Device device, void* stream) except +
    void layer_backward[T](const T* dL_dh, const T* h, const T* h_prev, const T* W, size_t n,
                           size_t out_dim, size_t in_dim, bool apply_tanh_grad, T* dW, T* db,
                           T* dh_prev, Device device, void* stream) except +
    void fourier_backward[T](const T* dL_dphi, const T* x, const T* B, size_t n, size_t d,
                             size_t m, T* dB, Device device, void* stream) except +
    void adam_step[T](T* params, const T* grad, T* m, T* v, size_t n, long step, double lr,
                      double beta1, double beta2, double eps, double weight_decay,
                      Device device, void* stream) except +
