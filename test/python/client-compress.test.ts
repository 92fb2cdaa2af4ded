// The numpy client's local TT compression of a large put (python/svc_tensor/ttsvd.py and
// Client.put): python/tests/test_client_compress.py, one tape assertion per Python test, against
// a real gateway and engine whose upload limit is 256 KiB, so that tensors of 512 KiB to 2 MiB
// are past it.
import test from "tape";
import { runClientTests } from "./client-stack.js";

test("python client: tensors past the upload limit", async (t) => {
  await runClientTests(t, "python-compress", 256 * 1024, ["tests.test_client_compress"]);
});
