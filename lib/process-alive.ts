// Whether a process id names a running process of this machine: the check behind the
// single-instance locks (svc up's data directory, the appliance's state directory) and the
// record of an LMDB compaction under way.

/** True when `pid` runs (one of another user's counts: signalling it is refused, not absent). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
