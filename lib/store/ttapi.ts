// The TT engine (lib/tt.ts and its native addon), loaded on first use so that stores
// holding only integer, bool or byte data never load the addon. The part of its surface
// the store uses is declared here.
export type FloatArray = Float32Array | Float64Array;
export interface TT {
  modes: number[];
  ranks: number[];
  /** core k: ranks[k] * modes[k] * ranks[k+1], C order [r_prev][n_k][r_next] */
  cores: FloatArray[];
  /** dense shape when it differs from modes */
  shape?: number[];
}
export interface CompressResult extends TT {
  relative_error: number;
}
export interface TTApi {
  compress(data: FloatArray, shape: number[], opts?: { tolerance?: number; max_rank?: number; modes?: number[]; min_ratio?: number }): Promise<CompressResult | null>;
  reconstruct(t: TT, opts?: { slice?: [number, number][] }): Promise<FloatArray>;
  dot(a: TT, b: TT): Promise<number>;
  norm(a: TT): Promise<number>;
  dotDense(t: TT, x: FloatArray): Promise<number>;
  dotBatch(q: TT, candidates: TT[]): Promise<Float64Array>;
  dotDenseBatch(x: FloatArray, candidates: TT[]): Promise<Float64Array>;
  denseDot(a: FloatArray, b: FloatArray): Promise<number>;
  chooseModes(shape: number[]): number[];
  backend(): { isa: string; threads: number; cuda_compiled: boolean; cuda_device: string | null; reason: string | null };
}

const TT_MODULE = "../tt.js"; // a variable: lib/tt.ts is built apart and may be absent in a partial checkout
let loading: Promise<TTApi> | undefined;
export const loadTT = (): Promise<TTApi> => (loading ??= import(TT_MODULE) as Promise<TTApi>);
