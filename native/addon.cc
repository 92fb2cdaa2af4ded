// N-API surface of the TT engine: typed arrays, numbers and arrays of numbers in, promises out.
// Every call copies what it needs out of JavaScript values up front, runs in an AsyncWorker,
// and hands results back as typed arrays over native memory (freed by a finalizer).
#include <napi.h>

#include <cmath>
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "device.h"
#include "gpu.h"
#include "kernels.h"
#include "napi_util.h"
#include "pred.h"
#include "pred_int.h"
#include "threads.h"
#include "tt.h"

namespace svc {
namespace {

struct Arr {
  void* p = nullptr;
  size_t n = 0;
  bool f64 = false;
};

Arr read_array(const Napi::Value& v, const std::string& field) {
  if (!v.IsTypedArray()) throw bad(field, field + " must be a Float32Array or Float64Array");
  auto ta = v.As<Napi::TypedArray>();
  napi_typedarray_type t = ta.TypedArrayType();
  if (t != napi_float32_array && t != napi_float64_array)
    throw bad(field, field + " must be a Float32Array or Float64Array");
  Arr a;
  a.f64 = t == napi_float64_array;
  a.n = ta.ElementLength();
  // The element pointer from napi_get_typedarray_info, not ArrayBuffer().Data() + offset:
  // ArrayBuffer() fails ("Invalid argument") for a typed array over a SharedArrayBuffer.
  void* data = nullptr;
  if (napi_get_typedarray_info(v.Env(), ta, nullptr, nullptr, &data, nullptr, nullptr) != napi_ok)
    throw bad(field, field + " must be a Float32Array or Float64Array");
  a.p = data;
  return a;
}

double read_number(const Napi::Value& v, const std::string& field) {
  if (!v.IsNumber()) throw bad(field, field + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

// A TT read from (cores[], ranks, modes), with the native backstop checks on its shape.
struct TTArg {
  std::vector<Arr> cores;
  std::vector<size_t> ranks;
  bool f64 = false;
};

// Cores of more than kFiniteInJs elements are checked for NaN and infinities here, on the
// worker thread, with lib/tt.ts's message; lib/tt.ts checks the smaller ones itself. So no
// large scan runs on the event loop, and the store's batched scoring, whose cores were
// checked at put time and are small, pays nothing.
constexpr size_t kFiniteInJs = size_t(1) << 16;

std::string js_number(double v) {
  if (std::isnan(v)) return "NaN";
  return v > 0 ? "Infinity" : "-Infinity";
}

// `prefix()` gives the TT's field prefix as lib/tt.ts names it ("", "a.", "candidates[3].");
// it is built only for an error, so batches of small cores allocate nothing here.
template <typename Prefix>
void check_large_cores(const TTArg& t, Prefix&& prefix) {
  for (size_t k = 0; k < t.cores.size(); ++k) {
    const Arr& a = t.cores[k];
    if (a.n <= kFiniteInJs) continue;
    for (size_t i = 0; i < a.n; ++i) {
      double v = a.f64 ? static_cast<const double*>(a.p)[i] : double(static_cast<const float*>(a.p)[i]);
      if (!std::isfinite(v)) {
        std::string f = prefix() + "cores[" + std::to_string(k) + "]";
        throw TTError(
            "bad_request", f,
            f + " must contain only finite numbers (found " + js_number(v) + " at index " + std::to_string(i) + ").");
      }
    }
  }
}
auto named(const char* name) {
  return [name] { return std::string(name); };
}
void check_candidates(const std::vector<TTArg>& cands) {
  for (size_t i = 0; i < cands.size(); ++i)
    check_large_cores(cands[i], [i] { return "candidates[" + std::to_string(i) + "]."; });
}

TTArg read_tt(const Napi::Value& cores_v, const Napi::Value& ranks_v, const std::vector<size_t>& modes,
              const std::string& name) {
  TTArg t;
  // an empty name is the lone TT of a call (reconstruct): fields "cores[k]", as lib/tt.ts has them
  const std::string pre = name.empty() ? "" : name + ".";
  const std::string label = name.empty() ? "t" : name;
  t.ranks = read_sizes(ranks_v, pre + "ranks");
  if (!cores_v.IsArray()) throw bad(pre + "cores", pre + "cores must be an array of typed arrays");
  auto arr = cores_v.As<Napi::Array>();
  size_t d = modes.size();
  if (arr.Length() != d || t.ranks.size() != d + 1 || d == 0)
    throw bad(pre + "cores", label + " must have one core per mode and ranks of length modes + 1");
  if (t.ranks[0] != 1 || t.ranks[d] != 1) throw bad(pre + "ranks", pre + "ranks must start and end with 1");
  for (uint32_t k = 0; k < d; ++k) {
    std::string f = pre + "cores[" + std::to_string(k) + "]";
    Arr a = read_array(arr.Get(k), f);
    if (k == 0) t.f64 = a.f64;
    if (a.f64 != t.f64) throw bad(f, "all cores must have the same type");
    double want = double(t.ranks[k]) * double(modes[k]) * double(t.ranks[k + 1]);
    if (t.ranks[k] == 0 || double(a.n) != want)
      throw bad(f, f + " must have ranks[k] * modes[k] * ranks[k+1] elements");
    t.cores.push_back(a);
  }
  return t;
}

template <typename T>
std::vector<const T*> ptrs(const TTArg& t) {
  std::vector<const T*> v;
  for (auto& a : t.cores) v.push_back(static_cast<const T*>(a.p));
  return v;
}

// An ArrayBuffer over a native result, without a copy.
Napi::ArrayBuffer external_js(Napi::Env env, Buffer&& b) {
  size_t bytes = b.bytes;
  void* p = b.release();
  // Tell V8 about the native memory so large results trigger collection (and their finalizers).
  Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(bytes));
  return Napi::ArrayBuffer::New(
      env, p, bytes,
      [](Napi::Env e, void* data, size_t* hint) {
        Napi::MemoryManagement::AdjustExternalMemory(e, -static_cast<int64_t>(*hint));
        free_buffer(data, *hint);
        delete hint;
      },
      new size_t(bytes));
}

Napi::Value to_js(Napi::Env env, Buffer&& b, bool f64) {
  size_t n = b.bytes / (f64 ? 8 : 4);
  auto ab = external_js(env, std::move(b));
  if (f64) return Napi::Float64Array::New(env, n, ab, 0);
  return Napi::Float32Array::New(env, n, ab, 0);
}

Napi::Array sizes_js(Napi::Env env, const std::vector<size_t>& v) {
  auto a = Napi::Array::New(env, v.size());
  for (uint32_t i = 0; i < v.size(); ++i) a.Set(i, Napi::Number::New(env, double(v[i])));
  return a;
}

Napi::Value tt_result_js(Napi::Env env, TTResult& r, bool f64) {
  if (r.gave_up) return env.Null();
  auto o = Napi::Object::New(env);
  o.Set("ranks", sizes_js(env, r.ranks));
  auto cores = Napi::Array::New(env, r.cores.size());
  for (uint32_t k = 0; k < r.cores.size(); ++k) cores.Set(k, to_js(env, std::move(r.cores[k]), f64));
  o.Set("cores", cores);
  o.Set("relative_error", Napi::Number::New(env, r.relative_error));
  return o;
}

// compress(data, modes, tolerance, max_rank, min_ratio) -> {ranks, cores, relative_error} | null
class CompressWorker : public Worker {
 public:
  CompressWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    data_ = read_array(info[0], "data");
    keep(info[0]);
    modes_ = read_sizes(info[1], "modes");
    tol_ = read_number(info[2], "tolerance");
    max_rank_ = static_cast<size_t>(read_number(info[3], "max_rank"));
    min_ratio_ = read_number(info[4], "min_ratio");
  }

 protected:
  void run() override {
    if (data_.f64)
      res_ = tt_compress(static_cast<const double*>(data_.p), data_.n, modes_, tol_, max_rank_, min_ratio_);
    else res_ = tt_compress(static_cast<const float*>(data_.p), data_.n, modes_, tol_, max_rank_, min_ratio_);
  }
  Napi::Value result(Napi::Env env) override { return tt_result_js(env, res_, data_.f64); }

 private:
  Arr data_;
  std::vector<size_t> modes_;
  double tol_ = 0, min_ratio_ = 0;
  size_t max_rank_ = 0;
  TTResult res_;
};

// reconstruct(cores, ranks, modes, shape, groups, ranges | null) -> typed array
class ReconstructWorker : public Worker {
 public:
  ReconstructWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    modes_ = read_sizes(info[2], "modes");
    tt_ = read_tt(info[0], info[1], modes_, "");
    keep(info[0]);
    shape_ = read_sizes(info[3], "shape");
    groups_ = read_sizes(info[4], "groups");
    if (groups_.size() != shape_.size()) throw bad("shape", "groups must have one entry per dense dimension");
    size_t mi = 0;
    for (size_t j = 0; j < shape_.size(); ++j) {
      double p = 1;
      for (size_t t = 0; t < groups_[j] && mi < modes_.size(); ++t, ++mi) p *= double(modes_[mi]);
      if (p != double(shape_[j])) throw bad("shape", "modes do not factor the dense shape");
    }
    if (mi != modes_.size()) throw bad("shape", "modes do not factor the dense shape");
    if (!info[5].IsNull() && !info[5].IsUndefined()) {
      std::vector<size_t> flat = read_sizes(info[5], "slice");
      if (flat.size() != 2 * shape_.size()) throw bad("slice", "slice must have one [start, stop) per dense dimension");
      for (size_t j = 0; j < shape_.size(); ++j) ranges_.push_back({flat[2 * j], flat[2 * j + 1]});
    }
  }

