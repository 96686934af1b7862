import { expect } from 'chai';
import fc from 'fast-check';
import { InvalidArgumentError, isOutOfMemoryError } from '@stowage/core';
import type { WebGpuAllocator, WebGpuContext } from '@stowage/allocator-webgpu';
import { createWebGpuAllocator, settleStowageDevice, stowageDevice, stowageDevicePaging } from '@stowage/allocator-webgpu';
import { COPY_DST, COPY_SRC, deviceOrSkip, readBuffer, STORAGE } from './testDevice.js';

const MiB = 2 ** 20;
/** The test budget: two of the 1.5 MiB buffers below fit beside the paging reserve, three do not. */
const BUDGET = 4 * MiB;
const BYTES = 1.5 * MiB + 12;

/** `n` bytes of a pattern that differs per `seed`. */
function pattern(n: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(n);
  let x = seed * 2654435761;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

function filled(device: GPUDevice, seed: number, n = BYTES): { buffer: GPUBuffer; bytes: Uint8Array } {
  const buffer = device.createBuffer({ size: n, usage: STORAGE | COPY_SRC | COPY_DST });
  const bytes = pattern(n, seed);
  device.queue.writeBuffer(buffer, 0, bytes);
  return { buffer, bytes };
}

const same = (a: Uint8Array, b: Uint8Array): boolean => Buffer.from(a).equals(Buffer.from(b));

function allocate(device: GPUDevice): GPUBuffer | Error {
  try {
    return device.createBuffer({ size: BYTES, usage: STORAGE | COPY_SRC | COPY_DST });
  } catch (error) {
    return error as Error;
  }
}

// Note [Paging between runs]: ranges settled to the host are paged out when the budget needs room, and paged back
// in where the program names them again.
describe('stowageDevice with paging (RangePager)', function () {
  this.timeout(120_000);
  let context: WebGpuContext;
  let allocator: WebGpuAllocator;
  let device: GPUDevice;
  before(async function () {
    context = await deviceOrSkip(this);
  });
  beforeEach(() => {
    allocator = createWebGpuAllocator(context, { limit: BUDGET, pagingReserve: { fraction: 1 / 16 } });
    device = stowageDevice(allocator, 'webgpu:0', { paging: true });
  });
  afterEach(() => allocator.dispose());

  it('pages a settled range out when the budget needs room and back in with every byte', async () => {
    const a = filled(device, 1);
    const b = filled(device, 2);
    expect(allocate(device), 'without a settle nothing can leave').to.satisfy(isOutOfMemoryError);
    await settleStowageDevice(device);
    const c = filled(device, 3); // takes a's place: the least recently used clean range
    expect(stowageDevicePaging(device)).to.include({ pagedOut: 1 });
    await settleStowageDevice(device);
    for (const { buffer, bytes } of [a, b, c, a]) expect(same(await readBuffer(device, buffer, 0, BYTES), bytes)).to.equal(true);
    const paging = stowageDevicePaging(device)!;
    expect(paging.pagedIn).to.be.at.least(2);
    expect(allocator.backend.budget.stats()['device_bytes.peak']).to.be.at.most(BUDGET + 16);
  });

  it('reruns a dispatch whose bind group was made before its ranges moved, binding their new places (Note [Bind groups after a move])', async () => {
    const input = filled(device, 4);
    const output = device.createBuffer({ size: BYTES, usage: STORAGE | COPY_SRC | COPY_DST });
    const module = device.createShaderModule({
      code: `@group(0) @binding(0) var<storage, read> a: array<u32>;
             @group(0) @binding(1) var<storage, read_write> out: array<u32>;
             @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) {
               if (id.x < arrayLength(&out)) { out[id.x] = a[id.x] + 1u; }
             }`,
    });
    const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: input.buffer } }, { binding: 1, resource: { buffer: output } }] });
    const words = Math.floor(BYTES / 4);
    const run = () => {
      const encoder = device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(Math.ceil(words / 64));
      pass.end();
      device.queue.submit([encoder.finish()]);
    };
    const expected = new Uint8Array(new Uint32Array(input.bytes.buffer, 0, words).map((w) => (w + 1) >>> 0).buffer);
    run();
    await settleStowageDevice(device);
    const other = filled(device, 5); // pages out input (the least recently used)
    await settleStowageDevice(device);
    expect(same(await readBuffer(device, other.buffer, 0, BYTES), other.bytes)).to.equal(true);
    // input comes back where output was (output is now the least recently used), then output where input was.
    expect(same(await readBuffer(device, input.buffer, 0, BYTES), input.bytes)).to.equal(true);
    expect(stowageDevicePaging(device)).to.include({ pagedOut: 2, pagedIn: 1 });
    run(); // the group's places both moved: it is made again
    await settleStowageDevice(device);
    expect(same(await readBuffer(device, output, 0, words * 4), expected), 'output').to.equal(true);
    expect(same(await readBuffer(device, input.buffer, 0, BYTES), input.bytes), 'input').to.equal(true);
    expect(same(await readBuffer(device, other.buffer, 0, BYTES), other.bytes), 'other').to.equal(true);
    expect(stowageDevicePaging(device)!.rebuiltBindGroups).to.equal(1);
  });

  it('never pages out a range an unsubmitted encoder names: the allocation that needs its room fails instead', async () => {
    const a = filled(device, 6);
    const out = device.createBuffer({ size: BYTES, usage: STORAGE | COPY_SRC | COPY_DST });
    await settleStowageDevice(device);
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(a.buffer, 0, out, 0, BYTES); // names a (read) and out (written: not clean)
    const refused = allocate(device);
    expect(refused).to.satisfy(isOutOfMemoryError);
    device.queue.submit([encoder.finish()]);
    const c = filled(device, 7); // now a may leave
    expect(stowageDevicePaging(device)).to.include({ pagedOut: 1 });
    expect(same(await readBuffer(device, out, 0, BYTES), a.bytes), 'the copy read a, not c').to.equal(true);
    await settleStowageDevice(device);
    expect(same(await readBuffer(device, a.buffer, 0, BYTES), a.bytes)).to.equal(true);
    expect(same(await readBuffer(device, c.buffer, 0, BYTES), c.bytes)).to.equal(true);
  });

  it('lets the ranges of an encoder whose command found no room page again, and refuses its command buffer at submit (Note [A failed command spoils its encoder])', async () => {
    const a = filled(device, 21);
    const b = filled(device, 22);
    await settleStowageDevice(device);
    const c = filled(device, 23); // pages a out, the least recently used clean range
    expect(stowageDevicePaging(device)).to.include({ pagedOut: 1 });
    device.queue.writeBuffer(b.buffer, 0, b.bytes); // written since its host copy: b may not leave now
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(b.buffer, 0, c.buffer, 0, BYTES); // names b and c
    expect(() => encoder.copyBufferToBuffer(a.buffer, 0, c.buffer, 0, BYTES), "a's page-in finds no clean range").to.throw(/Out of memory/);
    const spoiled = encoder.finish();
    expect(() => device.queue.submit([spoiled])).to.throw(InvalidArgumentError, /every command succeeded/);
    await settleStowageDevice(device); // the spoiled encoder holds b and c no longer: both get host copies
    expect(same(await readBuffer(device, a.buffer, 0, BYTES), a.bytes), 'a comes back in the room of one of them').to.equal(true);
    expect(same(await readBuffer(device, c.buffer, 0, BYTES), c.bytes), 'the spoiled copy never ran').to.equal(true);
    expect(same(await readBuffer(device, b.buffer, 0, BYTES), b.bytes)).to.equal(true);
  });

  it('gives a paged-out place to new work only after the submits that used the range, and never pages out a range written since its host copy', async () => {
    const a = filled(device, 8);
    const out = device.createBuffer({ size: BYTES, usage: STORAGE | COPY_SRC | COPY_DST });
    await settleStowageDevice(device);
    // A submit reads a (still in flight when a leaves): the queue runs it before c's write into a's old place.
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(a.buffer, 0, out, 0, BYTES);
    device.queue.submit([encoder.finish()]);
    const c = filled(device, 9);
    expect(same(await readBuffer(device, out, 0, BYTES), a.bytes), 'the submitted copy read a').to.equal(true);
    // a written after its host copy: not clean, so it stays until the next settle.
    device.queue.writeBuffer(c.buffer, 0, pattern(BYTES, 10));
    await settleStowageDevice(device);
    device.queue.writeBuffer(c.buffer, 0, pattern(BYTES, 11));
    const pagedOut = stowageDevicePaging(device)!.pagedOut;
    expect(same(await readBuffer(device, a.buffer, 0, BYTES), a.bytes)).to.equal(true); // pages out out, the only clean one
    expect(stowageDevicePaging(device)!.pagedOut).to.equal(pagedOut + 1);
    expect(same(await readBuffer(device, c.buffer, 0, BYTES), pattern(BYTES, 11))).to.equal(true);
  });

  it('keeps every byte of every buffer through any sequence of creates, writes, copies, settles, reads and destroys under a small budget (property)', async () => {
    const budget = MiB / 4;
    const op = fc.oneof(
      { weight: 4, arbitrary: fc.record({ kind: fc.constant('create' as const), words: fc.oneof(fc.integer({ min: 1, max: 64 }), fc.integer({ min: 8 * 1024, max: 16 * 1024 })) }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('write' as const), which: fc.nat(), seed: fc.nat(), at: fc.double({ min: 0, max: 1, noNaN: true }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('copy' as const), which: fc.nat(), to: fc.nat() }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('settle' as const) }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('read' as const), which: fc.nat() }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('destroy' as const), which: fc.nat() }) },
    );
    await fc.assert(
      // A prefix of large buffers (each settled) fills the budget, so that the ops after it page.
      fc.asyncProperty(fc.array(fc.integer({ min: 8 * 1024, max: 16 * 1024 }), { minLength: 4, maxLength: 8 }), fc.array(op, { minLength: 8, maxLength: 40 }), async (prefix, rest) => {
        const ops = [...prefix.flatMap((words) => [{ kind: 'create' as const, words }, { kind: 'settle' as const }]), ...rest];
        using own = createWebGpuAllocator(context, { limit: budget, pagingReserve: { fraction: 1 / 16 } });
        const paged = stowageDevice(own, 'webgpu:0', { paging: true });
        const live: { buffer: GPUBuffer; bytes: Uint8Array }[] = [];
        const pick = (i: number) => live[i % live.length]!;
        /** Runs `body`; an OutOfMemoryError (nothing clean left to page out) leaves the model as it was. */
        const orOutOfMemory = async (body: () => unknown) => {
          try {
            await body();
          } catch (error) {
            if (!isOutOfMemoryError(error)) throw error;
          }
        };
        for (const o of ops) {
          if (o.kind === 'create') {
            await orOutOfMemory(() => live.push({ buffer: paged.createBuffer({ size: o.words * 4, usage: STORAGE | COPY_SRC | COPY_DST }), bytes: new Uint8Array(o.words * 4) }));
          } else if (o.kind === 'settle') {
            await settleStowageDevice(paged);
          } else if (live.length > 0) {
            const target = pick(o.which);
            if (o.kind === 'write') {
              const offset = Math.floor((o.at * target.bytes.length) / 8) * 4;
              const data = pattern(target.bytes.length - offset, o.seed);
              await orOutOfMemory(() => {
                paged.queue.writeBuffer(target.buffer, offset, data);
                target.bytes.set(data, offset);
              });
            } else if (o.kind === 'copy') {
              const to = pick(o.to);
              if (to === target) continue;
              const n = Math.min(target.bytes.length, to.bytes.length);
              await orOutOfMemory(() => {
                const encoder = paged.createCommandEncoder();
                encoder.copyBufferToBuffer(target.buffer, 0, to.buffer, 0, n);
                paged.queue.submit([encoder.finish()]);
                to.bytes.set(target.bytes.subarray(0, n));
              });
            } else if (o.kind === 'read') {
              await orOutOfMemory(async () => expect(same(await readBuffer(paged, target.buffer, 0, target.bytes.length), target.bytes), 'read').to.equal(true));
            } else {
              target.buffer.destroy();
              live.splice(live.indexOf(target), 1);
            }
          }
        }
        for (const { buffer, bytes } of live) {
          await settleStowageDevice(paged);
          expect(same(await readBuffer(paged, buffer, 0, bytes.length), bytes), 'at the end').to.equal(true);
        }
        expect(own.backend.budget.stats()['device_bytes.peak']).to.be.at.most(budget + 16);
      }),
      { numRuns: 25 },
    );
  });

  it('refuses a paging option that is not true or false, and options that are not an object', () => {
    expect(() => stowageDevice(allocator, 'webgpu:0', { paging: 'yes' as unknown as boolean })).to.throw(InvalidArgumentError, 'options.paging');
    expect(() => stowageDevice(allocator, 'webgpu:0', 3 as never)).to.throw(InvalidArgumentError, 'options');
  });

  it('is inert without the paging option: settling copies nothing and a full budget stays full', async () => {
    const plain = stowageDevice(allocator);
    filled(plain, 12);
    filled(plain, 13);
    await settleStowageDevice(plain);
    expect(allocate(plain)).to.satisfy(isOutOfMemoryError);
    expect(stowageDevicePaging(plain)).to.include({ hostCopies: 0, pagedOut: 0 });
  });
});
