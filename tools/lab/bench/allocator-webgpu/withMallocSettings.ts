import { spawnSync } from 'node:child_process';

/**
 * glibc's malloc settings the bench measures under: every allocation of at least 128 KiB gets its own mapping,
 * returned to the system when freed. By default glibc raises that threshold as large blocks are freed (up to
 * 32 MiB) and keeps freed heap memory resident, so a driver buffer freed by one allocator would be reused, already
 * resident, by the next: its resident memory and its createBuffer cost would depend on which allocator ran before.
 */
const MALLOC_ENV = { MALLOC_MMAP_THRESHOLD_: '131072', MALLOC_TRIM_THRESHOLD_: '131072' } as const;

/**
 * True when this process already runs under {@link MALLOC_ENV} (or not on Linux, where it means nothing). Else
 * runs this same script again as a child under those settings, with the same Node flags and arguments and the
 * same standard streams, sets this process's exit code to the child's, and returns false: the caller then stops.
 */
export function withMallocSettings(): boolean {
  if (process.platform !== 'linux' || Object.entries(MALLOC_ENV).every(([k, v]) => process.env[k] === v)) return true;
  const child = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, ...MALLOC_ENV },
  });
  if (child.error) throw child.error;
  process.exitCode = child.status ?? 1;
  return false;
}
