// N-API glue shared by the addon's TT, pred and GPU surfaces: argument reading, errors, the worker base.
#pragma once
#include <napi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "tt.h"

namespace svc {

// A bad_request TTError naming the offending input.
TTError bad(const std::string& field, const std::string& msg);

// The JavaScript Error for a native failure: the message, `code` (bad_request, internal,
// gpu_unavailable, out_of_memory) that lib/ maps to its error classes, and `field` when known.
Napi::Error to_error(Napi::Env env, const std::string& code, const std::string& field, const std::string& msg);
Napi::Error to_error(Napi::Env env, const TTError& e);

// An array of non-negative safe integers (sizes, modes, ranks, slices).
std::vector<size_t> read_sizes(const Napi::Value& v, const std::string& field);

// Base worker: keeps its JavaScript inputs alive, catches native errors on the worker thread
// (TTError keeps its code; running out of memory is "internal" with one fixed message) and
// settles a promise with the result or the error.
class Worker : public Napi::AsyncWorker {
 public:
  explicit Worker(Napi::Env env);
  Napi::Promise promise() { return deferred_.Promise(); }
  void keep(const Napi::Value& v);

 protected:
  virtual void run() = 0;
  virtual Napi::Value result(Napi::Env env) = 0;

  void Execute() override;
  void OnOK() override;
  void OnError(const Napi::Error& e) override;

 private:
  Napi::Promise::Deferred deferred_;
  std::vector<Napi::ObjectReference> refs_;
  bool failed_ = false;
  std::string code_, field_, message_;
};

// Validation errors found while reading arguments reject the promise the same way.
Napi::Value rejected(Napi::Env env, const TTError& e);

// The JavaScript function for worker W: W(info) reads the arguments, then runs on the pool.
template <typename W>
Napi::Value start(const Napi::CallbackInfo& info) {
  try {
    auto* w = new W(info);
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  } catch (const TTError& e) {
    return rejected(info.Env(), e);
  }
}

// A synchronous call: a TTError thrown by f is thrown to JavaScript as to_error makes it.
template <typename F>
Napi::Value sync_call(Napi::Env env, F&& f) {
  try {
    return f();
  } catch (const TTError& e) {
    throw to_error(env, e);
  }
}

}  // namespace svc