 protected:
  void run() override {
    check_large_cores(tt_, named(""));
    if (tt_.f64) out_ = tt_reconstruct(ptrs<double>(tt_), modes_, tt_.ranks, shape_, groups_, ranges_);
    else out_ = tt_reconstruct(ptrs<float>(tt_), modes_, tt_.ranks, shape_, groups_, ranges_);
  }
  Napi::Value result(Napi::Env env) override { return to_js(env, std::move(out_), tt_.f64); }

 private:
  TTArg tt_;
  std::vector<size_t> modes_, shape_, groups_;
  std::vector<std::pair<size_t, size_t>> ranges_;
  Buffer out_;
};

template <typename TA, typename TB>
Scaled dot_of(const TTArg& a, const TTArg& b, const std::vector<size_t>& modes) {
  return tt_dot(ptrs<TA>(a), a.ranks, ptrs<TB>(b), b.ranks, modes);
}
Scaled dot_any(const TTArg& a, const TTArg& b, const std::vector<size_t>& modes) {
  if (a.f64) return b.f64 ? dot_of<double, double>(a, b, modes) : dot_of<double, float>(a, b, modes);
  return b.f64 ? dot_of<float, double>(a, b, modes) : dot_of<float, float>(a, b, modes);
}
// x scaled once per call, for the candidates whose product with x needs it (tt.h).
struct XCopies {
  ScaledCopy<float> f;
  ScaledCopy<double> d;
};
template <typename TC, typename TX>
Scaled dd_of(const TTArg& t, const std::vector<size_t>& modes, const Arr& x, ScaledCopy<TX>* cache) {
  return tt_dot_dense(ptrs<TC>(t), t.ranks, modes, static_cast<const TX*>(x.p), cache);
}
Scaled dot_dense_any(const TTArg& t, const std::vector<size_t>& modes, const Arr& x, XCopies* xc = nullptr) {
  ScaledCopy<float>* cf = xc ? &xc->f : nullptr;
  ScaledCopy<double>* cd = xc ? &xc->d : nullptr;
  if (t.f64) return x.f64 ? dd_of<double, double>(t, modes, x, cd) : dd_of<double, float>(t, modes, x, cf);
  return x.f64 ? dd_of<float, double>(t, modes, x, cd) : dd_of<float, float>(t, modes, x, cf);
}
// A Scaled result as [m, e] (lib/scaled.ts).
Napi::Value scaled_pair(Napi::Env env, Scaled v) {
  auto o = Napi::Float64Array::New(env, 2);
  o[0] = v.m;
  o[1] = double(v.e);
  return o;
}
// n Scaled results as [m_0 .. m_{n-1}, e_0 .. e_{n-1}] (lib/scaled.ts).
Buffer scaled_buffer(const std::vector<Scaled>& v) {
  Buffer b = alloc_buffer(std::max<size_t>(2 * v.size(), 1), sizeof(double));
  double* o = b.as<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    o[i] = v[i].m;
    o[v.size() + i] = double(v[i].e);
  }
  return b;
}
size_t prod(const std::vector<size_t>& v) {
  double p = 1;
  for (size_t x : v) p *= double(x);
  if (p > 9007199254740991.0) throw bad("modes", "modes describe a tensor too large to address");
  return static_cast<size_t>(p);
}

