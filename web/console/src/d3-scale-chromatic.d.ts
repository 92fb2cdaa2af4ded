// The one function the console takes from d3-scale-chromatic (the package ships no types).
declare module "d3-scale-chromatic" {
  /** The viridis colour of t in [0, 1], as "#rrggbb". */
  export function interpolateViridis(t: number): string;
}
