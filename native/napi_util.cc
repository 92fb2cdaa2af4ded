// N-API glue shared by the addon's TT, pred and GPU surfaces: argument reading, errors, the worker base.
#include "napi_util.h"

#include <cmath>
#include <exception>
#include <new>

namespace svc {

namespace {
const char* const kOutOfMemory = "out of memory while processing the request";
}  // namespace

TTError bad(const std::string& field, const std::string& msg) { return TTError("bad_request", field, msg); }

Napi::Error to_error(Napi::Env env, const std::string& code, const std::string& field, const std::string& msg) {
  Napi::Error err = Napi::Error::New(env, msg);
  err.Set("code", Napi::String::New(env, code));
  if (!field.empty()) err.Set("field", Napi::String::New(env, field));
  return err;
}

Napi::Error to_error(Napi::Env env, const TTError& e) { return to_error(env, e.code, e.field, e.what()); }

std::vector<size_t> read_sizes(const Napi::Value& v, const std::string& field) {
  if (!v.IsArray()) throw bad(field, field + " must be an array of integers");
  auto a = v.As<Napi::Array>();
  std::vector<size_t> out;
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value x = a.Get(i);
    if (!x.IsNumber()) throw bad(field, field + " must be an array of integers");
    double d = x.As<Napi::Number>().DoubleValue();
    if (!(d >= 0 && d <= 9007199254740991.0) || std::floor(d) != d)
      throw bad(field, field + " must be an array of non-negative integers");
    out.push_back(static_cast<size_t>(d));
  }
  return out;
}

Worker::Worker(Napi::Env env) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}

void Worker::keep(const Napi::Value& v) {
  if (v.IsObject()) refs_.push_back(Napi::Persistent(v.As<Napi::Object>()));
}

void Worker::Execute() {
  try {
    run();
  } catch (const TTError& e) {
    failed_ = true, code_ = e.code, field_ = e.field, message_ = e.what();
  } catch (const std::bad_alloc&) {
    failed_ = true, code_ = "internal", field_.clear(), message_ = kOutOfMemory;
  } catch (const std::exception& e) {
    failed_ = true, code_ = "internal", field_.clear(), message_ = e.what();
  }
}

void Worker::OnOK() {
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  if (failed_) {
    deferred_.Reject(to_error(env, code_, field_, message_).Value());
    return;
  }
  deferred_.Resolve(result(env));
}

void Worker::OnError(const Napi::Error& e) { deferred_.Reject(e.Value()); }

Napi::Value rejected(Napi::Env env, const TTError& e) {
  auto d = Napi::Promise::Deferred::New(env);
  d.Reject(to_error(env, e).Value());
  return d.Promise();
}

}  // namespace svc