// dot(aCores, aRanks, bCores, bRanks, modes) -> Float64Array [m, e]: the product is m * 2^e (tt.h Scaled)
class DotWorker : public Worker {
 public:
  DotWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    modes_ = read_sizes(info[4], "modes");
    a_ = read_tt(info[0], info[1], modes_, "a");
    b_ = read_tt(info[2], info[3], modes_, "b");
    keep(info[0]);
    keep(info[2]);
  }

 protected:
  void run() override {
    check_large_cores(a_, named("a."));
    check_large_cores(b_, named("b."));
    v_ = dot_any(a_, b_, modes_);
  }
  Napi::Value result(Napi::Env env) override { return scaled_pair(env, v_); }

 private:
  TTArg a_, b_;
  std::vector<size_t> modes_;
  Scaled v_;
};

// dotDense(cores, ranks, modes, x) -> Float64Array [m, e]
class DotDenseWorker : public Worker {
 public:
  DotDenseWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    modes_ = read_sizes(info[2], "modes");
    t_ = read_tt(info[0], info[1], modes_, "t");
    x_ = read_array(info[3], "x");
    if (x_.n != prod(modes_)) throw bad("x", "x must have as many elements as the dense tensor");
    keep(info[0]);
    keep(info[3]);
  }

 protected:
  void run() override {
    check_large_cores(t_, named("t."));
    v_ = dot_dense_any(t_, modes_, x_);
  }
  Napi::Value result(Napi::Env env) override { return scaled_pair(env, v_); }

 private:
  TTArg t_;
  Arr x_;
  std::vector<size_t> modes_;
  Scaled v_;
};

