import { closeSync } from 'node:fs';

import type { Device } from '@stowage/core';
import type { Deleter } from '@stowage/core/plugin-kit';
import { DataPtr, InvalidArgumentError } from '@stowage/core';
import type { CudaMemHandle } from '../driver/CudaDriver.js';
import type { CudaMemoryBackend } from '../backend/CudaMemoryBackend.js';

/**
 * A block of a fixed segment as another process opens it (Note [Sharing fixed segments]): the legacy IPC handle of
 * the cuMemAlloc allocation holding the block, and where the block starts in it.
 */
export interface CudaLegacyIpcExport {
  readonly kind: 'legacy';
  /** The exporting device's ordinal. */
  readonly device: number;
  /** `cuIpcGetMemHandle` of the block's segment: 64 bytes, plain data. */
  readonly handle: Uint8Array;
  /** The block's offset in its segment. */
  readonly offset: number;
  readonly byteLength: number;
}

/**
 * A block of an expandable segment as another process opens it (Note [Sharing expandable segments]): the physical
 * allocations mapped under it, as POSIX file descriptors, and where the block starts in the first of them.
 */
export interface CudaShareableIpcExport {
  readonly kind: 'shareable';
  readonly device: number;
  /**
   * Bytes of the largest physical allocation under the block: of every one, unless `allocationBytes` is given (so an
   * export's range lies within `fds.length * pageBytes` either way).
   */
  readonly pageBytes: number;
  /**
   * One descriptor per physical allocation under the block, first to last, from cuMemExportToShareableHandle: the
   * exporter owns them until it sends them (then closes its copies); the importer's `openIpc` closes what it is given.
   */
  readonly fds: readonly number[];
  /**
   * Bytes of each allocation of `fds`, where they differ (expandable segments grown in runs, Note [Page runs] in
   * core's ExpandableSegments.ts); absent: `pageBytes` each.
   */
  readonly allocationBytes?: readonly number[];
  /** The block's offset in its first physical allocation. */
  readonly offset: number;
  readonly byteLength: number;
}

export type CudaIpcExport = CudaLegacyIpcExport | CudaShareableIpcExport;

/** The context of a pointer `openIpc` made: what to undo when it is released. */
interface OpenedIpc {
  readonly close: () => void;
}

/**
 * Note [Sharing fixed segments]: as PyTorch sends a CUDA tensor, the handle names the whole segment (the driver's IPC
 * handles name cuMemAlloc allocations, not ranges in them) and the block's offset travels beside it. A process opens
 * one handle once per context (the driver refuses a second open); `CudaIpc` keeps the opened segments by handle and
 * counts the pointers into each, closing the segment when the last is released.
 *
 * Note [Sharing expandable segments]: an expandable segment is one address range over many physical allocations
 * (one per page, or one per run of pages), which legacy IPC cannot name (pytorch/pytorch#130330). The allocations
 * under the block are exported as POSIX file descriptors (cuMemExportToShareableHandle), with their sizes where they
 * differ; the importer reserves an address range of exactly those allocations in its own address space (not a
 * multiple of device memory, pytorch/pytorch#186218), imports each descriptor (cuMemImportFromShareableHandle), maps
 * it whole at its place (the driver maps an allocation only whole) and grants access. Releasing the pointer unmaps
 * them, releases the imported allocations and frees the range; the exporter's memory stays its own.
 */
export class CudaIpc {
  readonly #backend: CudaMemoryBackend;
  /** Legacy segments opened here: handle (hex) → base pointer and the live pointers into it. */
  readonly #opened = new Map<string, { base: bigint; refs: number }>();
  readonly #deleter: Deleter = (context) => (context as OpenedIpc).close();

  constructor(backend: CudaMemoryBackend) {
    this.#backend = backend;
  }

  /** Exports the block of a live pointer of this device (the caller checked it is the engine's). */
  export(ptr: DataPtr): CudaIpcExport {
    const backend = this.#backend;
    const base = ptr.handle as bigint;
    const device = backend.device.index;
    backend.enter();
    const mapping = backend.cudaPageMapping;
    if (mapping?.holds(base)) {
      if (!mapping.shareable) {
        throw new InvalidArgumentError(
          'ptr',
          ptr,
          "a pointer whose memory other processes can open: this allocator's expandable segments were made with shareableSegments: false (make it with cuda({ shareableSegments: true }), the default, or copy the bytes into a fixed segment)",
        );
      }
      const { start, handles, bytes } = mapping.allocationsUnder(base, ptr.byteOffset, ptr.byteLength);
      const fds: number[] = [];
      try {
        for (const handle of handles) fds.push(backend.driver.memExportToShareableHandle(handle));
      } catch (error) {
        for (const fd of fds) closeSync(fd);
        throw error;
      }
      const pageBytes = Math.max(...bytes);
      const uniform = bytes.every((b) => b === pageBytes);
      return { kind: 'shareable', device, pageBytes, fds, ...(uniform ? {} : { allocationBytes: bytes }), offset: ptr.byteOffset - start, byteLength: ptr.byteLength };
    }
    return { kind: 'legacy', device, handle: backend.driver.ipcGetMemHandle(base), offset: ptr.byteOffset, byteLength: ptr.byteLength };
  }

