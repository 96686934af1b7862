import type { DeviceLike, Runtime } from '@stowage/core';
import { InvalidArgumentError, IpcExporter } from '@stowage/core';

/**
 * allocator-cuda's `CudaIpcExport`, as plain data this package checks without importing that package (no package
 * cycle, and no CUDA needed to load `@stowage/ipc`): a fixed segment's legacy handle and the block's offset, or an
 * expandable segment's pages as the producer's file descriptors (the consumer takes them with `pidfd_getfd`).
 */
export type CudaExport =
  | { readonly kind: 'legacy'; readonly device: number; readonly handle: Uint8Array; readonly offset: number; readonly byteLength: number }
  | { readonly kind: 'shareable'; readonly device: number; readonly pageBytes: number; readonly fds: readonly number[]; readonly offset: number; readonly byteLength: number };

/**
 * The CUDA device's IpcExporter service (core's token; allocator-cuda's `cuda()` registers its CudaAllocator under
 * it), with the export's type IPC checks.
 */
export type CudaIpcAllocator = IpcExporter<CudaExport>;

/**
 * The IpcExporter service of `device` in `rt` (Note [Device services] in core: found by token, so adaptors over the
 * allocator cannot hide it), or undefined when the device offers none.
 */
export function cudaIpcAllocatorOf(rt: Runtime, device: DeviceLike): CudaIpcAllocator | undefined {
  return rt.service(IpcExporter, device) as CudaIpcAllocator | undefined;
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
