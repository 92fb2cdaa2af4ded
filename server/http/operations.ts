// The data-plane operations of docs/api.md (data plane): the names the gateway meters, routes
// and authorises by, and the engine's body reader prepares bodies for.
export const OPERATIONS = [
  "put",
  "put_cores",
  "put_cores_batch",
  "get",
  "serve",
  "search",
  "delete",
  "list",
  "query_similarity",
  "query_topk",
  "query_vector",
] as const;
export type Operation = (typeof OPERATIONS)[number];
