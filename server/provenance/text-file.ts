// Strict UTF-8 for the appliance: its own state and configuration files, and request bodies.
// Bytes that are not UTF-8 (a corrupted or foreign file, a body in another encoding) are
// refused rather than read with replacement characters, which would pass unnoticed into a path,
// a value of the configuration or a signed receipt.
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";

const STRICT = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Bytes of a file that are not UTF-8; the caller's sentence names the file. */
export class NotUtf8Error extends Error {}

/** `bytes` as text (a BOM kept), or NotUtf8Error. */
export function utf8Of(bytes: Uint8Array): string {
  try {
    return STRICT.decode(bytes);
  } catch {
    throw new NotUtf8Error("The bytes are not UTF-8.");
  }
}

/** A file's text; its read errors as they are, NotUtf8Error for bytes that are not UTF-8. */
export const readUtf8File = async (path: string): Promise<string> => utf8Of(await readFile(path));

/** readUtf8File, synchronously. */
export const readUtf8FileSync = (path: string): string => utf8Of(readFileSync(path));
