// A throwaway self-signed certificate for 127.0.0.1 (with the IP as subjectAltName, so TLS
// clients verify it when trusted as their CA), made with Debian's openssl for tests of the TLS
// paths. Null when openssl is missing or wrote nothing: the caller skips with a sentence.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

/** Writes cert.pem and key.pem into `dir`; their paths, or null when openssl could not make them. */
export function selfSignedCert(dir: string, name = "cert.pem"): { cert: string; key: string } | null {
  const cert = join(dir, name);
  const key = join(dir, "key.pem");
  try {
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        key,
        "-out",
        cert,
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
      ],
      { stdio: "ignore" },
    );
  } catch {
    return null;
  }
  return existsSync(cert) ? { cert, key } : null;
}
