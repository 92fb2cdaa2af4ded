// The gateway and engine the numpy client's Python tests run against: a Stack whose upload
// limit is `maxUpload`, a tenant of its own with namespace "py", and the Python test modules run
// with the gateway's URL, the tenant's key and that limit in their environment.
import type { Test } from "tape";
import { Stack } from "../store/harness.js";
import { findNumpyPython, requirePython, runPythonTests } from "./helpers.js";

export async function runClientTests(t: Test, tenantId: string, maxUpload: number, modules: string[]): Promise<void> {
  const py = findNumpyPython();
  if (!requirePython(t, py, "python3 (3.11 or later) with numpy")) return;
  const stack = new Stack({ SVC_ENGINE_MAX_UPLOAD_BYTES: String(maxUpload) });
  try {
    const url = await stack.url();
    const res = await fetch(`${url}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.serviceKey}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: tenantId, namespaces: ["py"] }),
    });
    const body = (await res.json()) as { api_key?: string };
    t.equal(res.status, 201, "a tenant for the Python client");
    await runPythonTests(t, py, [], modules, {
      SVC_TEST_GATEWAY_URL: url,
      SVC_TEST_API_KEY: body.api_key ?? "",
      SVC_TEST_MAX_UPLOAD_BYTES: String(maxUpload),
    });
  } finally {
    await stack.close();
  }
}
