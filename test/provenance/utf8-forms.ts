// Byte strings that are not UTF-8 and that a replacing decoder (Buffer#toString, Python's
// errors="replace", both as the WHATWG Encoding Standard says) reads as U+FFFD: put in place
// of the same number of U+FFFD in a genuine signed text, they decode with replacement to that
// very text, so a verifier that replaced them would take bytes nobody signed as the signed text.
import { MANIFEST_PAYLOAD_TYPE } from "../../server/provenance/bundle.js";
import { pae } from "../../server/provenance/receipt.js";
import { sha256Hex } from "../../lib/sha256.js";
import type { Signer } from "../../server/provenance/signer.js";

export const FFFD = "\ufffd";

/** [label, bytes, how many U+FFFD a replacing decoder reads them as]. */
export const INVALID_UTF8: ReadonlyArray<readonly [string, Buffer, number]> = [
  ["a lone byte FF", Buffer.from([0xff]), 1],
  ["a lone continuation byte 80", Buffer.from([0x80]), 1],
  ["an overlong NUL (C0 80)", Buffer.from([0xc0, 0x80]), 2],
  ["an overlong three-byte form (E0 80 80)", Buffer.from([0xe0, 0x80, 0x80]), 3],
  ["an encoded surrogate (ED A0 80)", Buffer.from([0xed, 0xa0, 0x80]), 3],
  ["a surrogate pair encoded as CESU-8 (ED A0 BD ED B8 80)", Buffer.from([0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80]), 6],
  ["a code point above U+10FFFF (F4 90 80 80)", Buffer.from([0xf4, 0x90, 0x80, 0x80]), 4],
  ["a five-byte form (F8 88 80 80 80)", Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]), 5],
  ["a truncated three-byte sequence (E2 82)", Buffer.from([0xe2, 0x82]), 1],
  ["a truncated four-byte sequence (F0 9F 98)", Buffer.from([0xf0, 0x9f, 0x98]), 1],
];

/**
 * Claims holding runs of one to six U+FFFD, each between angle brackets, and a member name
 * holding one between parentheses: a place for every form above.
 */
export const FFFD_CLAIMS: Record<string, string> = {
  ...Object.fromEntries([1, 2, 3, 4, 5, 6].map((n) => [`u${n}`, `<${FFFD.repeat(n)}>`])),
  [`(${FFFD})`]: "a member name",
};

/**
 * `text` with its run of `count` U+FFFD between `brackets` (FFFD_CLAIMS'; "" for the first
 * run anywhere) replaced by `bytes`. Throws unless the result decodes with replacement to the
 * same text as `text`: the premise of every case built from it.
 */
export function withForm(text: Buffer, bytes: Buffer, count: number, brackets: "<>" | "()" | "" = "<>"): Buffer {
  const run = Buffer.from(FFFD.repeat(count));
  const marker = Buffer.from(`${brackets.charAt(0)}${FFFD.repeat(count)}${brackets.charAt(1)}`);
  const at = text.indexOf(marker);
  if (at < 0) throw new Error(`no run of ${count} U+FFFD to replace`);
  const start = at + brackets.length / 2;
  const out = Buffer.concat([text.subarray(0, start), bytes, text.subarray(start + run.length)]);
  if (out.toString("utf8") !== text.toString("utf8")) throw new Error("the bytes do not decode with replacement to the same text");
  return out;
}

/** Bytes from parts: a string as its UTF-8, an array as the bytes it lists. */
export const bytesOf = (...parts: Array<string | number[]>): Buffer =>
  Buffer.concat(parts.map((x) => (typeof x === "string" ? Buffer.from(x) : Buffer.from(x))));

/** `text` with `bytes` put right after the first `after` in it. */
export function insertAfter(text: Buffer, after: string, bytes: Buffer): Buffer {
  const at = text.indexOf(after);
  if (at < 0) throw new Error(`${JSON.stringify(after)} is not in the text`);
  const end = at + Buffer.byteLength(after);
  return Buffer.concat([text.subarray(0, end), bytes, text.subarray(end)]);
}

/** The bundle's files with MANIFEST.sha256 written again over them (then `edit`ed) and signed by `signer`. */
export function resigned(files: Map<string, Buffer>, signer: Signer, edit: (manifest: Buffer) => Buffer = (m) => m): Map<string, Buffer> {
  const out = new Map(files);
  const manifest = edit(
    Buffer.from(
      [...out.keys()]
        .filter((n) => !n.startsWith("MANIFEST"))
        .sort()
        .map((n) => `${sha256Hex(out.get(n)!)}  ${n}\n`)
        .join(""),
    ),
  );
  out.set("MANIFEST.sha256", manifest);
  out.set("MANIFEST.sha256.sig", Buffer.from(Buffer.from(signer.signDeterministic(pae(MANIFEST_PAYLOAD_TYPE, manifest))).toString("base64") + "\n"));
  return out;
}
