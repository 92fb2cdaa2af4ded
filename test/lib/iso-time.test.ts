// isoTime against Date's own toISOString: every boundary of its range, leap days and centuries,
// and a spread of random times; outside years 0-9999 and for non-integers it is Date's answer
// (or Date's RangeError).
import test from "tape";
import { randomInt } from "node:crypto";
import { isoTime } from "../../lib/iso-time.js";

const viaDate = (ms: number): string => {
  try {
    return new Date(ms).toISOString();
  } catch (e) {
    return `throws ${(e as Error).name}`;
  }
};
const viaIso = (ms: number): string => {
  try {
    return isoTime(ms);
  } catch (e) {
    return `throws ${(e as Error).name}`;
  }
};

test("isoTime: the text of toISOString", (t) => {
  const day = 86_400_000;
  const edges = [
    0,
    -1,
    1,
    999,
    1000,
    day - 1,
    day,
    Date.UTC(2000, 1, 29),
    Date.UTC(2000, 2, 1) - 1,
    Date.UTC(1900, 1, 28),
    Date.UTC(1900, 2, 1),
    Date.UTC(2100, 1, 28, 23, 59, 59, 999),
    Date.UTC(2024, 11, 31, 23, 59, 59, 999),
    Date.UTC(1969, 11, 31, 23, 59, 59, 999),
    -62_167_219_200_000,
    -62_167_219_200_001,
    253_402_300_799_999,
    253_402_300_800_000,
    8.64e15,
    -8.64e15,
    8.64e15 + 1,
    1.5,
    -0.5,
    1_700_000_000_000.25,
    NaN,
    Infinity,
    -Infinity,
    -0,
  ];
  for (const ms of edges) t.equal(viaIso(ms), viaDate(ms), `${ms}: ${viaDate(ms)}`);
  let wrong = 0;
  for (let i = 0; i < 200_000; i++) {
    const ms = randomInt(-62_200_000_000_000, 253_500_000_000_000 - 2 ** 47) + (i % 2) * randomInt(0, 2 ** 47);
    if (viaIso(ms) !== viaDate(ms)) wrong++;
  }
  t.equal(wrong, 0, "200,000 random times in and around years 0-9999 agree");
  t.end();
});