// round(cores, ranks, modes, tolerance, max_rank) -> {ranks, cores, relative_error}
class RoundWorker : public Worker {
 public:
  RoundWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    modes_ = read_sizes(info[2], "modes");
    t_ = read_tt(info[0], info[1], modes_, "t");
    keep(info[0]);
    tol_ = read_number(info[3], "tolerance");
    max_rank_ = static_cast<size_t>(read_number(info[4], "max_rank"));
    if (!(tol_ > 0 && tol_ < 1)) throw bad("tolerance", "tolerance must be between 0 and 1");
    if (max_rank_ < 1) throw bad("max_rank", "max_rank must be at least 1");
  }

 protected:
  void run() override {
    check_large_cores(t_, named("t."));
    if (t_.f64) res_ = tt_round(ptrs<double>(t_), t_.ranks, modes_, tol_, max_rank_);
    else res_ = tt_round(ptrs<float>(t_), t_.ranks, modes_, tol_, max_rank_);
  }
  Napi::Value result(Napi::Env env) override { return tt_result_js(env, res_, t_.f64); }

 private:
  TTArg t_;
  std::vector<size_t> modes_;
  double tol_ = 0;
  size_t max_rank_ = 0;
  TTResult res_;
};

std::vector<TTArg> read_candidates(const Napi::Value& cores_v, const Napi::Value& ranks_v,
                                   const std::vector<size_t>& modes) {
  if (!cores_v.IsArray() || !ranks_v.IsArray()) throw bad("candidates", "candidates must be an array");
  auto cs = cores_v.As<Napi::Array>();
  auto rs = ranks_v.As<Napi::Array>();
  if (cs.Length() != rs.Length()) throw bad("candidates", "candidates cores and ranks differ in length");
  std::vector<TTArg> out;
  for (uint32_t i = 0; i < cs.Length(); ++i)
    out.push_back(read_tt(cs.Get(i), rs.Get(i), modes, "candidates[" + std::to_string(i) + "]"));
  return out;
}

// dotBatch(qCores, qRanks, candCores[], candRanks[], modes) -> Float64Array [m_0.., e_0..]
class DotBatchWorker : public Worker {
 public:
  DotBatchWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    modes_ = read_sizes(info[4], "modes");
    q_ = read_tt(info[0], info[1], modes_, "q");
    cands_ = read_candidates(info[2], info[3], modes_);
    keep(info[0]);
    keep(info[2]);
  }

 protected:
  void run() override {
    check_large_cores(q_, named("q."));
    check_candidates(cands_);
    std::vector<Scaled> v(cands_.size());
    parallel_for(cands_.size(), [&](size_t i) { v[i] = dot_any(q_, cands_[i], modes_); });
    out_ = scaled_buffer(v);
  }
  Napi::Value result(Napi::Env env) override {
    if (cands_.empty()) return Napi::Float64Array::New(env, 0);
    return to_js(env, std::move(out_), true);
  }

 private:
  TTArg q_;
  std::vector<TTArg> cands_;
  std::vector<size_t> modes_;
  Buffer out_;
};