  /**
   * Opens an export of another process on this device: a pointer to the same memory (writes on either side are seen
   * on the other once ordered), not owned by any allocator; releasing it closes what was opened.
   * @throws InvalidArgumentError for something that is not an export; CudaError from the driver (an export of this
   * process, a closed descriptor)
   */
  open(exported: CudaIpcExport): DataPtr<bigint> {
    const backend = this.#backend;
    checkExport(exported);
    backend.enter();
    const { address, context } = exported.kind === 'legacy' ? this.#openLegacy(exported) : this.#openShareable(exported);
    return new DataPtr<bigint>({
      device: backend.device as Device,
      byteLength: exported.byteLength,
      handle: address,
      byteOffset: 0,
      address: Number(address),
      context,
      deleter: this.#deleter,
    });
  }

  #openLegacy(exported: CudaLegacyIpcExport): { address: bigint; context: OpenedIpc } {
    const driver = this.#backend.driver;
    const key = Buffer.from(exported.handle).toString('hex');
    let segment = this.#opened.get(key);
    if (segment === undefined) {
      segment = { base: driver.ipcOpenMemHandle(exported.handle), refs: 0 };
      this.#opened.set(key, segment);
    }
    segment.refs++;
    const opened = segment;
    const close = (): void => {
      if (--opened.refs > 0) return;
      this.#opened.delete(key);
      this.#backend.enter();
      driver.ipcCloseMemHandle(opened.base);
    };
    return { address: segment.base + BigInt(exported.offset), context: { close } };
  }

  #openShareable(exported: CudaShareableIpcExport): { address: bigint; context: OpenedIpc } {
    const { driver, cuDevice } = this.#backend;
    const sizes = exported.allocationBytes ?? exported.fds.map(() => exported.pageBytes);
    const starts = sizes.map((_, i) => sizes.slice(0, i).reduce((sum, b) => sum + b, 0));
    const bytes = sizes.reduce((sum, b) => sum + b, 0);
    const base = driver.memAddressReserve(bytes); // the granularity's alignment: a page need not be a power of two
    const handles: CudaMemHandle[] = [];
    let mapped = 0;
    const undo = (): void => {
      for (let i = 0; i < mapped; i++) driver.memUnmap(base + BigInt(starts[i]!), sizes[i]!);
      for (const handle of handles) driver.memRelease(handle);
      driver.memAddressFree(base, bytes);
    };
    try {
      for (const fd of exported.fds) handles.push(driver.memImportFromShareableHandle(fd));
      for (; mapped < handles.length; mapped++) driver.memMap(base + BigInt(starts[mapped]!), sizes[mapped]!, handles[mapped]!, 0);
      driver.memSetAccess(base, bytes, cuDevice);
    } catch (error) {
      undo();
      throw error;
    } finally {
      for (const fd of exported.fds) closeSync(fd);
    }
    const close = (): void => {
      this.#backend.enter();
      undo();
    };
    return { address: base + BigInt(exported.offset), context: { close } };
  }
}

/** @throws InvalidArgumentError unless `exported` has an export's shape (its values are the driver's to check) */
function checkExport(exported: unknown): asserts exported is CudaIpcExport {
  const e = (typeof exported === 'object' && exported !== null ? exported : {}) as Record<string, unknown>;
  const whole = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;
  const sized = whole(e.offset) && whole(e.byteLength);
  if (sized && e.kind === 'legacy' && e.handle instanceof Uint8Array && e.handle.byteLength === 64) return;
  if (sized && e.kind === 'shareable' && Array.isArray(e.fds) && e.fds.length > 0 && e.fds.every(whole) && whole(e.pageBytes) && e.pageBytes > 0) {
    const sizes = e.allocationBytes === undefined ? e.fds.map(() => e.pageBytes as number) : e.allocationBytes;
    const fits = Array.isArray(sizes) && sizes.length === e.fds.length && sizes.every((b) => whole(b) && b > 0 && b <= (e.pageBytes as number));
    if (fits && (e.offset as number) + (e.byteLength as number) <= (sizes as number[]).reduce((sum, b) => sum + b, 0)) return;
  }
  throw new InvalidArgumentError(
    'exported',
    exported,
    "a CudaIpcExport from exportIpc: { kind: 'legacy', handle (64 bytes), offset, byteLength } or { kind: 'shareable', fds, pageBytes, allocationBytes?, offset, byteLength } whose range lies within its allocations",
  );
}
