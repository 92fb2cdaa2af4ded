// The numpy client (python/svc_tensor/client.py) against a real gateway and engine: the
// Python tests of python/tests/test_client.py, one tape assertion each, and those of
// python/tests/test_client_answers.py against a local server that answers badly on purpose.
import test from "tape";
import { Stack } from "../store/harness.js";
import { findNumpyPython, requirePython, runPythonTests } from "./helpers.js";

test("python client over a gateway and an engine", async (t) => {
  const py = findNumpyPython();
  if (!requirePython(t, py, "python3 (3.11 or later) with numpy")) return;
  // a small upload limit, so that a refusal by size can be sent from Python at little cost
  const maxUpload = 8 * 1024 * 1024;
  const stack = new Stack({ SVC_ENGINE_MAX_UPLOAD_BYTES: String(maxUpload) });
  try {
    const url = await stack.url();
    const res = await fetch(`${url}/gate/onboard/create`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.serviceKey}`, "content-type": "application/json" },
      body: JSON.stringify({ tenant_id: "python-client", namespaces: ["py"] }),
    });
    const body = (await res.json()) as { api_key?: string };
    t.equal(res.status, 201, "a tenant for the Python client");
    await runPythonTests(t, py, [], ["tests.test_client", "tests.test_client_answers"], {
      SVC_TEST_GATEWAY_URL: url,
      SVC_TEST_API_KEY: body.api_key ?? "",
      SVC_TEST_MAX_UPLOAD_BYTES: String(maxUpload),
    });
  } finally {
    await stack.close();
  }
});
