// Why a value cannot be written as JSON, in words for a sentence. Free of zod, so that the
// client's quick paths (lib/filter.ts, loaded by createClient and the CLI) do not load it.

/**
 * Why `v` cannot be written as JSON, as a sentence's words: JSON.stringify throws a TypeError
 * for a cycle or a BigInt, and a RangeError where the value is nested too deeply for the stack
 * (or its text would exceed the longest string).
 */
export function jsonProblem(what: string, v: unknown): string {
  try {
    JSON.stringify(v);
    return `${what} must be a JSON object`;
  } catch (e) {
    if (!(e instanceof RangeError)) return `${what} must be a JSON object (no cycles, no BigInt)`;
    return /call stack/i.test(e.message) ? `${what} is nested too deeply to be read as JSON` : `${what} is too large to be written as JSON`;
  }
}
