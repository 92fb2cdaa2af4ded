// Buffer: the aligned blocks that results are built in and handed to JavaScript, and their allocator.
#pragma once
#include <cstddef>

namespace svc {

// A malloc'd, 64-byte aligned buffer handed to JavaScript without a copy (freed by a finalizer).
// Memory from alloc_buffer goes back through free_buffer (with its byte count): large blocks
// are kept in a small process-wide cache for the next allocation of a similar size. `bytes`
// must stay what alloc_buffer set: free_buffer derives the block's size from it.
void free_buffer(void* p, size_t bytes);

struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : p(o.p), bytes(o.bytes) {
    o.p = nullptr;
    o.bytes = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      free_buffer(p, bytes);
      p = o.p;
      bytes = o.bytes;
      o.p = nullptr;
      o.bytes = 0;
    }
    return *this;
  }
  ~Buffer() { free_buffer(p, bytes); }
  void* release() {
    void* q = p;
    p = nullptr;
    bytes = 0;
    return q;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};
Buffer alloc_buffer(size_t count, size_t elem_size);

}  // namespace svc
