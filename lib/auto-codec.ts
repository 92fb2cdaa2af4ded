// The rules of `codec: "auto"` that the store (lib/store/choose.ts) and the client's local
// compression (lib/client-compress.ts) share, so that a put compressed by the client chooses as
// the engine would. Nothing is imported here: the client's quick paths load it cheaply.

/** A TT this many times smaller than the data is kept without asking the prediction codec. */
export const TT_FIRST_RATIO = 64;
/**
 * TT runs only where the sampled ranks do not rule out this share of the prediction codec's
 * estimated ratio (the estimate comes from samples, so it is a guide).
 */
export const TT_SHARE_OF_ESTIMATE = 0.8;
/** A TT whose measured ratio exceeds the prediction codec's estimate this many times is kept without a full prediction encode. */
export const TT_CLEAR_WIN = 2;
