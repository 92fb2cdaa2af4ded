// The metadata filter language of docs/api.md (data plane): validated once into a tree,
// then evaluated against each entry's metadata. Comparisons between a number and a
// string are false, never an error; an unknown operator is a ValidationError.
import { ValidationError } from "./errors.js";
import { jsonProblem } from "./json-problem.js";

export type Filter = Record<string, unknown>;

type FieldOp =
  | { op: "$eq" | "$ne"; value: unknown }
  | { op: "$gt" | "$gte" | "$lt" | "$lte"; value: number | string }
  | { op: "$in" | "$nin"; values: ValueSet }
  | { op: "$exists"; value: boolean }
  | { op: "$prefix"; value: string };

/** A $in/$nin list compiled once: strings, numbers, booleans and null in Sets, the rest (objects, arrays) compared structurally. */
interface ValueSet {
  strings: Set<string>;
  numbers: Set<number>;
  others: unknown[];
  hasTrue: boolean;
  hasFalse: boolean;
  hasNull: boolean;
}

/** A validated filter, ready to evaluate. */
export type FilterNode =
  | { kind: "and"; all: FilterNode[] }
  | { kind: "or"; any: FilterNode[] }
  | { kind: "not"; inner: FilterNode }
  | { kind: "field"; path: string[]; ops: FieldOp[] };

