// The lint gate (`npm run lint`): type-aware rules for the bug classes that reach users
// (a promise nobody awaits or handles, an async function where a callback's result is
// ignored), plus a few plain ones. Run from the repository root.
import { fileURLToPath } from "node:url";
import tseslint from "typescript-eslint";

const here = fileURLToPath(new URL(".", import.meta.url));

export default tseslint.config(
  { ignores: ["**/node_modules/**", "dist/**", "build/**", "web/console/dist/**", "python/**", "tools/**"] },
  {
    files: ["lib/**/*.ts", "server/**/*.ts", "bin/**/*.ts", "test/**/*.ts", "bench/**/*.ts"],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: { project: [`${here}tsconfig.json`], tsconfigRootDir: here },
    },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    plugins: { "@typescript-eslint": tseslint.plugin },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: { arguments: false, attributes: false } }],
      "@typescript-eslint/await-thenable": "error",
      "@typescript-eslint/no-for-in-array": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" }],
      // a caught value passed on as it came is allowed; a literal or a plain object is not
      "@typescript-eslint/only-throw-error": ["error", { allowThrowingUnknown: true }],
      "@typescript-eslint/prefer-promise-reject-errors": ["error", { allowThrowingUnknown: true }],
      "@typescript-eslint/require-await": "off",
      "no-var": "error",
      "prefer-const": ["error", { ignoreReadBeforeAssign: true }],
      eqeqeq: ["error", "always", { null: "ignore" }],
      "no-throw-literal": "off",
      "no-debugger": "error",
      "no-dupe-keys": "error",
      "no-unreachable": "error",
      "no-self-compare": "error",
      "no-sparse-arrays": "error",
      "no-constant-condition": ["error", { checkLoops: false }],
    },
  },
  // The product's code has no `any`; tests may read JSON answers loosely.
  { files: ["lib/**/*.ts", "server/**/*.ts", "bin/**/*.ts", "bench/**/*.ts"], rules: { "@typescript-eslint/no-explicit-any": "error" } },
  // No function of the product over 150 lines, nested functions counted in (docs/contributing.md).
  { files: ["lib/**/*.ts", "server/**/*.ts", "bin/**/*.ts"], rules: { "max-lines-per-function": ["error", { max: 150 }] } },
);
