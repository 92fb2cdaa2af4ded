// Loading TT cores to device memory and the registry of resident entries.
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "../device.h"
#include "common.cuh"

namespace svc {
namespace gpu {

void fail_cuda(cudaError_t err, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so later calls can run
  if (err == cudaErrorMemoryAllocation)
    throw TTError("out_of_memory", "", std::string("the GPU is out of memory (") + what + ")");
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
    throw TTError("gpu_unavailable", "", std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  throw TTError("internal", "", std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
}

void ensure_device() {
  static const DeviceInfo dev = cuda_probe();
  if (dev.device.empty())
    throw TTError("gpu_unavailable", "",
                  dev.reason.rfind("no ", 0) == 0 ? dev.reason : "no usable CUDA device: " + dev.reason);
  check(cudaSetDevice(0), "cudaSetDevice");
}

namespace {
// Entries are freed in stream order on this stream, so releasing one (on the event loop, when
// the cache evicts) never waits for the device. Every call that used the entry synchronised its
// own stream before dropping its reference, so nothing still reads the memory.
cudaStream_t free_stream() {
  static cudaStream_t s = [] {
    cudaStream_t st = nullptr;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    return st;
  }();
  return s;
}

// CUDA events for one timed copy, destroyed on scope exit (also when a copy throws).
struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
  }
  ~Events() {
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
  }
};
}  // namespace

DevTT::~DevTT() {
  if (base) cudaFreeAsync(base, free_stream());
}

namespace {
std::mutex reg_mu;
std::unordered_map<uint64_t, std::shared_ptr<DevTT>> registry;
uint64_t next_handle = 1;

// Pinned staging reused across loads (grown on demand, never above 64 MiB; larger loads go
// through it in chunks), so load speed is the DMA speed from pinned memory.
std::mutex stage_mu;
void* stage = nullptr;
size_t stage_bytes = 0;
constexpr size_t kStageMax = size_t(64) << 20;

size_t header_bytes(size_t d) { return 16 * (d + 1); }

// One number per distinct list of modes (under reg_mu), so comparing the modes of many
// candidates with a query's reads no vectors.
std::map<std::vector<size_t>, uint64_t> mode_ids;
}  // namespace

std::shared_ptr<DevTT> lookup(uint64_t handle, const char* field) {
  std::lock_guard<std::mutex> g(reg_mu);
  auto it = registry.find(handle);
  if (it == registry.end()) throw TTError("bad_request", field, std::string(field) + " is not a resident GPU entry");
  return it->second;
}

std::vector<std::shared_ptr<DevTT>> lookup_all(const std::vector<uint64_t>& handles, const char* field) {
  std::vector<std::shared_ptr<DevTT>> out;
  out.reserve(handles.size());
  std::lock_guard<std::mutex> g(reg_mu);
  for (uint64_t h : handles) {
    auto it = registry.find(h);
    if (it == registry.end()) throw TTError("bad_request", field, std::string(field) + " is not a resident GPU entry");
    out.push_back(it->second);
  }
  return out;
}

Loaded load(const std::vector<const float*>& cores, const std::vector<size_t>& modes,
            const std::vector<size_t>& ranks) {
  ensure_device();
  size_t d = modes.size();
  if (d == 0 || cores.size() != d || ranks.size() != d + 1) throw TTError("bad_request", "cores", "one core per mode");
  auto t = std::make_shared<DevTT>();
  t->modes = modes;
  t->ranks = ranks;
  t->header = header_bytes(d);
  for (size_t r : ranks) t->max_rank = std::max(t->max_rank, r);
  {
    std::lock_guard<std::mutex> g(reg_mu);
    t->modes_id = mode_ids.emplace(modes, mode_ids.size() + 1).first->second;
  }
  size_t off = 0;
  for (size_t k = 0; k < d; ++k) {
    t->offsets.push_back(off);
    off += ranks[k] * modes[k] * ranks[k + 1];
  }
  t->bytes = t->header + 4 * off;
  Stream st;
  // from the device's stream-ordered pool: cheaper than cudaMalloc for many small entries
  cudaError_t e = cudaMallocAsync(&t->base, t->bytes, st.s);
  if (e != cudaSuccess) {
    t->base = nullptr;
    fail_cuda(e, "cudaMallocAsync");
  }
  std::vector<char> head(t->header, 0);
  for (size_t k = 0; k <= d; ++k) {
    int r = int(ranks[k]);
    std::memcpy(head.data() + 4 * k, &r, 4);
  }
  Events ev;
  cudaEvent_t e0 = ev.a, e1 = ev.b;
  float ms_total = 0;
  {
    std::lock_guard<std::mutex> g(stage_mu);
    size_t want = std::min(t->bytes, kStageMax);
    if (stage_bytes < want) {
      if (stage) cudaFreeHost(stage);
      stage = nullptr;
      stage_bytes = 0;
      check(cudaMallocHost(&stage, want), "cudaMallocHost");
      stage_bytes = want;
    }
    // the bytes in device order: header, then each core
    size_t done = 0;
    size_t k = 0, in_core = 0;  // position inside the cores while filling chunks
    bool head_done = false;
    while (done < t->bytes) {
      size_t chunk = std::min(stage_bytes, t->bytes - done);
      char* dst = static_cast<char*>(stage);
      size_t filled = 0;
      if (!head_done) {
        std::memcpy(dst, head.data(), t->header);  // stage is at least header bytes (>= 16*(d+1) < 64 MiB)
        filled = t->header;
        head_done = true;
      }
      while (filled < chunk && k < d) {
        size_t core_bytes = 4 * ranks[k] * modes[k] * ranks[k + 1];
        size_t n = std::min(chunk - filled, core_bytes - in_core);
        std::memcpy(dst + filled, reinterpret_cast<const char*>(cores[k]) + in_core, n);
        filled += n;
        in_core += n;
        if (in_core == core_bytes) {
          ++k;
          in_core = 0;
        }
      }
      check(cudaEventRecord(e0, st.s), "cudaEventRecord");
      check(cudaMemcpyAsync(static_cast<char*>(t->base) + done, stage, filled, cudaMemcpyHostToDevice, st.s),
            "cudaMemcpyAsync");
      check(cudaEventRecord(e1, st.s), "cudaEventRecord");
      st.sync();
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      ms_total += ms;
      done += filled;
    }
  }
  Loaded out;
  out.bytes = t->bytes;
  out.h2d_s = ms_total / 1e3;
  std::lock_guard<std::mutex> g(reg_mu);
  out.handle = next_handle++;
  registry.emplace(out.handle, std::move(t));
  return out;
}

bool release(uint64_t handle) {
  std::shared_ptr<DevTT> t;
  {
    std::lock_guard<std::mutex> g(reg_mu);
    auto it = registry.find(handle);
    if (it == registry.end()) return false;
    t = std::move(it->second);
    registry.erase(it);
  }
  return true;  // t's memory is freed here, or by the last call still holding it
}

std::pair<size_t, size_t> memory() {
  ensure_device();
  size_t f = 0, total = 0;
  check(cudaMemGetInfo(&f, &total), "cudaMemGetInfo");
  return {f, total};
}

}  // namespace gpu
}  // namespace svc