// dotDenseBatch(x, candCores[], candRanks[], modes) -> Float64Array [m_0.., e_0..]
class DotDenseBatchWorker : public Worker {
 public:
  DotDenseBatchWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    modes_ = read_sizes(info[3], "modes");
    x_ = read_array(info[0], "x");
    if (x_.n != prod(modes_)) throw bad("x", "x must have as many elements as the candidates' dense shape");
    cands_ = read_candidates(info[1], info[2], modes_);
    keep(info[0]);
    keep(info[1]);
  }

 protected:
  void run() override {
    check_candidates(cands_);
    std::vector<Scaled> v(cands_.size());
    XCopies xc;
    for (size_t i = 0; i < cands_.size(); ++i) v[i] = dot_dense_any(cands_[i], modes_, x_, &xc);
    out_ = scaled_buffer(v);
  }
  Napi::Value result(Napi::Env env) override {
    if (cands_.empty()) return Napi::Float64Array::New(env, 0);
    return to_js(env, std::move(out_), true);
  }

 private:
  Arr x_;
  std::vector<TTArg> cands_;
  std::vector<size_t> modes_;
  Buffer out_;
};

// denseDot(a, b) -> Float64Array [m, e] (float64 accumulation)
class DenseDotWorker : public Worker {
 public:
  DenseDotWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    a_ = read_array(info[0], "a");
    b_ = read_array(info[1], "b");
    if (a_.n != b_.n) throw bad("b", "a and b must have the same length");
    keep(info[0]);
    keep(info[1]);
  }

 protected:
  void run() override {
    if (a_.f64)
      v_ = b_.f64 ? dense_dot(static_cast<const double*>(a_.p), static_cast<const double*>(b_.p), a_.n)
                  : dense_dot(static_cast<const double*>(a_.p), static_cast<const float*>(b_.p), a_.n);
    else
      v_ = b_.f64 ? dense_dot(static_cast<const float*>(a_.p), static_cast<const double*>(b_.p), a_.n)
                  : dense_dot(static_cast<const float*>(a_.p), static_cast<const float*>(b_.p), a_.n);
  }
  Napi::Value result(Napi::Env env) override { return scaled_pair(env, v_); }

 private:
  Arr a_, b_;
  Scaled v_;
};

// ---- pred codec (native/pred.h): predCompress, predDecompress, predInfo, predEstimate, predDot ----

// NaN and infinities are refused on the worker thread (no scan on the event loop).
void check_finite_data(const Arr& a) {
  for (size_t i = 0; i < a.n; ++i) {
    double v = a.f64 ? static_cast<const double*>(a.p)[i] : double(static_cast<const float*>(a.p)[i]);
    if (!std::isfinite(v))
      throw TTError(
          "bad_request", "data",
          "data must contain only finite numbers (found " + js_number(v) + " at index " + std::to_string(i) + ").");
  }
}

// A stream is read in place (kept alive by the worker): every offset into it is checked against
// its length when the header is parsed, so no later read leaves it.
std::pair<const uint8_t*, size_t> read_bytes(const Napi::Value& v, const std::string& field) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw bad(field, field + " must be a Uint8Array");
  auto a = v.As<Napi::Uint8Array>();
  return {a.Data(), a.ElementLength()};
}

// The arguments predCompress and predEstimate share: (data, shape, tolerance | -1, max_abs_error | -1).
class PredInputWorker : public Worker {
 public:
  PredInputWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    data_ = read_array(info[0], "data");
    keep(info[0]);
    shape_ = read_sizes(info[1], "shape");
    tol_ = read_number(info[2], "tolerance");
    max_abs_ = read_number(info[3], "max_abs_error");
    double n = 1;
    for (size_t v : shape_) n *= double(v);
    if (shape_.empty() || n != double(data_.n)) throw bad("shape", "shape must multiply to the number of elements");
  }

 protected:
  Arr data_;
  std::vector<size_t> shape_;
  double tol_ = -1, max_abs_ = -1;
};

// predCompress(data, shape, tolerance | -1, max_abs_error | -1) -> {stream, relative_error, max_abs_error}
class PredCompressWorker : public PredInputWorker {
 public:
  using PredInputWorker::PredInputWorker;

