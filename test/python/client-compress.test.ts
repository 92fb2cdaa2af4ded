// The numpy client's local TT compression of a large put (python/svc_tensor/ttsvd.py and
// Client.put): python/tests/test_client_compress.py, one tape assertion per Python test, against
// a real gateway and engine whose upload limit is 256 KiB, so that tensors of 512 KiB to 2 MiB
// are past it.
import test from "tape";
import { Stack } from "../store/harness.js";
import { findNumpyPython, requirePython, runPythonTests } from "./helpers.js";

test("python client: tensors past the upload limit", async (t) => {
  const py = findNumpyPython();
  if (!requirePython(t, py, "python3 (3.11 or later) with numpy")) return;
  const maxUpload = 256 * 1024;
  const stack = new Stack({ SVC_ENGINE_MAX_UPLOAD_BYTES: String(maxUpload) });
  try {
    const url = await stack.url();
    const res = await fetch(`${url}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.serviceKey}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: "python-compress", namespaces: ["py"] }),
    });
    const body = (await res.json()) as { api_key?: string };
    t.equal(res.status, 201, "a tenant for the Python client");
    await runPythonTests(t, py, [], ["tests.test_client_compress"], {
      SVC_TEST_GATEWAY_URL: url,
      SVC_TEST_API_KEY: body.api_key ?? "",
      SVC_TEST_MAX_UPLOAD_BYTES: String(maxUpload),
    });
  } finally {
    await stack.close();
  }
});
