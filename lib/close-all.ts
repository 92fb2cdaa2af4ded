// Closing several parts of a process: each is closed even where one before it fails.

/** Runs every step, even after one fails; rejects with the first failure once all have run. */
export async function closeAll(...steps: Array<() => unknown>): Promise<void> {
  let failure: { e: unknown } | null = null;
  for (const step of steps) {
    try {
      await step();
    } catch (e) {
      failure ??= { e };
    }
  }
  if (failure) throw failure.e;
}