 protected:
  void run() override {
    check_finite_data(data_);
    if (data_.f64) res_ = pred_compress(static_cast<const double*>(data_.p), shape_, tol_, max_abs_);
    else res_ = pred_compress(static_cast<const float*>(data_.p), shape_, tol_, max_abs_);
  }
  Napi::Value result(Napi::Env env) override {
    auto o = Napi::Object::New(env);
    auto ab = Napi::ArrayBuffer::New(env, res_.bytes.size());
    if (!res_.bytes.empty()) std::memcpy(ab.Data(), res_.bytes.data(), res_.bytes.size());
    o.Set("stream", Napi::Uint8Array::New(env, res_.bytes.size(), ab, 0));
    o.Set("relative_error", Napi::Number::New(env, res_.relative_error));
    o.Set("max_abs_error", Napi::Number::New(env, res_.max_abs_error));
    return o;
  }

 private:
  PredStream res_;
};

// predEstimate(data, shape, tolerance | -1, max_abs_error | -1) -> ratio
class PredEstimateWorker : public PredInputWorker {
 public:
  using PredInputWorker::PredInputWorker;

 protected:
  void run() override {
    check_finite_data(data_);
    if (data_.f64) ratio_ = pred_estimate(static_cast<const double*>(data_.p), shape_, tol_, max_abs_);
    else ratio_ = pred_estimate(static_cast<const float*>(data_.p), shape_, tol_, max_abs_);
  }
  Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, ratio_); }

 private:
  double ratio_ = 0;
};

// predDecompress(stream, slice | null) -> typed array (slice flat: start0, stop0, start1, ...)
class PredDecompressWorker : public Worker {
 public:
  PredDecompressWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    stream_ = read_bytes(info[0], "stream");
    keep(info[0]);
    if (!info[1].IsNull() && !info[1].IsUndefined()) {
      std::vector<size_t> flat = read_sizes(info[1], "slice");
      if (flat.size() % 2 != 0) throw bad("slice", "slice must have one [start, stop) per dimension");
      for (size_t j = 0; j < flat.size(); j += 2) ranges_.push_back({flat[j], flat[j + 1]});
    }
  }

 protected:
  void run() override {
    f64_ = pred_info(stream_.first, stream_.second).f64;
    out_ = pred_decompress(stream_.first, stream_.second, ranges_);
  }
  Napi::Value result(Napi::Env env) override { return to_js(env, std::move(out_), f64_); }

 private:
  std::pair<const uint8_t*, size_t> stream_{nullptr, 0};
  std::vector<std::pair<size_t, size_t>> ranges_;
  bool f64_ = false;
  Buffer out_;
};

// predDot(streams, rounds, x, distance) -> {dot: Float64Array, distance: Float64Array | null}, each
// [m_0.., e_0..] (tt.h Scaled):
// <decoded stream i, x> (and ||decoded - x||) for each stream, decoded block by block.
class PredDotWorker : public Worker {
 public:
  PredDotWorker(const Napi::CallbackInfo& info) : Worker(info.Env()) {
    if (!info[0].IsArray()) throw bad("streams", "streams must be an array of Uint8Array");
    auto arr = info[0].As<Napi::Array>();
    std::vector<size_t> rounds = read_sizes(info[1], "rounds");
    if (rounds.size() != arr.Length()) throw bad("rounds", "rounds must have one entry per stream");
    for (uint32_t i = 0; i < arr.Length(); ++i) {
      Napi::Value v = arr.Get(i);
      auto b = read_bytes(v, "streams[" + std::to_string(i) + "]");
      if (rounds[i] > 2) throw bad("rounds", "rounds entries must be 0 (none), 1 (float16) or 2 (bfloat16)");
      items_.push_back({b.first, b.second, PredRound(rounds[i])});
      keep(v);
    }
    x_ = read_array(info[2], "x");
    keep(info[2]);
    distance_ = info[3].ToBoolean().Value();
  }

