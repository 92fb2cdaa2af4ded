// Type-checked by `npm run lint` (web/console/tsconfig.check.json), never bundled: every answer
// type the console declares must accept what the server's own type says it sends, so a field
// the server renames, drops or retypes fails the lint instead of the page.
import type { EntryInfo as ServerEntryInfo } from "../../lib/store/types.js";
import type { EntryInfo as ConsoleEntryInfo } from "./src/tenant.js";

export const entryInfo = (e: ServerEntryInfo): ConsoleEntryInfo => e;
