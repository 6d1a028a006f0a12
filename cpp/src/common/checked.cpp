// The host-memory budget and byte formatting of checked.hpp.
#include "checked.hpp"

#include <cstdio>
#include <fstream>
#include <string>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace helmpinn {
namespace detail {

namespace {

// The first number in `path` (a cgroup limit file), or 0 when absent or "max".
std::size_t read_limit(const char* path) {
    std::ifstream in(path);
    unsigned long long v = 0;
    if (in >> v) return std::size_t(v);
    return 0;
}

}  // namespace

std::size_t host_memory_limit() {
    std::size_t limit = 0;
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) {
        std::size_t r;
        limit = mul_overflows(std::size_t(pages), std::size_t(page), r) ? 0 : r;
    }
#endif
#if defined(__linux__)
    // A container's memory limit (cgroup v2, then v1); "no limit" reads as "max" or 2^63.
    for (const char* path : {"/sys/fs/cgroup/memory.max",
                             "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
        const std::size_t c = read_limit(path);
        if (c > 0 && (limit == 0 || c < limit)) limit = c;
    }
#endif
    return limit;
}

std::string format_bytes(std::size_t bytes) {
    char buf[64];
    const double b = double(bytes);
    if (b >= 1e9)
        std::snprintf(buf, sizeof buf, "%.1f GB", b / 1e9);
    else if (b >= 1e6)
        std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
    return std::string(buf) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace detail
}  // namespace helmpinn
