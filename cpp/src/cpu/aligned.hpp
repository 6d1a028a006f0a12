// A fixed-size, 64-byte aligned, zero-initialised array: the CPU backend's only heap memory,
// allocated when a workspace is built and never resized in a step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "../common/checked.hpp"

namespace helmpinn {
namespace cpu {

template <typename T>
class AlignedArray {
public:
    AlignedArray() = default;
    ~AlignedArray() { std::free(p_); }
    AlignedArray(const AlignedArray&) = delete;
    AlignedArray& operator=(const AlignedArray&) = delete;

    void resize(std::size_t n) {
        std::free(p_);
        p_ = nullptr;
        n_ = 0;
        if (n == 0) return;
        const std::size_t bytes =
            detail::checked_add(detail::checked_mul(n, sizeof(T), "buffer"), 63, "buffer") / 64 * 64;
        void* p = std::aligned_alloc(64, bytes);
        if (!p)
            throw detail::OutOfMemory("helmpinn: could not allocate " + detail::format_bytes(bytes));
        // Touched only once the allocation succeeded; Workspace checked the total against the
        // machine's memory before any allocation (overcommit grants more than exists).
        std::memset(p, 0, bytes);
        p_ = static_cast<T*>(p);
        n_ = n;
    }
    T* data() { return p_; }
    const T* data() const { return p_; }
    std::size_t size() const { return n_; }
    std::size_t bytes() const { return n_ * sizeof(T); }
    T& operator[](std::size_t i) { return p_[i]; }
    const T& operator[](std::size_t i) const { return p_[i]; }
    T* begin() { return p_; }
    T* end() { return p_ + n_; }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

}  // namespace cpu
}  // namespace helmpinn
