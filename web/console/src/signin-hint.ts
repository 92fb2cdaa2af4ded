// What the sign-in form adds to a refused key when its shape says it was given as the other
// kind: tenant keys start with svc_live_, a service key never does.

const TENANT_PREFIX = "svc_live_";

/** The way out for a key refused with 401 as `kind`, or null when its shape gives no clue. */
export function signInHint(kind: "tenant" | "admin", key: string): string | null {
  const tenantShaped = key.startsWith(TENANT_PREFIX);
  if (kind === "tenant" && !tenantShaped && key.length >= 32) {
    return "This looks like the service key (tenant keys start with svc_live_): choose \u201cService key (admin)\u201d above to sign in as the operator.";
  }
  if (kind === "admin" && tenantShaped) {
    return "This is a tenant API key (svc_live_\u2026): choose \u201cTenant API key\u201d above.";
  }
  return null;
}

/**
 * Why a key cannot be sent, or null: keys are printable ASCII, and a browser refuses to put other
 * characters in a header (a zero-width space or an ellipsis pasted with the key). The key given
 * here is already trimmed of surrounding whitespace.
 */
export function keyProblem(key: string): string | null {
  let pos = 1;
  for (const ch of key) {
    const c = ch.codePointAt(0)!;
    if (c < 0x21 || c > 0x7e) {
      const code = `U+${c.toString(16).toUpperCase().padStart(4, "0")}`;
      return `The Key field holds a character that cannot be part of a key (${code} at position ${pos}; keys are printable ASCII): paste the key again without it.`;
    }
    pos++;
  }
  return null;
}
