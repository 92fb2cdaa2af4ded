// N-API surface of the GPU side (native/gpu.h): handles are numbers, cores Float32Arrays.
// Device work runs in AsyncWorkers; errors reject with an Error carrying `code`
// (gpu_unavailable, out_of_memory, bad_request, internal) that lib/gpu.ts maps to classes.
#include "gpu.h"

#include <napi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "napi_util.h"

namespace svc {

namespace gpu {
size_t bytes_for(const std::vector<size_t>& modes, const std::vector<size_t>& ranks) {
  size_t n = 0;
  for (size_t k = 0; k < modes.size(); ++k) n += ranks[k] * modes[k] * ranks[k + 1];
  return 16 * (modes.size() + 1) + 4 * n;
}
}  // namespace gpu

namespace {

uint64_t read_handle(const Napi::Value& v, const std::string& field) {
  if (!v.IsNumber()) throw bad(field, field + " must be a GPU handle");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 1 && d <= 9007199254740991.0) || std::floor(d) != d) throw bad(field, field + " must be a GPU handle");
  return uint64_t(d);
}

size_t read_count(const Napi::Value& v, const std::string& field) {
  double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(d >= 1 && d <= 9007199254740991.0) || std::floor(d) != d)
    throw bad(field, field + " must be a positive integer");
  return size_t(d);
}

// A Float32Array read in place (the worker keeps a reference to it).
const float* read_f32(const Napi::Value& v, const std::string& field, size_t* n) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw bad(field, field + " must be a Float32Array");
  auto ta = v.As<Napi::Float32Array>();
  *n = ta.ElementLength();
  return ta.Data();
}

// gpuLoad(cores: Float32Array[], ranks, modes) -> { handle, bytes, h2d_s }
class LoadWorker : public Worker {
 public:
  LoadWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    ranks_ = read_sizes(info[1], "ranks");
    modes_ = read_sizes(info[2], "modes");
    size_t d = modes_.size();
    if (!info[0].IsArray() || info[0].As<Napi::Array>().Length() != d || ranks_.size() != d + 1 || d == 0)
      throw bad("cores", "cores must have one Float32Array per mode and ranks one more entry than modes");
    if (ranks_[0] != 1 || ranks_[d] != 1) throw bad("ranks", "ranks must start and end with 1");
    auto arr = info[0].As<Napi::Array>();
    for (uint32_t k = 0; k < d; ++k) {
      size_t n = 0;
      std::string f = "cores[" + std::to_string(k) + "]";
      cores_.push_back(read_f32(arr.Get(k), f, &n));
      if (ranks_[k] == 0 || double(n) != double(ranks_[k]) * double(modes_[k]) * double(ranks_[k + 1]))
        throw bad(f, f + " must have ranks[k] * modes[k] * ranks[k+1] elements");
    }
    keep(info[0]);
  }

 protected:
  void run() override { out_ = gpu::load(cores_, modes_, ranks_); }
  Napi::Value result(Napi::Env env) override {
    auto o = Napi::Object::New(env);
    o.Set("handle", Napi::Number::New(env, double(out_.handle)));
    o.Set("bytes", Napi::Number::New(env, double(out_.bytes)));
    o.Set("h2d_s", Napi::Number::New(env, out_.h2d_s));
    return o;
  }

 private:
  std::vector<const float*> cores_;
  std::vector<size_t> ranks_, modes_;
  gpu::Loaded out_;
};

Napi::Value f32_js(Napi::Env env, Buffer&& b) {
  size_t bytes = b.bytes;
  if (bytes == 0) return Napi::Float32Array::New(env, 0);
  void* p = b.release();
  // as addon.cc: V8 learns about the native memory, so large results trigger collection
  Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(bytes));
  auto ab = Napi::ArrayBuffer::New(
      env, p, bytes,
      [](Napi::Env e, void* data, size_t* hint) {
        Napi::MemoryManagement::AdjustExternalMemory(e, -static_cast<int64_t>(*hint));
        free_buffer(data, *hint);
        delete hint;
      },
      new size_t(bytes));
  return Napi::Float32Array::New(env, bytes / 4, ab, 0);
}

// gpuReconstruct(handle, shape, groups, slice: number[] | null) -> Float32Array
class ReconstructWorker : public Worker {
 public:
  ReconstructWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    h_ = read_handle(info[0], "handle");
    shape_ = read_sizes(info[1], "shape");
    groups_ = read_sizes(info[2], "groups");
    if (!info[3].IsNull() && !info[3].IsUndefined()) {
      auto flat = read_sizes(info[3], "slice");
      if (flat.size() != 2 * shape_.size()) throw bad("slice", "slice must have one [start, stop) per dense dimension");
      for (size_t j = 0; j < shape_.size(); ++j) ranges_.push_back({flat[2 * j], flat[2 * j + 1]});
    }
  }

 protected:
  void run() override { out_ = gpu::reconstruct(h_, shape_, groups_, ranges_); }
  Napi::Value result(Napi::Env env) override { return f32_js(env, std::move(out_)); }

 private:
  uint64_t h_;
  std::vector<size_t> shape_, groups_;
  std::vector<std::pair<size_t, size_t>> ranges_;
  Buffer out_;
};

// gpuReconstructTimed(handle, repeats) -> seconds per reconstruction on the device
class TimedWorker : public Worker {
 public:
  TimedWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    h_ = read_handle(info[0], "handle");
    reps_ = read_count(info[1], "repeats");
  }

 protected:
  void run() override { s_ = gpu::reconstruct_timed(h_, reps_); }
  Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, s_); }

 private:
  uint64_t h_;
  size_t reps_ = 1;
  double s_ = 0;
};

