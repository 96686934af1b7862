import { expect } from 'chai';
import { isOutOfMemoryError } from '@stowage/core';
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

  it('is inert without the paging option: settling copies nothing and a full budget stays full', async () => {
    const plain = stowageDevice(allocator);
    filled(plain, 12);
    filled(plain, 13);
    await settleStowageDevice(plain);
    expect(allocate(plain)).to.satisfy(isOutOfMemoryError);
    expect(stowageDevicePaging(plain)).to.include({ hostCopies: 0, pagedOut: 0 });
  });
});
