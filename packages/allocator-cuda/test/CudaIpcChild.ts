// The other process of CudaIpc.test.ts: makes its own CUDA allocator on the same libcuda (STOWAGE_LIBCUDA), opens
// the export given as argv[2] (JSON; an expandable segment's descriptors arrive as fds 3, 4, …), checks the bytes
// against pattern seed argv[3], writes pattern seed argv[4] over them, releases the pointer, and prints one JSON
// line: { ok, matched, pointerOwned } or { ok: false, error, driverName }.
import type { CudaIpcExport } from '@stowage/allocator-cuda';
import { createCudaAllocator, isCudaError } from '@stowage/allocator-cuda';
import { patternBytes } from '@stowage/core/testing';

const exported = JSON.parse(process.argv[2]!, (key, value: unknown) => (key === 'handle' ? Uint8Array.from(value as number[]) : value)) as CudaIpcExport;
const readSeed = Number(process.argv[3]);
const writeSeed = Number(process.argv[4]);

try {
  using allocator = createCudaAllocator({ libcuda: process.env['STOWAGE_LIBCUDA']!, allocConf: '' });
  const ptr = allocator.openIpc(exported);
  const bytes = await allocator.readBytes(ptr);
  const expected = patternBytes(ptr.byteLength, readSeed);
  const matched = Buffer.from(bytes).equals(Buffer.from(expected));
  allocator.writeBytes(ptr, patternBytes(ptr.byteLength, writeSeed));
  const pointerOwned = allocator.owns(ptr);
  ptr.release();
  process.stdout.write(`${JSON.stringify({ ok: true, matched, pointerOwned })}\n`);
} catch (error) {
  process.stdout.write(`${JSON.stringify({ ok: false, error: error instanceof Error ? error.message : String(error), ...(isCudaError(error) ? { driverName: error.driverName } : {}) })}\n`);
}
