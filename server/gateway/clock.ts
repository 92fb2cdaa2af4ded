// The gateway's clock is the project's (lib/clock.ts): system time, or a fake for tests.
export { systemClock, FakeClock, type Clock } from "../../lib/clock.js";
