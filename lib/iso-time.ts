// A time in milliseconds since the epoch as ISO 8601 in UTC, the text of Date's toISOString
// (2026-11-27T19:17:44.123Z), formatted by arithmetic: toISOString takes over a microsecond
// on Node 20, which every answer carrying a time (an entry's created_at, a log line's ts, an
// audit record's ts) would pay. Years 0-9999 only; anything else, and non-integers, go to Date.

const TWO = Array.from({ length: 100 }, (_, i) => (i < 10 ? "0" : "") + i);
const THREE = Array.from({ length: 1000 }, (_, i) => (i < 10 ? "00" : i < 100 ? "0" : "") + i);
const DAY_MS = 86_400_000;
// 0000-01-01T00:00:00.000Z and 10000-01-01T00:00:00.000Z
const MIN_MS = -62_167_219_200_000;
const MAX_MS = 253_402_300_800_000;

/** `new Date(ms).toISOString()` for an integer `ms` in years 0-9999 (Date itself otherwise, which throws where it does). */
export function isoTime(ms: number): string {
  if (!Number.isInteger(ms) || ms < MIN_MS || ms >= MAX_MS) return new Date(ms).toISOString();
  const days = Math.floor(ms / DAY_MS);
  let rest = ms - days * DAY_MS;
  // the civil date of a day count (proleptic Gregorian calendar, eras of 400 years from 0000-03-01)
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  const year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  const h = Math.floor(rest / 3_600_000);
  rest -= h * 3_600_000;
  const min = Math.floor(rest / 60_000);
  rest -= min * 60_000;
  const s = Math.floor(rest / 1000);
  return `${TWO[Math.floor(year / 100)]}${TWO[year % 100]}-${TWO[month]}-${TWO[day]}T${TWO[h]}:${TWO[min]}:${TWO[s]}.${THREE[rest - s * 1000]}Z`;
}
