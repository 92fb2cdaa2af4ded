// The prediction codec (lib/pred.ts and its native addon), loaded on first use as the TT
// engine is (ttapi.ts): stores holding only integer, bool or byte data never load it.
import type * as PredModule from "../pred.js";

export type PredApi = typeof PredModule;

let loading: Promise<PredApi> | undefined;
export const loadPred = (): Promise<PredApi> => (loading ??= import("../pred.js"));