 protected:
  void run() override {
    for (size_t i = 0; i < x_.n; ++i) {
      double v = x_.f64 ? static_cast<const double*>(x_.p)[i] : double(static_cast<const float*>(x_.p)[i]);
      if (!std::isfinite(v))
        throw TTError(
            "bad_request", "x",
            "x must contain only finite numbers (found " + js_number(v) + " at index " + std::to_string(i) + ").");
    }
    res_ = x_.f64 ? pred_dot(items_, static_cast<const double*>(x_.p), x_.n, distance_)
                  : pred_dot(items_, static_cast<const float*>(x_.p), x_.n, distance_);
  }
  Napi::Value result(Napi::Env env) override {
    auto o = Napi::Object::New(env);
    const size_t n = res_.size();
    auto dot = Napi::Float64Array::New(env, 2 * n);
    for (size_t i = 0; i < n; ++i) {
      dot[i] = res_[i].dot.m;
      dot[n + i] = double(res_[i].dot.e);
    }
    o.Set("dot", dot);
    if (distance_) {
      auto d = Napi::Float64Array::New(env, 2 * n);
      for (size_t i = 0; i < n; ++i) {
        d[i] = res_[i].distance.m;
        d[n + i] = double(res_[i].distance.e);
      }
      o.Set("distance", d);
    } else {
      o.Set("distance", env.Null());
    }
    return o;
  }

 private:
  std::vector<PredDotItem> items_;
  Arr x_;
  bool distance_ = false;
  std::vector<PredDotResult> res_;
};

Napi::Value PredInfoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return sync_call(env, [&]() -> Napi::Value {
    const auto [data, size] = read_bytes(info[0], "stream");
    PredInfo pi = pred_info(data, size);
    auto o = Napi::Object::New(env);
    o.Set("dtype", Napi::String::New(env, pi.f64 ? "float64" : "float32"));
    o.Set("shape", sizes_js(env, pi.shape));
    o.Set("block_shape", sizes_js(env, pi.block_shape));
    o.Set("blocks", Napi::Number::New(env, double(pi.blocks)));
    o.Set("max_abs_error", Napi::Number::New(env, pi.max_abs_error));
    o.Set("lossless", Napi::Boolean::New(env, pi.lossless));
    return o;
  });
}

void register_pred(Napi::Env env, Napi::Object exports) {
  exports.Set("predCompress", Napi::Function::New(env, start<PredCompressWorker>));
  exports.Set("predDecompress", Napi::Function::New(env, start<PredDecompressWorker>));
  exports.Set("predEstimate", Napi::Function::New(env, start<PredEstimateWorker>));
  exports.Set("predInfo", Napi::Function::New(env, PredInfoJs));
  exports.Set("predDot", Napi::Function::New(env, start<PredDotWorker>));
}

// ---- end of pred codec ----

// ---- integer lossless coding (native/pred_int.h): intEncode, intDecode ----

// A Uint8Array over `bytes`, which it takes over (no copy; freed with the array).
Napi::Value vector_js(Napi::Env env, std::vector<uint8_t>&& bytes) {
  auto* held = new std::vector<uint8_t>(std::move(bytes));
  const size_t n = held->size();
  Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(n));
  auto ab = Napi::ArrayBuffer::New(
      env, held->data(), n,
      [](Napi::Env e, void*, std::vector<uint8_t>* h) {
        Napi::MemoryManagement::AdjustExternalMemory(e, -static_cast<int64_t>(h->size()));
        delete h;
      },
      held);
  return Napi::Uint8Array::New(env, n, ab, 0);
}

// The arguments intEncode and intDecode share: (bytes, dtype code, shape).
class IntWorker : public Worker {
 public:
  IntWorker(const Napi::CallbackInfo& info, const char* field) : Worker(info.Env()) {
    in_ = read_bytes(info[0], field);
    keep(info[0]);
    const double d = read_number(info[1], "dtype");
    dtype_ = d >= 1 && d <= 8 && d == std::floor(d) ? int(d) : 0;
    if (dtype_ == 0) throw bad("dtype", "dtype must be an integer type code from 1 to 8");
    shape_ = read_sizes(info[2], "shape");
  }

 protected:
  std::pair<const uint8_t*, size_t> in_{nullptr, 0};
  int dtype_ = 0;
  std::vector<size_t> shape_;
};

// intEncode(data, dtype, shape) -> Uint8Array stream
class IntEncodeWorker : public IntWorker {
 public:
  IntEncodeWorker(const Napi::CallbackInfo& info) : IntWorker(info, "data") {}

 protected:
  void run() override { out_ = int_lossless_encode(in_.first, in_.second, dtype_, shape_); }
  Napi::Value result(Napi::Env env) override { return vector_js(env, std::move(out_)); }