const FIELD_OPS = new Set(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$prefix"]);

/**
 * What one filter may hold, so that its cost per entry is bounded before any entry is read.
 * Conditions count every operator on a field, every $and/$or/$not and every element of a
 * $in/$nin list; fields count the members of any one object of the filter, the top level too.
 */
export const FILTER_LIMITS = Object.freeze({
  /** The filter's JSON text, in bytes. */
  maxBytes: 64 * 1024,
  /** Nesting of $and, $or and $not. */
  maxDepth: 16,
  /** Conditions in the whole filter. */
  maxConditions: 1000,
  /** Members of any one object (field names and combinators). */
  maxFields: 100,
  /** Elements of one $in or $nin list. */
  maxInValues: 1000,
});
const MAX_DEPTH = FILTER_LIMITS.maxDepth;

const isPlainObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * Validates a filter object against FILTER_LIMITS and returns its tree, compiled once for the
 * whole scan; throws ValidationError naming the offending place (`filter.run.seed.$foo`) or the
 * limit exceeded.
 * @example compileFilter({ "run.seed": { $gte: 3 }, $or: [{ kind: "a" }, { kind: "b" }] })
 */
export function compileFilter(filter: unknown, where = "filter"): FilterNode {
  const budget = { nodes: 0 };
  return compileObject(isPlainObject(filter) ? jsonForm(filter, where) : filter, where, 0, budget);
}

function countCondition(budget: { nodes: number }, n = 1): void {
  budget.nodes += n;
  if (budget.nodes > FILTER_LIMITS.maxConditions)
    throw new ValidationError(
      `filter has more than ${FILTER_LIMITS.maxConditions} conditions (each operator, combinator and $in/$nin element counts).`,
      "filter",
    );
}

/** The filter as it travels over HTTP (NaN -> null, a Date -> its ISO string, undefined fields dropped), so that embedded and hosted match alike. */
function jsonForm(f: Record<string, unknown>, where: string): unknown {
  let text: string;
  try {
    text = JSON.stringify(f);
  } catch {
    throw new ValidationError(`${jsonProblem(where, f)}.`, where);
  }
  const bytes = Buffer.byteLength(text);
  if (bytes > FILTER_LIMITS.maxBytes) throw new ValidationError(`${where} is ${bytes} bytes of JSON; the limit is ${FILTER_LIMITS.maxBytes} bytes.`, where);
  return JSON.parse(text);
}

function compileObject(f: unknown, where: string, depth: number, budget: { nodes: number }): FilterNode {
  if (!isPlainObject(f)) throw new ValidationError(`${where} must be a JSON object.`, where);
  if (depth > MAX_DEPTH) throw new ValidationError(`${where} is nested more than ${MAX_DEPTH} levels deep.`, where);
  const names = Object.keys(f);
  if (names.length > FILTER_LIMITS.maxFields)
    throw new ValidationError(`${where} has ${names.length} members; the limit is ${FILTER_LIMITS.maxFields} per object.`, where);
  const all: FilterNode[] = [];
  for (const [name, value] of Object.entries(f)) {
    const here = `${where}.${name}`;
    if (name === "$and" || name === "$or") {
      if (!Array.isArray(value) || value.length === 0) throw new ValidationError(`${here} must be a non-empty list of filters.`, here);
      if (value.length > FILTER_LIMITS.maxFields)
        throw new ValidationError(`${here} has ${value.length} filters; the limit is ${FILTER_LIMITS.maxFields}.`, here);
      countCondition(budget);
      const parts = value.map((v, i) => compileObject(v, `${here}.${i}`, depth + 1, budget));
      all.push(name === "$and" ? { kind: "and", all: parts } : { kind: "or", any: parts });
    } else if (name === "$not") {
      countCondition(budget);
      all.push({ kind: "not", inner: compileObject(value, here, depth + 1, budget) });
    } else if (name.startsWith("$")) {
      throw new ValidationError(`${here}: unknown operator '${name}'.`, here);
    } else {
      if (name === "" || name.split(".").some((s) => s === "")) throw new ValidationError(`${here}: field names must be non-empty dotted paths.`, here);
      all.push({ kind: "field", path: name.split("."), ops: compileField(value, here, budget) });
    }
  }
  return all.length === 1 ? all[0]! : { kind: "and", all };
}

function compileField(value: unknown, where: string, budget: { nodes: number }): FieldOp[] {
  const keys = isPlainObject(value) ? Object.keys(value) : [];
  const dollar = keys.filter((k) => k.startsWith("$"));
  if (dollar.length === 0) {
    countCondition(budget);
    return [{ op: "$eq", value }];
  }
  if (dollar.length !== keys.length) throw new ValidationError(`${where} mixes operators and plain fields.`, where);
  const ops: FieldOp[] = [];
  for (const [op, arg] of Object.entries(value as Record<string, unknown>)) {
    const here = `${where}.${op}`;
    countCondition(budget);
    if (!FIELD_OPS.has(op)) throw new ValidationError(`${here}: unknown operator '${op}'.`, here);
    switch (op) {
      case "$eq":
      case "$ne":
        ops.push({ op, value: arg });
        break;
      case "$gt":
      case "$gte":
      case "$lt":
      case "$lte":
        if (typeof arg !== "number" && typeof arg !== "string") throw new ValidationError(`${here} takes a number or a string.`, here);
        ops.push({ op, value: arg });
        break;
      case "$in":
      case "$nin":
        if (!Array.isArray(arg)) throw new ValidationError(`${here} takes a list of values.`, here);
        if (arg.length > FILTER_LIMITS.maxInValues)
          throw new ValidationError(`${here} has ${arg.length} values; the limit is ${FILTER_LIMITS.maxInValues}.`, here);
        countCondition(budget, arg.length);
        ops.push({ op, values: valueSet(arg) });
        break;
      case "$exists":
        if (typeof arg !== "boolean") throw new ValidationError(`${here} takes true or false.`, here);
        ops.push({ op, value: arg });
        break;
      case "$prefix":
        if (typeof arg !== "string") throw new ValidationError(`${here} takes a string.`, here);
        ops.push({ op, value: arg });
        break;
    }
  }
  return ops;
}

function valueSet(values: unknown[]): ValueSet {
  const s: ValueSet = { strings: new Set(), numbers: new Set(), others: [], hasTrue: false, hasFalse: false, hasNull: false };
  for (const v of values) {
    if (typeof v === "string") s.strings.add(v);
    else if (typeof v === "number")
      s.numbers.add(v); // JSON numbers: no NaN; Sets equate 0 and -0 as === does
    else if (v === true) s.hasTrue = true;
    else if (v === false) s.hasFalse = true;
    else if (v === null) s.hasNull = true;
    else s.others.push(v);
  }
  return s;
}

function inSet(s: ValueSet, v: unknown): boolean {
  switch (typeof v) {
    case "string":
      return s.strings.has(v);
    case "number":
      return s.numbers.has(v);
    case "boolean":
      return v ? s.hasTrue : s.hasFalse;
    default:
      return v === null ? s.hasNull : s.others.some((x) => jsonEqual(v, x));
  }
}

const MISSING = Symbol("missing");

function lookup(meta: unknown, path: string[]): unknown {
  let cur: unknown = meta;
  for (const seg of path) {
    if (!isPlainObject(cur) || !Object.prototype.hasOwnProperty.call(cur, seg)) return MISSING;
    cur = cur[seg];
  }
  return cur;
}

/** Structural equality of JSON values (object key order does not matter). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((x, i) => jsonEqual(x, bb[i]));
  }
  const ka = Object.keys(a as object);
  const kb = Object.keys(b as object);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

function compare(v: unknown, arg: number | string): number | null {
  if (typeof v === "number" && typeof arg === "number") return v - arg;
  if (typeof v === "string" && typeof arg === "string") return v < arg ? -1 : v > arg ? 1 : 0;
  return null; // number vs string (or anything else): the comparison is false
}

function holds(op: FieldOp, v: unknown): boolean {
  const present = v !== MISSING;
  switch (op.op) {
    case "$eq":
      return present && jsonEqual(v, op.value);
    case "$ne":
      return !present || !jsonEqual(v, op.value);
    case "$gt": {
      const c = present ? compare(v, op.value) : null;
      return c !== null && c > 0;
    }
    case "$gte": {
      const c = present ? compare(v, op.value) : null;
      return c !== null && c >= 0;
    }
    case "$lt": {
      const c = present ? compare(v, op.value) : null;
      return c !== null && c < 0;
    }
    case "$lte": {
      const c = present ? compare(v, op.value) : null;
      return c !== null && c <= 0;
    }
    case "$in":
      return present && inSet(op.values, v);
    case "$nin":
      return !present || !inSet(op.values, v);
    case "$exists":
      return present === op.value;
    case "$prefix":
      return typeof v === "string" && v.startsWith(op.value);
  }
}

/** True when `metadata` satisfies the compiled filter. */
export function matchFilter(node: FilterNode, metadata: Record<string, unknown>): boolean {
  switch (node.kind) {
    case "and":
      return node.all.every((n) => matchFilter(n, metadata));
    case "or":
      return node.any.some((n) => matchFilter(n, metadata));
    case "not":
      return !matchFilter(node.inner, metadata);
    case "field": {
      const v = lookup(metadata, node.path);
      return node.ops.every((op) => holds(op, v));
    }
  }
}
