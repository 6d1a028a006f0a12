// A fixed-size, 64-byte aligned, zero-initialised array: the CPU backend's only heap memory,
// allocated when a workspace is built and never resized in a step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

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
        n_ = n;
        if (n == 0) return;
        const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
        p_ = static_cast<T*>(std::aligned_alloc(64, bytes));
        if (!p_) throw std::bad_alloc();
        std::memset(static_cast<void*>(p_), 0, bytes);
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
