// lib/native.ts fromNative: every code the addon raises becomes the library's error class.
import test from "tape";
import { GpuUnavailableError, InternalError, SvcError, ValidationError } from "../../lib/errors.js";
import { fromNative } from "../../lib/native.js";

const nativeError = (code: string | undefined, message: string, field?: string) => {
  const e = new Error(message) as Error & { code?: string; field?: string };
  if (code !== undefined) e.code = code;
  if (field !== undefined) e.field = field;
  return e;
};

test("fromNative maps bad_request, internal, gpu_unavailable, out_of_memory and unknown errors", (t) => {
  const bad = fromNative(nativeError("bad_request", "modes must multiply to the length of data", "modes"));
  t.ok(
    bad instanceof ValidationError && (bad as ValidationError).field === "modes" && (bad as SvcError).code === "bad_request",
    "bad_request -> ValidationError with its field",
  );
  const internal = fromNative(nativeError("internal", "out of memory: could not allocate 8 bytes"));
  t.ok(internal instanceof InternalError && internal.message === "out of memory: could not allocate 8 bytes", "internal -> InternalError with the message");
  const gpu = fromNative(nativeError("gpu_unavailable", "no usable CUDA device"));
  t.ok(gpu instanceof GpuUnavailableError && (gpu as SvcError).code === "gpu_unavailable", "gpu_unavailable -> GpuUnavailableError");
  const oom = fromNative(nativeError("out_of_memory", "the GPU is out of memory (load)"));
  t.ok(oom instanceof InternalError && /out of memory/.test(oom.message), "out_of_memory -> InternalError");
  const typeErr = fromNative(new TypeError("A number was expected"));
  t.ok(typeErr instanceof InternalError && typeErr.message === "A number was expected", "an N-API TypeError without a code -> InternalError");
  t.ok(fromNative("boom") instanceof InternalError, "a thrown non-Error -> InternalError");
  const own = new ValidationError("x must be ...", "x");
  t.equal(fromNative(own), own, "library errors pass through");
  t.end();
});
