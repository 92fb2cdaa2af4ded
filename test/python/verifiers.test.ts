// The Python offline verifiers against the Node ones: every genuine and forged receipt and
// bundle of the Node verifier tests, receipts and bundles made by a running appliance (JCS
// edge cases: unicode, escapes, member order, numbers) and hostile files of our own give the
// same exit code, verdict and checks from both. The Python side runs with `python3 -S`
// (no site-packages, so no numpy) and reports if numpy was loaded anyway. The cases run in one
// Node process and one Python interpreter (verify-batch.ts, verify_batch.py); a few run as
// processes of their own, as users run them.
import test from "tape";
import { spawn, spawnSync } from "node:child_process";
import { deflateRawSync } from "node:zlib";
import { mkdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { dir, p, fp, otherSigner, signer, run as runNode, cleanup } from "../provenance/cli-fixtures.js";
import { post, startApp, get } from "../provenance/helpers.js";
import { MANIFEST_PAYLOAD_TYPE, buildBundleFiles, readJsonDir } from "../../server/provenance/bundle.js";
import { artifactDigest, buildReceipt, pae, verifyReceipt } from "../../server/provenance/receipt.js";
import { sha256Hex } from "../../lib/sha256.js";
import { createBackend } from "../../server/provenance/signer.js";
import { FFFD, FFFD_CLAIMS, INVALID_UTF8, bytesOf, insertAfter, resigned as signedAgain, withForm } from "../provenance/utf8-forms.js";
import { PY_ROOT, findPython, requirePython, runPy, type PyRun } from "./helpers.js";

const py = findPython();
const ROOT = new URL("../..", import.meta.url).pathname;

// the verifier's main() under `python3 -S`; a line on stderr if numpy got imported
const WRAP =
  "import sys; sys.path.insert(0, '.'); m = __import__('svc_tensor.verify_' + sys.argv[1], fromlist=['main']); rc = m.main(sys.argv[2:]); " +
  "sys.stderr.write('NUMPY LOADED\\n' if 'numpy' in sys.modules else ''); sys.exit(rc)";
const runPython = (which: "receipt" | "bundle", args: string[]): Promise<PyRun> => runPy(py!, ["-S", "-c", WRAP, which, ...args]);

interface Case {
  name: string;
  bin: "svc-verify-receipt" | "svc-verify-bundle";
  args: string[];
  /** What both must give, beyond giving the same: the exit code, the sentence on stderr, a check's detail. */
  expect?: Expect;
}
interface Expect {
  code: number;
  stderr?: string;
  check?: [string, string];
}
const R = (name: string, ...args: string[]): Case => ({ name, bin: "svc-verify-receipt", args });
const B = (name: string, ...args: string[]): Case => ({ name, bin: "svc-verify-bundle", args });
const expecting = (c: Case, expect: Expect): Case => ({ ...c, expect });

// ---- a ZIP writer with every field under the test's control ---------------------------
interface ZipEntry {
  name: string | Buffer;
  data: Buffer;
  method?: number;
  declared?: number;
  attr?: number;
  madeBy?: number;
  flags?: number;
  deflated?: Buffer;
}
function crc32(b: Buffer): number {
  let c = ~0;
  for (const x of b) {
    c ^= x;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}
function makeZip(entries: ZipEntry[], opts: { comment?: Buffer; trailing?: Buffer } = {}): Buffer {
  const locals: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = typeof e.name === "string" ? Buffer.from(e.name, "utf8") : e.name;
    const method = e.method ?? 8;
    const body = e.deflated ?? (method === 8 ? deflateRawSync(e.data) : e.data);
    const size = e.declared ?? e.data.length;
    const lh = Buffer.alloc(30);
    lh.writeUInt32LE(0x04034b50, 0);
    lh.writeUInt16LE(20, 4);
    lh.writeUInt16LE(e.flags ?? 0x800, 6);
    lh.writeUInt16LE(method, 8);
    lh.writeUInt32LE(crc32(e.data), 14);
    lh.writeUInt32LE(body.length, 18);
    lh.writeUInt32LE(size, 22);
    lh.writeUInt16LE(name.length, 26);
    const ch = Buffer.alloc(46);
    ch.writeUInt32LE(0x02014b50, 0);
    ch.writeUInt16LE(e.madeBy ?? 0x031e, 4);
    ch.writeUInt16LE(20, 6);
    ch.writeUInt16LE(e.flags ?? 0x800, 8);
    ch.writeUInt16LE(method, 10);
    ch.writeUInt32LE(crc32(e.data), 16);
    ch.writeUInt32LE(body.length, 20);
    ch.writeUInt32LE(size, 24);
    ch.writeUInt16LE(name.length, 28);
    ch.writeUInt32LE(((e.attr ?? 0o100644) << 16) >>> 0, 38);
    ch.writeUInt32LE(offset, 42);
    locals.push(lh, name, body);
    central.push(ch, name);
    offset += 30 + name.length + body.length;
  }
  const cd = Buffer.concat(central);
  const comment = opts.comment ?? Buffer.alloc(0);
  const eocd = Buffer.alloc(22);
  eocd.writeUInt32LE(0x06054b50, 0);
  eocd.writeUInt16LE(entries.length, 8);
  eocd.writeUInt16LE(entries.length, 10);
  eocd.writeUInt32LE(cd.length, 12);
  eocd.writeUInt32LE(offset, 16);
  eocd.writeUInt16LE(comment.length, 20);
  return Buffer.concat([...locals, cd, eocd, comment, opts.trailing ?? Buffer.alloc(0)]);
}

// ---- cases -----------------------------------------------------------------------------
async function buildCases(): Promise<Case[]> {
  const pin = ["--public-key", p("pub.json")];
  // the Node CLI tests' cases (test/provenance/verify-*-cli.test.ts)
  const cases: Case[] = [
    R("valid, pinned by key file", "--receipt", p("receipt.json"), ...pin),
    R("valid, raw base64 key", "--receipt", p("receipt.json"), "--public-key", p("pub.b64")),
    R("valid, key file and fingerprint", "--receipt", p("receipt.json"), ...pin, "--expected-fingerprint", fp.toUpperCase()),
    R("valid with the artifact", "--receipt", p("receipt.json"), ...pin, "--artifact", p("artifact.bin")),
    R("another artifact", "--receipt", p("receipt.json"), ...pin, "--artifact", p("other-artifact.bin")),
    R("tampered", "--receipt", p("tampered.json"), ...pin),
    R("another instance's receipt", "--receipt", p("foreign.json"), ...pin),
    R("wrong expected fingerprint", "--receipt", p("receipt.json"), ...pin, "--expected-fingerprint", otherSigner.fingerprint),
    R("unsupported schema", "--receipt", p("v2.json"), ...pin),
    R("no pin", "--receipt", p("receipt.json")),
    R("fingerprint without a key file", "--receipt", p("receipt.json"), "--expected-fingerprint", fp),
    R("missing receipt file", "--receipt", p("nope.json"), ...pin),
    R("receipt not JSON", "--receipt", p("not-json.json"), ...pin),
    R("key file not a key", "--receipt", p("receipt.json"), "--public-key", p("artifact.bin")),
    R("unknown option", "--receipt", p("receipt.json"), "--frob"),
    R("bad fingerprint", "--receipt", p("receipt.json"), ...pin, "--expected-fingerprint", "xyz"),
    R("missing artifact", "--receipt", p("receipt.json"), ...pin, "--artifact", p("nope.bin")),
    R("integrity only with another key", "--receipt", p("receipt.json"), "--public-key", p("other-pub.json"), "--integrity-only"),
    R("integrity only without a key", "--receipt", p("receipt.json"), "--integrity-only"),
    R("integrity only with the receipt's own key", "--receipt", p("foreign.json"), "--public-key", p("other-pub.json"), "--integrity-only"),
    R("no --receipt", ...pin),
    R("--help", "--help"),
    B("valid zip", "--bundle", p("bundle.zip"), ...pin),
    B("valid zip, fingerprint pin only", "--bundle", p("bundle.zip"), "--expected-fingerprint", fp),
    B("valid json-dir", "--bundle", p("bundle-dir"), "--format", "json-dir", ...pin),
    B("valid json-dir, format guessed", "--bundle", p("bundle-dir"), ...pin),
    B("valid with the artifact", "--bundle", p("bundle.zip"), ...pin, "--artifact", p("artifact.bin")),
    B("another artifact", "--bundle", p("bundle.zip"), ...pin, "--artifact", p("other-artifact.bin")),
    B("changed file", "--bundle", p("changed.zip"), ...pin),
    B("changed manifest", "--bundle", p("manifest.zip"), ...pin),
    B("missing file", "--bundle", p("missing.zip"), ...pin),
    B("extra file", "--bundle", p("extra.zip"), ...pin),
    B("../ entry", "--bundle", p("slip.zip"), ...pin),
    B("symlink entry", "--bundle", p("link.zip"), ...pin),
    B("symlink in json-dir", "--bundle", p("link-dir"), ...pin),
    B("another instance's bundle", "--bundle", p("foreign.zip"), ...pin),
    B("wrong fingerprint", "--bundle", p("bundle.zip"), "--expected-fingerprint", otherSigner.fingerprint),
    B("evidence version 2", "--bundle", p("ev2-dir"), "--format", "json-dir", ...pin),
    B("no pin", "--bundle", p("bundle.zip")),
    B("not a zip", "--bundle", p("garbage.zip"), ...pin),
    B("missing bundle", "--bundle", p("nope.zip"), ...pin),
    B("bad format", "--bundle", p("bundle.zip"), "--format", "tar", ...pin),
    B("integrity only", "--bundle", p("foreign.zip"), "--integrity-only"),
    B("zip read as json-dir", "--bundle", p("bundle.zip"), "--format", "json-dir", ...pin),
    B("directory read as zip", "--bundle", p("bundle-dir"), "--format", "zip", ...pin),
  ];

  // ---- receipts and bundles made by a running appliance: JCS edge cases ----
  const x = join(dir, "py");
  await mkdir(x, { recursive: true });
  const app = await startApp(join(dir, "app"));
  try {
    const pubDoc = (await get(`${app.url}/v1/provenance/public-key`)).json;
    await writeFile(join(x, "app-pub.json"), JSON.stringify(pubDoc));
    const appPin = ["--public-key", join(x, "app-pub.json")];
    const claimSets: Record<string, unknown> = {
      unicode: { name: "Grüße, 日本語, emoji 😀", é: "e acute", "😀": "astral key", "\uffff": "last BMP", a: "ascii", A: "upper", "": "empty name" },
      escapes: { s: 'tab\t nl\n cr\r quote" backslash\\ slash/ ctrl\u0001\u001f del\u007f ls\u2028 ps\u2029 nul\u0000', "</script>": "<tag>&amp;" },
      numbers: {
        list: [
          0,
          -0,
          1,
          -1,
          0.1,
          0.5,
          1e21,
          1e20,
          1e-7,
          1e-6,
          1.5e-7,
          123456789012345680000,
          5e-324,
          1.7976931348623157e308,
          9007199254740991,
          -9007199254740991,
          4.35,
          1 / 3,
          2 ** 60,
          0.000001234,
          100,
          1e300,
          -1e-300,
        ],
      },
      order: { "10": 1, "2": 2, "1": 3, b: 4, "b\u0000": 5, "\u00e9": 6, "\ud83d\ude00": 7, "\uffff": 8, Z: 9, _: 10 },
      nested: { a: [[], {}, [null, true, false, "x", [1, [2, [3]]]]], deep: { l1: { l2: { l3: { l4: [{}] } } } } },
      // runs of one to six U+FFFD: the bytes that are not UTF-8 below read as these with replacement
      replacement: FFFD_CLAIMS,
    };
    let i = 0;
    for (const [label, claims] of Object.entries(claimSets)) {
      const artifact = {
        name: `art-${label}.bin`,
        sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        size_bytes: 4,
        media_type: i % 2 ? "text/plain; charset=utf-8" : "application/octet-stream",
      };
      const r = await post(`${app.url}/v1/provenance/exact`, { artifact, claims }, app.adminKey);
      if (r.status !== 201) throw new Error(`the appliance refused the ${label} receipt: ${r.status} ${r.buf.toString().slice(0, 200)}`);
      const compact = join(x, `app-${label}.json`);
      await writeFile(compact, r.buf);
      await writeFile(join(x, `app-${label}-pretty.json`), JSON.stringify(r.json, null, 2));
      cases.push(R(`appliance receipt (${label})`, "--receipt", compact, ...appPin));
      cases.push(
        R(`appliance receipt (${label}), indented`, "--receipt", join(x, `app-${label}-pretty.json`), ...appPin, "--expected-fingerprint", pubDoc.fingerprint),
      );
      const b = await post(`${app.url}/v1/provenance/evidence-bundle`, { receipt: r.json }, app.adminKey);
      if (b.status !== 200) throw new Error(`the appliance refused the ${label} bundle: ${b.status}`);
      await writeFile(join(x, `app-${label}.zip`), b.buf);
      cases.push(B(`appliance bundle (${label})`, "--bundle", join(x, `app-${label}.zip`), ...appPin));
      i++;
    }
    // ---- text-level variants of a genuine receipt: same value or forged ----
    const text = await readFile(join(x, "app-numbers.json"), "utf8");
    const variants: Array<[string, string]> = [
      ["serial written 1.0 (same value)", text.replace(/"serial":(\d+)/, '"serial":$1.0')],
      ["1e21 written 1E21 (same value)", text.replace("1e+21", "1E21")],
      ["0.1 written 1e-1 (same value)", text.replace(",0.1,", ",1e-1,")],
      ["a BOM before the text", "\ufeff" + text],
      ["whitespace everywhere", text.replace(/,/g, " ,\n\t").replace(/:/g, " :\r\n ")],
      ["inexact number (2^53 + 1)", text.replace("9007199254740991", "9007199254740993")],
      ["number beyond a double", text.replace("1e+300", "1e400")],
      ["a digit more than the double keeps", text.replace(",0.1,", ",0.10000000000000000001,")],
      ["duplicate member in claims", text.replace('"claims":{', '"claims":{"list":[],')],
      ["duplicate top-level member", text.replace('"serial":', '"serial":7,"serial":')],
      ["lone surrogate", text.replace('"claims":{', '"claims":{"x":"\\ud800",')],
      ["lone surrogate in a name", text.replace('"claims":{', '"claims":{"\\udc00":1,')],
      ["escaped pair (same value)", text.replace('"art-numbers.bin"', '"art-numbers.bin"')],
      ["__proto__ member at the top", text.replace('{"schema"', '{"__proto__":{},"schema"')],
      ["__proto__ member in the artifact", text.replace('"artifact":{', '"artifact":{"__proto__":1,')],
      ["extra top-level member", text.replace('{"schema"', '{"extra":1,"schema"')],
      ["claims nested 40 deep", text.replace('"claims":{', `"claims":{"deep":${"[".repeat(40)}${"]".repeat(40)},`)],
      ["body nested 70 deep", text.replace('"claims":{', `"claims":{"deep":${'{"a":'.repeat(70)}1${"}".repeat(70)},`)],
      ["invalid UTF-8 in a string", text.replace("art-numbers", "art-\u0000numbers")],
      ["an array", "[" + text + "]"],
      ["null", "null"],
      ["a string", '"svc.provenance.receipt.v1"'],
      ["trailing garbage", text + " x"],
      ["two values", text + " {}"],
      ["NaN", text.replace("1e+300", "NaN")],
      ["single quotes", text.replace('"serial"', "'serial'")],
      ["leading zero", text.replace('"serial":', '"serial":0')],
      ["hex escape case", text.replace('"art-numbers.bin"', '"\\u0061rt-numbers.bin"')],
      ["schema of another type", text.replace('"schema":"svc.provenance.receipt.v1"', '"schema":1')],
      ["long unsupported schema", text.replace('"schema":"svc.provenance.receipt.v1"', `"schema":"${"😀".repeat(60)}"`)],
      ["signature value not base64", text.replace(/"value":"[A-Za-z0-9+/]{4}/, '"value":"!!!!')],
      ["signature cut short", text.replace(/"value":"[A-Za-z0-9+/]{8}/, '"value":"')],
      ["size_bytes 4.5", text.replace('"size_bytes":4', '"size_bytes":4.5')],
      ["size_bytes -0 (same value)", text.replace('"size_bytes":4', '"size_bytes":-0')],
      ["too many values", text.replace('"claims":{', `"claims":{"many":[${"0,".repeat(100_001)}0],`)],
      ["deep array nesting", "[".repeat(50_000) + "]".repeat(50_000)],
      ["a raw control character", text.replace("art-numbers", "art-\u0001numbers")],
      ["an exponent of 5,000 digits (same value)", text.replace(/"serial":(\d+)/, `"serial":$1e${"0".repeat(5000)}`)],
      ["an exponent of 5,000 digits, past a double", text.replace("1e+300", `1e${"9".repeat(5000)}`)],
      ["an exponent of 5,000 digits, below a double", text.replace("1e+300", `1e-${"9".repeat(5000)}`)],
      ["a member name of 5,000 digits", text.replace('"claims":{', `"claims":{"${"9".repeat(5000)}":1,`)],
      ["an artifact name of 1,025 astral characters", text.replace('"art-numbers.bin"', `"${"😀".repeat(1025)}"`)],
    ];
    let v = 0;
    for (const [label, body] of variants) {
      const f = join(x, `variant-${v++}.json`);
      await writeFile(
        f,
        label === "invalid UTF-8 in a string"
          ? Buffer.from(body.replace("\u0000", "\u0001"), "utf8").fill(0xff, body.indexOf("\u0000"), body.indexOf("\u0000") + 1)
          : body,
      );
      const c = R(`receipt: ${label}`, "--receipt", f, ...appPin);
      cases.push(label === "invalid UTF-8 in a string" ? expecting(c, { code: 2, stderr: `The receipt ${f} is not valid UTF-8.` }) : c);
    }
    // ---- receipt files that are not UTF-8: read with replacement characters, the genuine text ----
    const replacement = await readFile(join(x, "app-replacement.json"));
    const notUtf8Receipts: Array<[string, Buffer]> = [
      ...INVALID_UTF8.map(([label, bytes, n]): [string, Buffer] => [label, withForm(replacement, bytes, n)]),
      ["a truncated sequence at the end of the file", Buffer.concat([replacement, Buffer.from([0xf0, 0x9f, 0x98])])],
      ["a BOM, then an encoded surrogate", Buffer.concat([Buffer.from("\ufeff"), withForm(replacement, Buffer.from([0xed, 0xb0, 0x80]), 3)])],
      ["a UTF-16 BOM (FF FE) before the text", Buffer.concat([Buffer.from([0xff, 0xfe]), replacement])],
      ["a lone byte FF in a member name", withForm(replacement, Buffer.from([0xff]), 1, "()")],
    ];
    for (const [k, [label, bytes]] of notUtf8Receipts.entries()) {
      const f = join(x, `not-utf8-${k}.json`);
      await writeFile(f, bytes);
      cases.push(expecting(R(`receipt not UTF-8: ${label}`, "--receipt", f, ...appPin), { code: 2, stderr: `The receipt ${f} is not valid UTF-8.` }));
    }
    // the BOM: one is dropped from a receipt file by both (RFC 8259 lets a parser ignore it), a second is not JSON
    await writeFile(join(x, "two-boms.json"), Buffer.concat([Buffer.from("\ufeff\ufeff"), replacement]));
    cases.push(R("receipt: two BOMs before the text", "--receipt", join(x, "two-boms.json"), ...appPin));
    cases.push(R("receipt with the artifact's digest", "--receipt", join(x, "app-unicode.json"), ...appPin, "--artifact", p("artifact.bin")));
    // zod counts a string's length in code points: 1,024 astral characters are a valid name
    const astral = await post(
      `${app.url}/v1/provenance/exact`,
      {
        artifact: {
          name: "😀".repeat(1024),
          sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
          size_bytes: 4,
          media_type: "application/octet-stream",
        },
        claims: {},
      },
      app.adminKey,
    );
    if (astral.status !== 201) throw new Error(`the appliance refused the astral name: ${astral.status}`);
    await writeFile(join(x, "app-astral.json"), astral.buf);
    const astralBundle = await post(`${app.url}/v1/provenance/evidence-bundle`, { receipt: astral.json }, app.adminKey);
    await writeFile(join(x, "app-astral.zip"), astralBundle.buf);
    cases.push(
      R("appliance receipt, an artifact name of 1,024 astral characters", "--receipt", join(x, "app-astral.json"), ...appPin),
      B("appliance bundle, an artifact name of 1,024 astral characters", "--bundle", join(x, "app-astral.zip"), ...appPin),
    );

    // ---- the command line and the key file ----
    const keyText = JSON.stringify(pubDoc);
    await writeFile(join(x, "key-dup.json"), keyText.replace("{", `{"public_key":"${pubDoc.public_key}",`));
    await writeFile(join(x, "key-badfp.json"), JSON.stringify({ ...pubDoc, fingerprint: "0".repeat(64) }));
    const other = JSON.parse(await readFile(p("other-pub.json"), "utf8"));
    await writeFile(
      join(x, "key-retired.json"),
      JSON.stringify({ ...other, retired: [{ public_key: pubDoc.public_key, fingerprint: pubDoc.fingerprint, retired_at: "2026-11-22T00:00:00.000Z" }] }),
    );
    await writeFile(join(x, "key-spaced.b64"), `\ufeff  ${pubDoc.public_key.replace(/(.{76})/g, "$1\n")}\n\n`);
    await writeFile(join(x, "key-short.b64"), pubDoc.public_key.slice(0, 100));
    await writeFile(join(x, "key-exp.json"), keyText.replace("{", `{"extra":1e${"0".repeat(5000)},`));
    const keyBytes = Buffer.from(keyText);
    const notUtf8Keys: Array<[string, Buffer]> = [
      ["a member holding a lone byte FF", insertAfter(keyBytes, "{", bytesOf('"note":"', [0xff], '",'))],
      ["an overlong NUL in a member name", insertAfter(keyBytes, "{", bytesOf('"', [0xc0, 0x80], '":1,'))],
      ["a truncated sequence at its end", Buffer.concat([keyBytes, Buffer.from([0xe2, 0x82])])],
      ["a BOM, then an encoded surrogate", Buffer.concat([Buffer.from("\ufeff"), insertAfter(keyBytes, "{", bytesOf('"note":"', [0xed, 0xa0, 0x80], '",'))])],
      ["raw base64 with a byte FF after it", Buffer.from(`${pubDoc.public_key}\n\u00ff`, "latin1")],
      [
        "raw base64 with a code point above U+10FFFF in a line break",
        bytesOf(pubDoc.public_key.slice(0, 76), [0xf4, 0x90, 0x80, 0x80], pubDoc.public_key.slice(76)),
      ],
    ];
    for (const [k, [label, bytes]] of notUtf8Keys.entries()) {
      const f = join(x, `key-not-utf8-${k}`);
      await writeFile(f, bytes);
      const expect = { code: 2, stderr: `The public key file ${f} is not valid UTF-8.` };
      cases.push(expecting(R(`key file not UTF-8: ${label}`, "--receipt", join(x, "app-replacement.json"), "--public-key", f), expect));
      if (k === 0) cases.push(expecting(B(`key file not UTF-8: ${label}`, "--bundle", join(x, "app-replacement.zip"), "--public-key", f), expect));
    }
    const fifo = join(x, "key.fifo");
    if (spawnSync("mkfifo", [fifo]).status !== 0) throw new Error("mkfifo failed");
    await writeFile(join(x, "big-receipt.json"), Buffer.alloc(4 * 1024 * 1024 + 1, 0x20));
    const rcpt = join(x, "app-unicode.json");
    cases.push(
      R("key file with a repeated member", "--receipt", rcpt, "--public-key", join(x, "key-dup.json")),
      R("key file whose fingerprint is not its key", "--receipt", rcpt, "--public-key", join(x, "key-badfp.json")),
      R("signer among the retired keys", "--receipt", rcpt, "--public-key", join(x, "key-retired.json")),
      R("raw key with a BOM, spaces and line breaks", "--receipt", rcpt, "--public-key", join(x, "key-spaced.b64")),
      R("raw key too short", "--receipt", rcpt, "--public-key", join(x, "key-short.b64")),
      R("key file with an exponent of 5,000 digits", "--receipt", rcpt, "--public-key", join(x, "key-exp.json")),
      R("key file is a FIFO", "--receipt", rcpt, "--public-key", fifo),
      R("artifact is a device", "--receipt", rcpt, ...appPin, "--artifact", "/dev/zero"),
      R("artifact is a FIFO", "--receipt", rcpt, ...appPin, "--artifact", fifo),
      B("artifact is a FIFO", "--bundle", join(x, "app-unicode.zip"), ...appPin, "--artifact", fifo),
      B("key file is a FIFO", "--bundle", join(x, "app-unicode.zip"), "--public-key", fifo),
      R("--receipt=PATH form", `--receipt=${rcpt}`, `--public-key=${join(x, "app-pub.json")}`),
      R("a value for a boolean option", "--receipt", rcpt, ...appPin, "--integrity-only=yes"),
      R("a positional argument", "--receipt", rcpt, ...appPin, "extra"),
      R("an option's value missing", ...appPin, "--receipt"),
      R("an empty --receipt", "--receipt=", ...appPin),
      R("receipt is a directory", "--receipt", x, ...appPin),
      R("artifact is a directory", "--receipt", rcpt, ...appPin, "--artifact", x),
      R("receipt over 4 MiB", "--receipt", join(x, "big-receipt.json"), ...appPin),
      B("bundle pinned by a retired key", "--bundle", join(x, "app-unicode.zip"), "--public-key", join(x, "key-retired.json")),
      B("pinned key and another expected fingerprint", "--bundle", join(x, "app-unicode.zip"), ...appPin, "--expected-fingerprint", otherSigner.fingerprint),
    );

    // ---- hostile and odd ZIPs built field by field from the genuine bundle's files ----
    const yauzlFiles = await (await import("../../server/provenance/bundle.js")).readZip(await readFile(join(x, "app-unicode.zip")));
    const good = [...yauzlFiles.entries()].map(([name, data]) => ({ name, data }));
    const zips: Array<[string, Buffer]> = [
      ["hand-made, deflated (valid)", makeZip(good)],
      ["hand-made, stored (valid)", makeZip(good.map((e) => ({ ...e, method: 0 })))],
      ["made by DOS, no mode bits (valid)", makeZip(good.map((e) => ({ ...e, madeBy: 20, attr: 0 })))],
      ["a comment (valid)", makeZip(good, { comment: Buffer.from("a comment") })],
      ["bytes after the end record", makeZip(good, { trailing: Buffer.from("junk") })],
      [
        "inflates past its declared size (bomb)",
        makeZip(good.map((e) => (e.name === "verification.json" ? { ...e, data: Buffer.alloc(3 * 1024 * 1024), declared: 1000 } : e))),
      ],
      [
        "declares more than 4 MiB",
        makeZip(good.map((e) => (e.name === "verification.json" ? { ...e, data: Buffer.alloc(10), declared: 5 * 1024 * 1024 } : e))),
      ],
      [
        "declares 9 MiB in all",
        makeZip([
          ...good.slice(0, 6).map((e) => ({ ...e })),
          ...[1, 2, 3].map((k) => ({ name: `pad${k}`, data: Buffer.alloc(10), declared: 3 * 1024 * 1024 })),
          good[6]!,
        ]),
      ],
      ["inflates to less than declared", makeZip(good.map((e) => (e.name === "verification.json" ? { ...e, declared: e.data.length + 5 } : e)))],
      ["17 entries", makeZip([...good, ...Array.from({ length: 10 }, (_, k) => ({ name: `x${k}`, data: Buffer.from("x") }))])],
      ["an entry twice", makeZip([...good, good[0]!])],
      ["absolute path", makeZip([...good, { name: "/etc/passwd", data: Buffer.from("x") }])],
      ["drive letter", makeZip([...good, { name: "C:evil", data: Buffer.from("x") }])],
      ["backslash", makeZip([...good, { name: "a\\b", data: Buffer.from("x") }])],
      ["dot segment", makeZip([...good, { name: "./receipt.json", data: Buffer.from("x") }])],
      ["directory entry", makeZip([...good, { name: "d/", data: Buffer.alloc(0), attr: 0o040755 }])],
      ["a FIFO entry", makeZip([...good, { name: "fifo", data: Buffer.alloc(0), attr: 0o010644 }])],
      ["a symlink", makeZip([...good, { name: "lnk", data: Buffer.from("/etc/passwd"), attr: 0o120777 }])],
      ["NUL in a name", makeZip([...good, { name: "a\u0000b", data: Buffer.from("x") }])],
      ["invalid UTF-8 name", makeZip([...good, { name: Buffer.from([0x61, 0xff, 0x62]), data: Buffer.from("x") }])],
      ["stored size mismatch", makeZip(good.map((e) => (e.name === "receipt.json" ? { ...e, method: 0, declared: e.data.length + 1 } : e)))],
      ["unsupported method", makeZip(good.map((e) => (e.name === "receipt.json" ? { ...e, method: 12 } : e)))],
      ["encrypted flag", makeZip(good.map((e) => (e.name === "receipt.json" ? { ...e, flags: 0x801 } : e)))],
      ["strong encryption flag", makeZip(good.map((e) => (e.name === "receipt.json" ? { ...e, flags: 0x841 } : e)))],
      ["corrupt deflate data", makeZip(good.map((e) => (e.name === "receipt.json" ? { ...e, deflated: Buffer.from("not deflate data at all") } : e)))],
      ["truncated deflate data", makeZip(good.map((e) => (e.name === "receipt.json" ? { ...e, deflated: deflateRawSync(e.data).subarray(0, 20) } : e)))],
      ["no entries", makeZip([])],
      ["empty file", Buffer.alloc(0)],
    ];
    const full = makeZip(good);
    zips.push(["truncated archive", full.subarray(0, full.length - 10)]);
    zips.push(["central directory cut", Buffer.concat([full.subarray(0, full.length - 22 - 40), full.subarray(full.length - 22)])]);
    const badLocal = Buffer.from(full);
    badLocal.writeUInt32LE(0x12345678, 0);
    zips.push(["bad local header signature", badLocal]);
    let z = 0;
    for (const [label, buf] of zips) {
      const f = join(x, `zip-${z++}.zip`);
      await writeFile(f, buf);
      cases.push(B(`zip: ${label}`, "--bundle", f, ...appPin));
    }
    cases.push(
      B(
        "zip: over 8 MiB on disk",
        "--bundle",
        await (async () => {
          const f = join(x, "big.zip");
          await writeFile(f, Buffer.alloc(8 * 1024 * 1024 + 1));
          return f;
        })(),
        ...appPin,
      ),
    );

    // ---- json-dir oddities ----
    const writeDir = async (d: string, entries: Array<{ name: string; data: Buffer }>) => {
      await mkdir(d, { recursive: true });
      for (const e of entries) await writeFile(join(d, e.name), e.data);
      return d;
    };
    const sub = await writeDir(join(x, "dir-sub"), good);
    await mkdir(join(sub, "nested"));
    cases.push(B("json-dir with a subdirectory", "--bundle", sub, ...appPin));
    const meta = JSON.parse(good.find((e) => e.name === "signature-metadata.json")!.data.toString());
    for (const [label, ev] of [
      ['evidence version "1"', "1"],
      ["evidence version 1.0", 1.0],
      ["evidence version null", null],
    ] as const) {
      const d = await writeDir(
        join(x, `dir-ev-${String(ev)}`),
        good.map((e) => (e.name === "signature-metadata.json" ? { ...e, data: Buffer.from(JSON.stringify({ ...meta, evidence_version: ev })) } : e)),
      );
      cases.push(B(`json-dir: ${label}`, "--bundle", d, ...appPin));
    }
    const dupMeta = await writeDir(
      join(x, "dir-dup"),
      good.map((e) => (e.name === "signer-public-key.json" ? { ...e, data: Buffer.from(e.data.toString().replace("{", '{"algorithm":"x",')) } : e)),
    );
    cases.push(B("json-dir: duplicate member in the key file (integrity only)", "--bundle", dupMeta, "--integrity-only"));
    // files changed and the manifest signed again by the fixture's signer (pinned by pub.json)
    const fixture = await readJsonDir(p("bundle-dir"));
    const resigned = async (label: string, file: string, edit: (text: string) => string) => {
      const files = new Map(fixture);
      files.set(file, Buffer.from(edit(files.get(file)!.toString())));
      const manifest = Buffer.from(
        [...files.keys()]
          .filter((n) => !n.startsWith("MANIFEST"))
          .sort()
          .map((n) => `${sha256Hex(files.get(n)!)}  ${n}\n`)
          .join(""),
      );
      files.set("MANIFEST.sha256", manifest);
      files.set("MANIFEST.sha256.sig", Buffer.from(Buffer.from(signer.signDeterministic(pae(MANIFEST_PAYLOAD_TYPE, manifest))).toString("base64") + "\n"));
      const d = await writeDir(
        join(x, `dir-resigned-${label}`),
        [...files].map(([name, data]) => ({ name, data })),
      );
      cases.push(B(`json-dir, manifest signed again: ${label}`, "--bundle", d, "--public-key", p("pub.json")));
    };
    await resigned("nothing changed (valid)", "receipt.json", (s) => s);
    await resigned("__proto__ in the signature metadata", "signature-metadata.json", (s) => s.replace("{", '{"__proto__":{},'));
    await resigned("__proto__ in the key file", "signer-public-key.json", (s) => s.replace("{", '{"__proto__":null,'));
    await resigned("evidence version nested 3,000 deep", "signature-metadata.json", (s) =>
      s.replace(/"evidence_version": \d+/, `"evidence_version": ${"[".repeat(3000)}${"]".repeat(3000)}`),
    );
    await resigned("evidence version with integer-like names", "signature-metadata.json", (s) =>
      s.replace(/"evidence_version": \d+/, '"evidence_version": {"b":1,"2":1,"a":1,"1":1}'),
    );
    // ---- bundle files that are not UTF-8, the manifest signed again over them (pinned by pub.json) ----
    // the receipt and the artifact name hold U+FFFD; read with replacement, each is the genuine bundle
    const fffdReceipt = buildReceipt(
      { artifact: { name: `a${FFFD}.bin`, ...artifactDigest(Buffer.from("bytes")), media_type: "application/octet-stream" }, claims: FFFD_CLAIMS },
      { serial: 3, previous: null },
      signer,
      new Date("2026-11-22T01:00:00.000Z"),
    );
    const known = [{ publicKey: signer.publicKey, fingerprint: signer.fingerprint }];
    const fffdVerification = verifyReceipt(fffdReceipt, { backend: await createBackend("noble"), keys: known, trustedFingerprints: [signer.fingerprint] });
    const fffdFiles = new Map(
      buildBundleFiles({
        receipt: fffdReceipt,
        verification: fffdVerification,
        signer,
        exportedAt: new Date("2026-11-22T02:00:00.000Z"),
        applianceVersion: "0.1.0",
      }),
    );
    const edited = (name: string, to: (b: Buffer) => Buffer) => signedAgain(new Map(fffdFiles).set(name, to(fffdFiles.get(name)!)), signer);
    const notUtf8Bundles: Array<[string, string, Map<string, Buffer>]> = [
      ...INVALID_UTF8.map(([label, bytes, n]): [string, string, Map<string, Buffer>] => [
        `receipt.json, ${label}`,
        "receipt.json",
        edited("receipt.json", (b) => withForm(b, bytes, n)),
      ]),
      ["receipt.json, a truncated sequence at its end", "receipt.json", edited("receipt.json", (b) => Buffer.concat([b, Buffer.from([0xe2, 0x82])]))],
      [
        "artifact-manifest.json, a lone byte FF in the name",
        "artifact-manifest.json",
        edited("artifact-manifest.json", (b) => withForm(b, Buffer.from([0xff]), 1, "")),
      ],
      [
        "verification.json, an encoded surrogate",
        "verification.json",
        edited("verification.json", (b) => insertAfter(b, '"0.1.0', Buffer.from([0xed, 0xa0, 0x80]))),
      ],
      [
        "signature-metadata.json, an overlong NUL in the schema",
        "signature-metadata.json",
        edited("signature-metadata.json", (b) => insertAfter(b, '"schema": "svc.provenance.receipt.v1', Buffer.from([0xc0, 0x80]))),
      ],
      [
        "signer-public-key.json, a lone byte FF in the algorithm",
        "signer-public-key.json",
        edited("signer-public-key.json", (b) => insertAfter(b, "ML-DSA-65", Buffer.from([0xff]))),
      ],
      ["MANIFEST.sha256, a line of one byte FF", "MANIFEST.sha256", signedAgain(fffdFiles, signer, (m) => Buffer.concat([m, Buffer.from([0xff, 0x0a])]))],
      [
        "MANIFEST.sha256.sig, a byte FF after the base64",
        "MANIFEST.sha256.sig",
        new Map(fffdFiles).set("MANIFEST.sha256.sig", Buffer.concat([fffdFiles.get("MANIFEST.sha256.sig")!, Buffer.from([0xff])])),
      ],
    ];
    const pubPin = ["--public-key", p("pub.json")];
    cases.push(
      B(
        "json-dir with U+FFFD in its strings (valid)",
        "--bundle",
        await writeDir(
          join(x, "dir-fffd"),
          [...fffdFiles].map(([name, data]) => ({ name, data })),
        ),
        ...pubPin,
      ),
    );
    for (const [k, [label, file, files]] of notUtf8Bundles.entries()) {
      const entries = [...files].map(([name, data]) => ({ name, data }));
      const expect: Expect = { code: 1, check: ["bundle_files", `${file} is not valid UTF-8.`] };
      const d = await writeDir(join(x, `dir-not-utf8-file-${k}`), entries);
      cases.push(expecting(B(`json-dir file not UTF-8: ${label}`, "--bundle", d, ...pubPin), expect));
      const z = join(x, `zip-not-utf8-file-${k}.zip`);
      await writeFile(z, makeZip(entries));
      cases.push(expecting(B(`zip file not UTF-8: ${label}`, "--bundle", z, ...pubPin), expect));
    }
    // a BOM before a bundle's JSON file: not JSON to either (a bundle's files are written without one)
    const bomDir = await writeDir(
      join(x, "dir-bom"),
      [...edited("receipt.json", (b) => Buffer.concat([Buffer.from("\ufeff"), b]))].map(([name, data]) => ({ name, data })),
    );
    cases.push(B("json-dir, manifest signed again: a BOM before receipt.json", "--bundle", bomDir, ...pubPin));
    const bomKeyDir = await writeDir(
      join(x, "dir-bom-key"),
      [...edited("signer-public-key.json", (b) => Buffer.concat([Buffer.from("\ufeff"), b]))].map(([name, data]) => ({ name, data })),
    );
    cases.push(B("json-dir, manifest signed again: a BOM before signer-public-key.json", "--bundle", bomKeyDir, ...pubPin));
    // names that are not UTF-8: shown and matched as their decoding, read by their own bytes
    const notUtf8 = await writeDir(join(x, "dir-not-utf8"), good);
    const rawName = (d: string, last: number) => Buffer.concat([Buffer.from(join(d, "x")), Buffer.from([last])]);
    await writeFile(rawName(notUtf8, 0xff), "x");
    cases.push(B("json-dir: a name that is not UTF-8", "--bundle", notUtf8, ...appPin));
    const twice = await writeDir(join(x, "dir-not-utf8-twice"), good);
    for (const b of [0xfe, 0xff]) await writeFile(rawName(twice, b), "x");
    cases.push(B("json-dir: two names with the same decoding", "--bundle", twice, ...appPin));
    const big = await writeDir(join(x, "dir-big"), [...good, { name: "big", data: Buffer.alloc(4 * 1024 * 1024 + 1) }]);
    cases.push(B("json-dir: a file over 4 MiB", "--bundle", big, ...appPin));
    const linkTarget = await writeDir(join(x, "dir-target"), good);
    await symlink(linkTarget, join(x, "dir-link"));
    cases.push(B("json-dir reached through a symlink", "--bundle", join(x, "dir-link"), "--format", "json-dir", ...appPin));
  } finally {
    await app.close();
  }
  return cases;
}

function compare(t: test.Test, c: Case, node: { code: number | null; stdout: string; stderr: string }, pyr: PyRun): void {
  t.equal(
    pyr.code,
    node.code,
    `${c.bin} ${c.name}: exit ${node.code} from both${pyr.code !== node.code ? ` (python: ${pyr.stdout.slice(0, 400)}${pyr.stderr.slice(-600)})` : ""}`,
  );
  t.notOk(pyr.stderr.includes("NUMPY LOADED"), `${c.name}: the Python verifier did not import numpy`);
  if (node.code === 2) {
    t.equal(pyr.stderr.trim().split("\n").length, 1, `${c.name}: one line on stderr from Python (${pyr.stderr.trim().slice(0, 200)})`);
    return;
  }
  if (c.args.includes("--help")) {
    t.match(pyr.stdout, /Exit codes: 0 valid, 1 verification failed/, `${c.name}: help printed`);
    return;
  }
  let a: any = null;
  let b: any = null;
  try {
    a = JSON.parse(node.stdout);
    b = JSON.parse(pyr.stdout);
  } catch {
    t.fail(`${c.name}: both print JSON (node: ${node.stdout.slice(0, 200)} python: ${pyr.stdout.slice(0, 200)}${pyr.stderr.slice(0, 300)})`);
    return;
  }
  const summary = (r: any) => ({
    verdict: r.verdict,
    valid: r.valid,
    receipt_id: r.receipt_id,
    signer_fingerprint: r.signer_fingerprint,
    issuer_authenticated: r.issuer_authenticated,
    checks: r.checks.map((k: any) => `${k.name}:${k.ok}`),
  });
  t.deepEqual(summary(b), summary(a), `${c.name}: same verdict (${a.verdict}) and checks`);
  // the wording of a malformed field comes from zod on the Node side; every other detail is the same sentence
  const details = (r: any) =>
    r.checks.filter((k: any) => k.ok || !["signed_fields", "artifact_commitment"].includes(k.name)).map((k: any) => `${k.name}: ${k.detail}`);
  t.deepEqual(details(b), details(a), `${c.name}: same details`);
}

/** Each verifier gives what the case expects (its --json output read for a check's detail). */
function expected(t: test.Test, c: Case, e: Expect, node: { code: number | null; stdout: string; stderr: string }, pyr: PyRun): void {
  for (const [who, r] of [
    ["node", node],
    ["python", pyr],
  ] as const) {
    const got: Record<string, unknown> = { code: r.code };
    const want: Record<string, unknown> = { code: e.code };
    if (e.stderr !== undefined) {
      got.stderr = r.stderr;
      want.stderr = e.stderr + "\n";
    }
    if (e.check) {
      let detail: unknown = null;
      try {
        detail = (JSON.parse(r.stdout) as { checks: Array<{ name: string; detail: string }> }).checks.find((k) => k.name === e.check![0])?.detail ?? null;
      } catch {
        /* not JSON: no detail */
      }
      got.detail = detail;
      want.detail = e.check[1];
    }
    t.deepEqual(got, want, `${c.bin} ${c.name}: ${who} exits ${e.code}${e.stderr ? `, ${e.stderr}` : ""}${e.check ? `, ${e.check[0]}: ${e.check[1]}` : ""}`);
  }
}

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Feeds one JSON line per case to a batch runner's standard input; its answers, a line each. */
function batch(cmd: string, args: string[], cwd: string, lines: unknown[]): Promise<Ran[]> {
  return new Promise((resolve, reject) => {
    const c = spawn(cmd, args, { cwd, stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, SVC_ENGINE_LOG_LEVEL: "", PYTHONDONTWRITEBYTECODE: "1" } });
    let stdout = "";
    let stderr = "";
    c.stdout.on("data", (d) => (stdout += d));
    c.stderr.on("data", (d) => (stderr += d));
    c.on("error", reject);
    c.on("close", (code) => {
      const out = stdout
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as Ran);
      if (code !== 0 || out.length !== lines.length)
        reject(new Error(`${cmd} ${args.join(" ")} exited ${code} after ${out.length} of ${lines.length} cases: ${stderr.slice(-2000)}`));
      else resolve(out);
    });
    c.stdin.end(lines.map((l) => JSON.stringify(l) + "\n").join(""));
  });
}

test("the Python verifiers give the Node verifiers' exit code, verdict and checks on every case", async (t) => {
  if (!requirePython(t, py, "python3 (3.11 or later)")) return void (await cleanup());
  const cases = await buildCases();
  const withJson = cases.map((c) => [...c.args, ...(c.args.includes("--help") ? [] : ["--json"])]);
  // every case in one Node process and one Python interpreter, the two side by side: a process
  // per case took most of this file's time (the commands as processes: the tests below and
  // test/provenance/verify-*-cli.test.ts)
  const [nodeRuns, pyRuns] = await Promise.all([
    batch(
      process.execPath,
      ["--import", "tsx", "test/python/verify-batch.ts"],
      ROOT,
      cases.map((c, i) => ({ bin: c.bin, args: withJson[i] })),
    ),
    batch(
      py!,
      ["-S", join(ROOT, "test/python/verify_batch.py")],
      PY_ROOT,
      cases.map((c, i) => ({ which: c.bin === "svc-verify-receipt" ? "receipt" : "bundle", args: withJson[i] })),
    ),
  ]);
  cases.forEach((c, i) => {
    const pyr = { ...pyRuns[i]!, ms: 0 };
    compare(t, c, nodeRuns[i]!, pyr);
    if (c.expect) expected(t, c, c.expect, nodeRuns[i]!, pyr);
  });
  t.ok(cases.length > 100, `${cases.length} cases compared`);
});

test("human output is the same text from both", async (t) => {
  if (!requirePython(t, py, "python3 (3.11 or later)")) return;
  const pin = ["--public-key", p("pub.json")];
  for (const c of [
    R("valid", "--receipt", p("receipt.json"), ...pin),
    R("tampered", "--receipt", p("tampered.json"), ...pin),
    R("integrity only", "--receipt", p("foreign.json"), "--public-key", p("other-pub.json"), "--integrity-only"),
    B("valid zip", "--bundle", p("bundle.zip"), ...pin),
    B("symlink entry", "--bundle", p("link.zip"), ...pin),
  ]) {
    const node = await runNode(c.bin, c.args);
    const pyr = await runPython(c.bin === "svc-verify-receipt" ? "receipt" : "bundle", c.args);
    t.equal(pyr.stdout, node.stdout, `${c.bin} ${c.name}: the same lines`);
  }
});

test("the modules run as python3 -m with PYTHONPATH and with no network", async (t) => {
  if (!requirePython(t, py, "python3 (3.11 or later)")) return;
  const env = { PYTHONPATH: PY_ROOT };
  const rec = ["-m", "svc_tensor.verify_receipt", "--receipt", p("receipt.json"), "--public-key", p("pub.json"), "--artifact", p("artifact.bin")];
  const bun = ["-m", "svc_tensor.verify_bundle", "--bundle", p("bundle.zip"), "--public-key", p("pub.json")];
  const unshare = spawnSync("unshare", ["-n", "true"], { timeout: 30_000 });
  if (unshare.status === 0) {
    for (const args of [rec, bun]) {
      const r = await runPy("unshare", ["-n", py!, ...args], env);
      t.equal(r.code, 0, `${args[1]} exits 0 in a network namespace with no interfaces up (${r.stderr.trim().slice(0, 200)})`);
      t.match(r.stdout, /^verdict: valid/, `${args[1]}: verdict valid without the network`);
    }
  } else {
    t.skip("unshare -n is not permitted here (no user or network namespaces), so the no-network run is skipped");
  }
  // the time is measured by python/bench/verify.py (a timed test would fail on a loaded machine)
  const r = await runPy(py!, rec, env);
  t.equal(r.code, 0, "verify_receipt exits 0");
  t.comment(`one receipt verified in ${r.ms} ms, interpreter start included (see python/bench/verify.py for the figure)`);
  await cleanup();
});
