// Overflow-checked size arithmetic and the host-memory budget: the one place where the core
// multiplies sizes that a user chose (model widths, batch sizes, array lengths).
//
// checked_mul / checked_add throw SizeOverflow (a std::bad_alloc carrying a message: a size
// that does not fit in std::size_t cannot be allocated either) naming what was being sized.
// The CPU backend's buffer sizes are computed with them (cpu/buffers.cpp); the CUDA backend
// sizes its buffers with plain arithmetic once Workspace has checked the same products here
// (workspace.cpp, workspace_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <utility>

namespace helmpinn {
namespace detail {

/// std::bad_alloc with a message: pybind11 turns it into MemoryError(what()).
class OutOfMemory : public std::bad_alloc {
public:
    explicit OutOfMemory(std::string msg) : msg_(std::move(msg)) {}
    const char* what() const noexcept override { return msg_.c_str(); }

private:
    std::string msg_;
};

[[noreturn]] inline void size_overflow(const char* what) {
    throw OutOfMemory(std::string(what) + ": the sizes asked for overflow (more than 2^" +
                      std::to_string(std::numeric_limits<std::size_t>::digits) +
                      " elements or bytes), more memory than any machine has");
}

/// r = a * b; true when the product does not fit in std::size_t (r is then unspecified).
inline bool mul_overflows(std::size_t a, std::size_t b, std::size_t& r) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_mul_overflow(a, b, &r);
#else
    r = a * b;
    return a != 0 && b > std::numeric_limits<std::size_t>::max() / a;
#endif
}

/// r = a + b; true when the sum does not fit in std::size_t.
inline bool add_overflows(std::size_t a, std::size_t b, std::size_t& r) {
    r = a + b;
    return b > std::numeric_limits<std::size_t>::max() - a;
}

/// a * b, or OutOfMemory naming `what` when the product does not fit in std::size_t.
inline std::size_t checked_mul(std::size_t a, std::size_t b, const char* what) {
    std::size_t r;
    if (mul_overflows(a, b, r)) size_overflow(what);
    return r;
}

/// a * b * c with the same check.
inline std::size_t checked_mul(std::size_t a, std::size_t b, std::size_t c, const char* what) {
    return checked_mul(checked_mul(a, b, what), c, what);
}

/// a + b, or OutOfMemory naming `what`.
inline std::size_t checked_add(std::size_t a, std::size_t b, const char* what) {
    std::size_t r;
    if (add_overflows(a, b, r)) size_overflow(what);
    return r;
}

/// Bytes of host memory a single process may hope to use: the machine's physical memory
/// (sysconf), lowered to a cgroup's memory limit where one is set (Linux containers).
/// 0 when unknown. Defined in workspace.cpp.
std::size_t host_memory_limit();

/// Human-readable byte count: "24.0 GB (24000000000 bytes)".
std::string format_bytes(std::size_t bytes);

}  // namespace detail
}  // namespace helmpinn