 private:
  std::vector<uint8_t> out_;
};

// intDecode(stream, dtype, shape) -> Uint8Array of the values' bytes
class IntDecodeWorker : public IntWorker {
 public:
  IntDecodeWorker(const Napi::CallbackInfo& info) : IntWorker(info, "stream") {}

 protected:
  void run() override { out_ = int_lossless_decode(in_.first, in_.second, dtype_, shape_); }
  Napi::Value result(Napi::Env env) override {
    const size_t n = out_.bytes;
    return Napi::Uint8Array::New(env, n, external_js(env, std::move(out_)), 0);
  }

 private:
  Buffer out_;
};

void register_int(Napi::Env env, Napi::Object exports) {
  exports.Set("intEncode", Napi::Function::New(env, start<IntEncodeWorker>));
  exports.Set("intDecode", Napi::Function::New(env, start<IntDecodeWorker>));
}

// The compressibility sample of puts (lib/store/codec.ts deflateMayPay): the bytes' order-0
// entropy in bits per byte, and the share of positions whose next 4 bytes occurred before
// (the last position of each value under a 14-bit hash, a hit checked byte for byte).
Napi::Value ByteStatsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return sync_call(env, [&]() -> Napi::Value {
    const auto [b, n] = read_bytes(info[0], "bytes");
    uint32_t counts[256] = {};
    std::vector<uint16_t> seen(size_t(1) << 13, 0);
    size_t repeats = 0;
    for (size_t i = 0; i < n; i++) {
      counts[b[i]]++;
      if (i + 3 >= n) continue;
      uint32_t v;
      std::memcpy(&v, b + i, 4);
      const uint32_t h = (v * 0x9e3779b1u) >> 19;
      const uint32_t at = seen[h];
      uint32_t w = ~v;
      if (at > 0) std::memcpy(&w, b + at - 1, 4);
      repeats += w == v;
      seen[h] = uint16_t(i + 1);
    }
    double bits = 0;
    for (uint32_t c : counts)
      if (c > 0) {
        const double p = double(c) / double(n);
        bits -= p * std::log2(p);
      }
    auto o = Napi::Object::New(env);
    o.Set("bits", Napi::Number::New(env, bits));
    o.Set("repeated", Napi::Number::New(env, n > 3 ? double(repeats) / double(n - 3) : 0.0));
    return o;
  });
}

Napi::Value Backend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  static DeviceInfo dev = cuda_probe();
  auto o = Napi::Object::New(env);
  o.Set("isa", Napi::String::New(env, K().name));
  o.Set("isa_note", std::string(isa_note()).empty() ? env.Null() : Napi::String::New(env, isa_note()));
  o.Set("threads", Napi::Number::New(env, pool_threads()));
  o.Set("cuda_compiled", Napi::Boolean::New(env, dev.compiled));
  o.Set("cuda_device", dev.device.empty() ? env.Null() : Napi::String::New(env, dev.device));
  o.Set("reason", dev.reason.empty() ? env.Null() : Napi::String::New(env, dev.reason));
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
#if defined(M_MMAP_THRESHOLD)
  // Results and work buffers are large and short-lived: keep freed memory in the heap instead of
  // returning it to the OS at once, so the next call does not page-fault through fresh pages.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
#endif
  exports.Set("backend", Napi::Function::New(env, Backend));
  exports.Set("byteStats", Napi::Function::New(env, ByteStatsJs));
  exports.Set("compress", Napi::Function::New(env, start<CompressWorker>));
  exports.Set("reconstruct", Napi::Function::New(env, start<ReconstructWorker>));
  exports.Set("dot", Napi::Function::New(env, start<DotWorker>));
  exports.Set("dotDense", Napi::Function::New(env, start<DotDenseWorker>));
  exports.Set("round", Napi::Function::New(env, start<RoundWorker>));
  exports.Set("dotBatch", Napi::Function::New(env, start<DotBatchWorker>));
  exports.Set("dotDenseBatch", Napi::Function::New(env, start<DotDenseBatchWorker>));
  exports.Set("denseDot", Napi::Function::New(env, start<DenseDotWorker>));
  register_gpu(env, exports);
  register_pred(env, exports);
  register_int(env, exports);
  return exports;
}

}  // namespace
}  // namespace svc

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return svc::Init(env, exports); }
NODE_API_MODULE(svc_tensor, InitAddon)
