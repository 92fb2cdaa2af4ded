// The sign-in form's hint for a key given as the other kind (web/console/src/signin-hint.ts):
// a service-key-shaped key tried as a tenant key, a tenant key tried as the service key, and
// no hint where the shape says nothing.
import test from "tape";
import { keyProblem, signInHint } from "../../web/console/src/signin-hint.js";

test("signInHint: the other kind is named only when the key's shape shows it", (t) => {
  const service = "0123456789abcdef".repeat(4);
  const tenant = `svc_live_${"A".repeat(43)}`;
  t.match(signInHint("tenant", service) ?? "", /looks like the service key .*Service key \(admin\)/, "a 64-hex key as a tenant key");
  t.match(signInHint("admin", tenant) ?? "", /tenant API key .*Tenant API key/, "a svc_live_ key as the service key");
  t.equal(signInHint("tenant", tenant), null, "a tenant-shaped key refused as a tenant key: rotated or deactivated, no hint");
  t.equal(signInHint("admin", service), null, "a wrong service key: no hint");
  t.equal(signInHint("tenant", "short"), null, "a short typo: no hint");
  t.equal(signInHint("tenant", ""), null, "empty: no hint");
  t.equal(signInHint("admin", "svc_live_"), signInHint("admin", tenant), "the prefix alone is a tenant key's shape");
  t.end();
});

test("keyProblem: a character a header cannot carry is named with its position", (t) => {
  const tenant = `svc_live_${"A".repeat(43)}`;
  t.equal(keyProblem(tenant), null, "a tenant key");
  t.equal(keyProblem("0123456789abcdef".repeat(4)), null, "a service key");
  t.equal(
    keyProblem(`${tenant}\u200b`),
    "The Key field holds a character that cannot be part of a key (U+200B at position 53; keys are printable ASCII): paste the key again without it.",
    "a trailing zero-width space",
  );
  t.match(keyProblem("svc_live_ab\u2026") ?? "", /\(U\+2026 at position 12;/, "an ellipsis");
  t.match(keyProblem("svc live") ?? "", /\(U\+0020 at position 4;/, "an inner space");
  t.match(keyProblem("svc_\u{1F511}x") ?? "", /\(U\+1F511 at position 5;/, "a character outside the BMP counted once");
  t.end();
});
