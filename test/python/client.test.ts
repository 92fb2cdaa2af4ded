// The numpy client (python/svc_tensor/client.py) against a real gateway and engine: the
// Python tests of python/tests/test_client.py, one tape assertion each, and those of
// python/tests/test_client_answers.py against a local server that answers badly on purpose.
import test from "tape";
import { runClientTests } from "./client-stack.js";

test("python client over a gateway and an engine", async (t) => {
  // a small upload limit, so that a refusal by size can be sent from Python at little cost
  await runClientTests(t, "python-client", 8 * 1024 * 1024, ["tests.test_client", "tests.test_client_answers", "tests.test_client_tls"]);
});
