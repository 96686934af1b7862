import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { expect } from 'chai';
import { createRuntime, DataPtr, InvalidArgumentError, IpcExporter, wrapAllocators } from '@stowage/core';
import { adaptorCases, patternBytes } from '@stowage/core/testing';
import type { CudaAllocator, CudaIpcExport } from '@stowage/allocator-cuda';
import { createCudaAllocator, cuda, CudaError } from '@stowage/allocator-cuda';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

const MiB = 2 ** 20;

interface ChildResult {
  readonly ok: boolean;
  readonly matched?: boolean;
  readonly pointerOwned?: boolean;
  readonly error?: string;
  readonly driverName?: string;
}

/** Runs CudaIpcChild.js on `exported`; an expandable segment's descriptors go to the child as fds 3, 4, …. */
function openInChild(libraryPath: string, exported: CudaIpcExport, readSeed: number, writeSeed: number): Promise<ChildResult> {
  const script = fileURLToPath(new URL('./CudaIpcChild.js', import.meta.url));
  const fds = exported.kind === 'shareable' ? exported.fds : [];
  const sent = exported.kind === 'shareable' ? { ...exported, fds: fds.map((_, i) => 3 + i) } : { ...exported, handle: [...exported.handle] };
  const child = spawn(process.execPath, [script, JSON.stringify(sent), String(readSeed), String(writeSeed)], {
    env: { ...process.env, STOWAGE_LIBCUDA: libraryPath },
    stdio: ['ignore', 'pipe', 'inherit', ...fds],
  });
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => {
      try {
        resolve(JSON.parse(out) as ChildResult);
      } catch {
        reject(new Error(`the IPC child exited with ${code} and printed ${JSON.stringify(out)}`));
      }
    });
  });
}

