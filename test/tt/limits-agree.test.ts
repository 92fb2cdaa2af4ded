// The store's max_rank check (lib/schemas.ts, which the CLI, the engine's settings and every put
// use) and the TT codec's own limit are one number, so that no max_rank passes the first and
// is refused by the second.
import test from "tape";
import { maxRankSchema } from "../../lib/schemas.js";
import { MAX_RANK_LIMIT } from "../../lib/tt.js";

test("max_rank: the store's check and the TT codec's limit agree", (t) => {
  t.ok(maxRankSchema.safeParse(MAX_RANK_LIMIT).success, `${MAX_RANK_LIMIT} passes the store's check`);
  const over = maxRankSchema.safeParse(MAX_RANK_LIMIT + 1);
  t.notOk(over.success, `${MAX_RANK_LIMIT + 1} is refused by the store's check`);
  t.equal(over.error?.issues[0]?.message, `max_rank must be at most ${MAX_RANK_LIMIT}`, "with the codec's limit in the sentence");
  t.end();
});