// gpuDot(a, b) -> number
class DotWorker : public Worker {
 public:
  DotWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    a_ = read_handle(info[0], "a");
    b_ = read_handle(info[1], "b");
  }

 protected:
  void run() override { v_ = gpu::dot(a_, b_); }
  Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, v_); }

 private:
  uint64_t a_, b_;
  double v_ = 0;
};

// gpuDotDense(handle, x: Float32Array) -> number
class DotDenseWorker : public Worker {
 public:
  DotDenseWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    h_ = read_handle(info[0], "handle");
    x_ = read_f32(info[1], "x", &n_);
    keep(info[1]);
  }

 protected:
  void run() override { v_ = gpu::dot_dense(h_, x_, n_); }
  Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, v_); }

 private:
  uint64_t h_;
  const float* x_;
  size_t n_ = 0;
  double v_ = 0;
};

// gpuTopk(query, candidates: Float64Array | number[], norms: Float64Array | null, metric, k) -> { index: Uint32Array, score: Float64Array }
class TopkWorker : public Worker {
 public:
  TopkWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    q_ = read_handle(info[0], "query");
    // a Float64Array of handles is read in one pass (100,000 Array.Get calls cost milliseconds)
    if (info[1].IsTypedArray() && info[1].As<Napi::TypedArray>().TypedArrayType() == napi_float64_array) {
      auto a = info[1].As<Napi::Float64Array>();
      const double* p = a.Data();
      cands_.resize(a.ElementLength());
      for (size_t i = 0; i < cands_.size(); ++i) {
        if (!(p[i] >= 1 && p[i] <= 9007199254740991.0) || std::floor(p[i]) != p[i])
          throw bad("candidates", "candidates must be GPU handles");
        cands_[i] = uint64_t(p[i]);
      }
    } else {
      if (!info[1].IsArray()) throw bad("candidates", "candidates must be an array of GPU handles");
      auto a = info[1].As<Napi::Array>();
      for (uint32_t i = 0; i < a.Length(); ++i) cands_.push_back(read_handle(a.Get(i), "candidates"));
    }
    if (!info[2].IsNull() && !info[2].IsUndefined()) {
      if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
        throw bad("norms", "norms must be a Float64Array");
      auto n = info[2].As<Napi::Float64Array>();
      norms_.assign(n.Data(), n.Data() + n.ElementLength());
    }
    if (!info[3].IsString()) throw bad("metric", "metric must be a string");
    metric_ = info[3].As<Napi::String>().Utf8Value();
    k_ = read_count(info[4], "k");
  }

 protected:
  void run() override {
    size_t cap = std::min(k_, cands_.size());
    index_.resize(cap);
    score_.resize(cap);
    n_ = gpu::topk(q_, cands_, norms_, metric_, k_, index_.data(), score_.data());
  }
  Napi::Value result(Napi::Env env) override {
    auto o = Napi::Object::New(env);
    auto idx = Napi::Uint32Array::New(env, n_);
    auto sc = Napi::Float64Array::New(env, n_);
    if (n_) {
      std::memcpy(idx.Data(), index_.data(), 4 * n_);
      std::memcpy(sc.Data(), score_.data(), 8 * n_);
    }
    o.Set("index", idx);
    o.Set("score", sc);
    return o;
  }

 private:
  uint64_t q_;
  std::vector<uint64_t> cands_;
  std::vector<double> norms_;
  std::string metric_;
  size_t k_ = 0, n_ = 0;
  std::vector<uint32_t> index_;
  std::vector<double> score_;
};

// gpuRelease(handle) -> boolean (false: not resident)
Napi::Value Release(const Napi::CallbackInfo& info) {
  return sync_call(info.Env(), [&]() -> Napi::Value {
    return Napi::Boolean::New(info.Env(), gpu::release(read_handle(info[0], "handle")));
  });
}

// gpuMemory() -> { free, total } in bytes; throws (code gpu_unavailable) without a device
Napi::Value Memory(const Napi::CallbackInfo& info) {
  return sync_call(info.Env(), [&]() -> Napi::Value {
    auto m = gpu::memory();
    auto o = Napi::Object::New(info.Env());
    o.Set("free", Napi::Number::New(info.Env(), double(m.first)));
    o.Set("total", Napi::Number::New(info.Env(), double(m.second)));
    return o;
  });
}

// gpuBytesFor(ranks, modes) -> device bytes of such an entry (the cache's accounting)
Napi::Value BytesFor(const Napi::CallbackInfo& info) {
  return sync_call(info.Env(), [&]() -> Napi::Value {
    auto ranks = read_sizes(info[0], "ranks");
    auto modes = read_sizes(info[1], "modes");
    if (ranks.size() != modes.size() + 1) throw bad("ranks", "ranks must have one more entry than modes");
    return Napi::Number::New(info.Env(), double(gpu::bytes_for(modes, ranks)));
  });
}

}  // namespace

void register_gpu(Napi::Env env, Napi::Object exports) {
  exports.Set("gpuLoad", Napi::Function::New(env, start<LoadWorker>));
  exports.Set("gpuRelease", Napi::Function::New(env, Release));
  exports.Set("gpuReconstruct", Napi::Function::New(env, start<ReconstructWorker>));
  exports.Set("gpuReconstructTimed", Napi::Function::New(env, start<TimedWorker>));
  exports.Set("gpuDot", Napi::Function::New(env, start<DotWorker>));
  exports.Set("gpuDotDense", Napi::Function::New(env, start<DotDenseWorker>));
  exports.Set("gpuTopk", Napi::Function::New(env, start<TopkWorker>));
  exports.Set("gpuMemory", Napi::Function::New(env, Memory));
  exports.Set("gpuBytesFor", Napi::Function::New(env, BytesFor));
}

}  // namespace svc
