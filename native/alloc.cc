// The block allocator behind Buffer: 64-byte aligned blocks, large ones 2 MiB aligned and reused.
#include "alloc.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <mutex>
#include <new>
#include <vector>

#include "tt.h"

namespace svc {

namespace {
// Blocks of at least kReuseMin bytes are 2 MiB aligned, and freed ones are kept (at most
// kReuseMax bytes in all, newest first) for the next allocation that fits in one without
// wasting more than a quarter of it. Such sizes are above glibc's largest mmap threshold, so
// without this every large result would be a fresh mapping that the kernel zeroes and faults
// in again: about a third of a 64 MB reconstruction's time.
constexpr size_t kHuge = size_t(2) << 20;
constexpr size_t kReuseMin = 2 * kHuge;
constexpr size_t kReuseMax = size_t(256) << 20;
struct Kept {
  void* p;
  size_t padded;
};
std::mutex g_kept_mu;
std::vector<Kept> g_kept;
size_t g_kept_bytes = 0;

size_t padded_size(size_t bytes) {
  size_t align = bytes >= kReuseMin ? kHuge : 64;
  return (bytes + align - 1) / align * align;
}
}  // namespace

Buffer alloc_buffer(size_t count, size_t elem) {
  if (count > (SIZE_MAX - kHuge) / elem)
    throw TTError("internal", "", "out of memory: the requested buffer size overflows");
  size_t bytes = std::max<size_t>(count * elem, 1);
  size_t padded = padded_size(bytes);
  void* p = nullptr;
  if (bytes >= kReuseMin) {
    std::lock_guard<std::mutex> lock(g_kept_mu);
    for (size_t i = g_kept.size(); i-- > 0;) {
      if (g_kept[i].padded >= padded && g_kept[i].padded - padded <= g_kept[i].padded / 4) {
        p = g_kept[i].p;
        padded = g_kept[i].padded;
        g_kept_bytes -= padded;
        g_kept.erase(g_kept.begin() + long(i));
        break;
      }
    }
  }
  if (!p) {
    // Large results: 2 MiB alignment and transparent huge pages, so first touch costs a few
    // faults instead of one per 4 KiB page.
    p = std::aligned_alloc(bytes >= kReuseMin ? kHuge : 64, padded);
#if defined(MADV_HUGEPAGE)
    if (p && bytes >= kReuseMin) madvise(p, padded, MADV_HUGEPAGE);
#endif
  }
  if (!p) throw TTError("internal", "", "out of memory: could not allocate " + std::to_string(bytes) + " bytes");
  Buffer b;
  b.p = p;
  b.bytes = bytes;
  return b;
}

void free_buffer(void* p, size_t bytes) {
  if (!p) return;
  if (bytes >= kReuseMin) {
    size_t padded = padded_size(bytes);
    std::vector<Kept> drop;
    {
      std::lock_guard<std::mutex> lock(g_kept_mu);
      if (padded <= kReuseMax) {
        g_kept.push_back({p, padded});
        g_kept_bytes += padded;
        p = nullptr;
        // oldest first out, until the cache is within its bound
        size_t n = 0;
        while (g_kept_bytes > kReuseMax) {
          g_kept_bytes -= g_kept[n].padded;
          drop.push_back(g_kept[n++]);
        }
        g_kept.erase(g_kept.begin(), g_kept.begin() + long(n));
      }
    }
    for (auto& k : drop) std::free(k.p);
  }
  std::free(p);
}

}  // namespace svc