describe('CUDA IPC export', function () {
  this.timeout(60_000);
  const lib = testLibcuda();
  if (typeof lib === 'string') {
    it('shares memory through a libcuda (skipped: none could be loaded or built)', function () {
      console.log(`    skipped: ${lib}`);
      this.skip();
    });
    return;
  }
  const make = (options: Parameters<typeof createCudaAllocator>[0] = {}): CudaAllocator => createCudaAllocator({ libcuda: lib.path, allocConf: '', ...options });

  /** Allocates `before` bytes, then the shared block of `bytes` (so it does not start its segment), filled with seed 1. */
  function sharedBlock(allocator: CudaAllocator, bytes: number, before = 3 * MiB + 512): { ptr: DataPtr<bigint>; spacer: DataPtr<bigint> } {
    const spacer = allocator.allocate(before);
    const ptr = allocator.allocate(bytes);
    allocator.writeBytes(ptr, patternBytes(bytes, 1));
    return { ptr, spacer };
  }

  it('sends a block of a fixed segment as its segment\'s legacy handle and offset; another process reads and writes it', async () => {
    using allocator = make({ expandableSegments: false, maxSplitSize: '64MiB', preset: 'pytorch' });
    const { ptr, spacer } = sharedBlock(allocator, 1 * MiB, 512 * 1024);
    const exported = allocator.exportIpc(ptr);
    expect(exported.kind).to.equal('legacy');
    if (exported.kind !== 'legacy') return;
    expect(exported.handle.byteLength).to.equal(64);
    expect(exported.offset, 'the block sits after the spacer in one 20 MiB segment').to.equal(512 * 1024);
    const result = await openInChild(lib.path, exported, 1, 2);
    expect(result).to.deep.equal({ ok: true, matched: true, pointerOwned: false });
    expect(Buffer.from(await allocator.readBytes(ptr)).equals(Buffer.from(patternBytes(MiB, 2))), 'the child\'s write is seen here').to.equal(true);
    allocator.free(ptr);
    allocator.free(spacer);
  });

  it('sends a block of an expandable segment as the descriptors of the pages under it, mapped by the receiver into a range of just those pages', async () => {
    using allocator = make({ preset: 'pytorch', expandableSegments: true });
    const { ptr, spacer } = sharedBlock(allocator, 30 * MiB, 15 * MiB + 512);
    const exported = allocator.exportIpc(ptr);
    expect(exported.kind).to.equal('shareable');
    if (exported.kind !== 'shareable') return;
    expect(exported.pageBytes, "PyTorch's large-pool page").to.equal(20 * MiB);
    expect(exported.allocationBytes, 'every allocation one page').to.equal(undefined);
    // The block starts 15 MiB + 512 into the segment: in its first page, running into its third.
    expect(exported.offset).to.equal(15 * MiB + 512);
    expect(exported.fds.length).to.equal(3);
    const result = await openInChild(lib.path, exported, 1, 3);
    expect(result).to.deep.equal({ ok: true, matched: true, pointerOwned: false });
    expect(Buffer.from(await allocator.readBytes(ptr)).equals(Buffer.from(patternBytes(30 * MiB, 3)))).to.equal(true);
    allocator.free(ptr);
    allocator.free(spacer);
  });

  it('sends a block lying across runs of pages as the descriptors of its runs and their sizes, each mapped whole by the receiver', async () => {
    using allocator = make();
    // The spacer's growth is one 20 MiB run; the block takes its free 2 MiB and a 40 MiB run mapped for the rest.
    const { ptr, spacer } = sharedBlock(allocator, 30 * MiB, 18 * MiB);
    const exported = allocator.exportIpc(ptr);
    expect(exported.kind).to.equal('shareable');
    if (exported.kind !== 'shareable') return;
    expect(exported.allocationBytes).to.deep.equal([20 * MiB, 40 * MiB]);
    expect(exported.pageBytes, 'the largest allocation').to.equal(40 * MiB);
    expect(exported.offset).to.equal(18 * MiB);
    const result = await openInChild(lib.path, exported, 1, 3);
    expect(result).to.deep.equal({ ok: true, matched: true, pointerOwned: false });
    expect(Buffer.from(await allocator.readBytes(ptr)).equals(Buffer.from(patternBytes(30 * MiB, 3)))).to.equal(true);
    allocator.free(ptr);
    allocator.free(spacer);
  });

  it('opens an export in the same process only where the driver allows it: a legacy handle is the driver\'s error', () => {
    using allocator = make({ expandableSegments: false });
    const ptr = allocator.allocate(MiB);
    const exported = allocator.exportIpc(ptr);
    expect(() => allocator.openIpc(exported)).to.throw(CudaError);
    allocator.free(ptr);
  });

  it('opens an expandable segment\'s export in the same process as a second mapping of the same memory, unmapped on release', async () => {
    using allocator = make();
    const ptr = allocator.allocate(2 * MiB);
    allocator.writeBytes(ptr, patternBytes(2 * MiB, 4));
    const opened = allocator.openIpc(allocator.exportIpc(ptr));
    expect(opened).to.be.instanceOf(DataPtr);
    expect(allocator.owns(opened)).to.equal(false);
    expect(opened.address).to.not.equal(ptr.address);
    expect(allocator.devicePointer(opened), 'a kernel can take an opened pointer\'s device address').to.equal(BigInt(opened.address));
    expect(Buffer.from(await allocator.readBytes(opened)).equals(Buffer.from(patternBytes(2 * MiB, 4)))).to.equal(true);
    allocator.writeBytes(opened, patternBytes(2 * MiB, 5));
    expect(Buffer.from(await allocator.readBytes(ptr)).equals(Buffer.from(patternBytes(2 * MiB, 5)))).to.equal(true);
    const free = allocator.backend.memoryInfo().freeBytes;
    opened.release();
    expect(() => allocator.devicePointer(opened), 'not once released').to.throw(InvalidArgumentError);
    expect(allocator.backend.memoryInfo().freeBytes, 'closing an import gives back nothing of the exporter\'s memory').to.equal(free);
    allocator.free(ptr);
  });

  describe('the IpcExporter device service, through adaptors', () => {
    for (const adaptor of adaptorCases()) {
      it(`exports a storage the runtime allocated through a ${adaptor.name}, and the export opens to the same bytes`, async () => {
        await using rt = await createRuntime({ plugins: [cuda({ libcuda: lib.path, allocConf: '' }), wrapAllocators('cuda', (a) => adaptor.wrap(a))] });
        const exporter = rt.service(IpcExporter, 'cuda:0')!;
        expect(exporter).to.not.equal(rt.allocator('cuda:0'));
        const storage = rt.storage(2 * MiB, { device: 'cuda:0' });
        rt.write(storage, patternBytes(2 * MiB, 6));
        const opened = exporter.openIpc(exporter.exportIpc(storage.data()));
        expect(Buffer.from(await rt.allocator('cuda:0').readBytes(opened)).equals(Buffer.from(patternBytes(2 * MiB, 6)))).to.equal(true);
        opened.release();
      });
    }
  });

  it('refuses to export what cannot be shared, and to open what is not an export', () => {
    using allocator = make({ shareableSegments: false });
    const ptr = allocator.allocate(MiB);
    expect(() => allocator.exportIpc(ptr)).to.throw(InvalidArgumentError, /shareableSegments/);
    using other = make();
    const foreign = other.allocate(MiB);
    expect(() => allocator.exportIpc(foreign)).to.throw(InvalidArgumentError);
    expect(() => allocator.exportIpc(allocator.allocate(0))).to.throw(InvalidArgumentError);
    expect(() => allocator.openIpc({ kind: 'legacy', device: 0, handle: new Uint8Array(3), offset: 0, byteLength: 1 })).to.throw(InvalidArgumentError);
    expect(() => allocator.openIpc({ kind: 'shareable', device: 0, pageBytes: 2 * MiB, fds: [], offset: 0, byteLength: 1 })).to.throw(InvalidArgumentError);
    expect(() => allocator.openIpc({ kind: 'shareable', device: 0, pageBytes: 4 * MiB, fds: [5, 6], allocationBytes: [4 * MiB], offset: 0, byteLength: 1 }), 'one size per descriptor').to.throw(InvalidArgumentError);
    expect(() => allocator.openIpc({ kind: 'shareable', device: 0, pageBytes: 4 * MiB, fds: [5, 6], allocationBytes: [4 * MiB, 2 * MiB], offset: 4 * MiB, byteLength: 3 * MiB }), 'a range past its allocations').to.throw(InvalidArgumentError);
    allocator.free(ptr);
    other.free(foreign);
  });
});
