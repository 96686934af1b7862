import type { Allocator, DataPtr } from '@stowage/core';
import { InvalidArgumentError } from '@stowage/core';

/**
 * allocator-cuda's `CudaIpcExport`, as plain data this package checks without importing that package (no package
 * cycle, and no CUDA needed to load `@stowage/ipc`): a fixed segment's legacy handle and the block's offset, or an
 * expandable segment's pages as the producer's file descriptors (the consumer takes them with `pidfd_getfd`).
 */
export type CudaExport =
  | { readonly kind: 'legacy'; readonly device: number; readonly handle: Uint8Array; readonly offset: number; readonly byteLength: number }
  | { readonly kind: 'shareable'; readonly device: number; readonly pageBytes: number; readonly fds: readonly number[]; readonly offset: number; readonly byteLength: number };

/** The two members of allocator-cuda's `CudaAllocator` that IPC uses. */
export interface CudaIpcAllocator {
  exportIpc(ptr: DataPtr): CudaExport;
  openIpc(exported: CudaExport): DataPtr<bigint>;
}

/**
 * The allocator under `allocator`'s forwarding chain (decorators such as IPC's own stats adaptor) that has
 * `exportIpc`/`openIpc` (allocator-cuda's CudaAllocator), or undefined.
 */
export function cudaIpcAllocatorOf(allocator: Allocator): CudaIpcAllocator | undefined {
  let a: unknown = allocator;
  for (let depth = 0; depth < 16 && typeof a === 'object' && a !== null; depth++) {
    const c = a as Partial<CudaIpcAllocator> & { upstream?: unknown };
    if (typeof c.exportIpc === 'function' && typeof c.openIpc === 'function') return c as CudaIpcAllocator;
    a = c.upstream;
  }
  return undefined;
}

const isIndex = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * Checks a received export's shape (the driver checks the rest when it opens it).
 * @throws InvalidArgumentError naming what is wrong
 */
export function checkCudaExport(e: unknown, deviceIndex: number, byteLength: number): asserts e is CudaExport {
  const x = e as Record<string, unknown> | null;
  const bad = (field: string, value: unknown, expected: string): InvalidArgumentError => new InvalidArgumentError(`descriptor.memory.exported${field}`, value, expected);
  if (typeof x !== 'object' || x === null) throw bad('', x, 'a CUDA IPC export (CudaAllocator#exportIpc)');
  if (x.device !== deviceIndex) throw bad('.device', x.device, `${deviceIndex}, the descriptor's device`);
  if (x.byteLength !== byteLength) throw bad('.byteLength', x.byteLength, `${byteLength}, the descriptor's byteLength`);
  if (!isIndex(x.offset)) throw bad('.offset', x.offset, 'an integer ≥ 0');
  if (x.kind === 'legacy') {
    if (!(x.handle instanceof Uint8Array) || x.handle.byteLength !== 64) throw bad('.handle', x.handle, 'the 64 bytes of a cuIpcGetMemHandle handle');
    return;
  }
  if (x.kind !== 'shareable') throw bad('.kind', x.kind, "'legacy' or 'shareable'");
  if (!isIndex(x.pageBytes) || x.pageBytes === 0) throw bad('.pageBytes', x.pageBytes, 'a page size in bytes');
  const fds = x.fds;
  if (!Array.isArray(fds) || fds.length === 0 || !fds.every((fd) => isIndex(fd) && fd <= 0x7fff_ffff)) throw bad('.fds', fds, 'the producer\'s file descriptors, one per page');
  if ((x.offset as number) + byteLength > fds.length * (x.pageBytes as number)) throw bad('.fds', fds, `enough pages for ${byteLength} bytes from offset ${x.offset as number}`);
}
