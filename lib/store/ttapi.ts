// The TT engine (lib/tt.ts and its native addon), loaded on first use so that stores
// holding only integer, bool or byte data never load the addon.
import type * as TTModule from "../tt.js";

export type TTApi = typeof TTModule;
export type { TT, FloatArray } from "../tt.js";

let loading: Promise<TTApi> | undefined;
export const loadTT = (): Promise<TTApi> => (loading ??= import("../tt.js"));
