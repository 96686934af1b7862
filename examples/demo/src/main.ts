import 'reflect-metadata';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CachingAllocator, Runtime, TensorImpl } from '@stowage/core';
import { cpu, createRuntime, formatBytes, isStowageError, StatisticsAllocator, wrapAllocators } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import { arena } from '@stowage/example-arena-allocator';
import type { WebGpuAllocator, WebGpuContext } from '@stowage/allocator-webgpu';
import { openWebGpuDevice, webgpu } from '@stowage/allocator-webgpu';
import type { CudaAllocator } from '@stowage/allocator-cuda';
import { cuda } from '@stowage/allocator-cuda';
import { CUDA_ENGINE_DEFAULTS } from '@stowage/allocator-cuda/driver';
import { testLibcuda } from '@stowage/allocator-cuda/testing';

/** The CUDA default's page sizes (Note [Expandable segments on CUDA] in allocator-cuda). */
const PAGES = CUDA_ENGINE_DEFAULTS.segmentPageBytes;

/** The demo: compose a runtime, make tensors, views and reshapes, and print what memory they use. */
async function main(): Promise<void> {
  // WebGPU when an adapter exists (Dawn over SwiftShader on a machine without a GPU); the demo runs without it.
  let gpu: WebGpuContext | string;
  try {
    gpu = await openWebGpuDevice();
  } catch (error) {
    gpu = (error as Error).message;
  }
  // CUDA on a real libcuda when one loads, else on the stand-in libcuda built from C (memory calls, no kernels).
  const libcuda = testLibcuda();
  const plugins = [
    cpu({ limit: '1GiB' }),
    wrapAllocators('cpu', (a) => new StatisticsAllocator(a)),
    arena({ capacity: '16MiB' }),
    ...(typeof gpu === 'string' ? [] : [webgpu({ device: gpu.device, limit: '256MiB' })]),
    ...(typeof libcuda === 'string' ? [] : [cuda({ libcuda: libcuda.path, limit: '256MiB', allocConf: '' })]),
  ];
  await using rt = await createRuntime({ plugins });
  console.log(`Stowage demo — Node ${process.version}`);
  console.log(`Runtime composed from plugins: ${plugins.map((p) => p.name).join(', ')}; devices: ${rt.deviceTypes.join(', ')}\n`);

  const x = rt.tensor([4, 6], { dtype: 'float32' });
  fill(x, (i) => i);
  describe('x = tensor([4, 6])', x);

  const flat = x.view([-1]);
  describe('x.view([-1])           (shares x\'s storage)', flat, x);

  const xt = x.asStrided([6, 4], [1, 6]);
  describe('xt = x transposed       (a strided view)', xt, x);

  const r1 = xt.reshape([2, 3, 4]);
  describe('xt.reshape([2, 3, 4])   (viewable: alias)', r1, x);

  const r2 = xt.reshape([24]);
  describe('xt.reshape([24])        (not viewable: copy)', r2, x);
  console.log(`  first elements of the copy: ${[...floats(r2).slice(0, 8)].join(', ')}`);

  const a = rt.tensor([256, 256], { dtype: 'float16', device: 'arena' });
  const shared = rt.storage(1 << 20, { shared: true });
  rt.write(shared, new Uint8Array([1, 2, 3, 4]));
  describe('a = tensor([256, 256], float16) on the example arena allocator', a);
  console.log(`shared storage: ${formatBytes(shared.byteLength)} on ${(shared.data().handle as object).constructor.name}, first bytes ${[...(await rt.read(shared)).slice(0, 4)]}`);

  console.log('\nBad input gets a typed error:');
  for (const attempt of [() => rt.storage(-1), () => x.view([5, 5]), () => rt.storage(8, { device: 'cuda:7' }), () => rt.storage(32 << 20, { device: 'arena' })]) {
    try {
      attempt();
    } catch (error) {
      if (!isStowageError(error)) throw error;
      console.log(`  ${error.code}: ${error.message}`);
    }
  }

  console.log('\nThe caching engine under the CPU allocator (a training-step loop with static shapes):');
  const engine = (rt.allocator('cpu') as StatisticsAllocator).upstream as CachingAllocator;
  engine.recordHistory({ maxEntries: 1000 });
  for (let step = 0; step < 5; step++) {
    const before = engine.memoryStats().num_device_alloc;
    const activations = [4096, 65536, 3 << 20, 12 << 20].map((n) => rt.storage(n));
    const grads = activations.map((a) => rt.storage(a.byteLength));
    for (const s of [...activations, ...grads]) s.release();
    const after = engine.memoryStats();
    console.log(
      `  step ${step}: backend mallocs this step ${after.num_device_alloc - before}, reserved ${formatBytes(after['reserved_bytes.all.current'])}, ` +
        `peak allocated ${formatBytes(after['allocated_bytes.all.peak'])}`,
    );
  }
  const snapshotPath = join(tmpdir(), 'stowage-demo-snapshot.json');
  writeFileSync(snapshotPath, JSON.stringify(engine.snapshot()));
  console.log(`  snapshot in PyTorch's schema (open it in PyTorch's memory visualizer): ${snapshotPath}`);
  const before = engine.reservedBytes;
  engine.emptyCache();
  console.log(`  emptyCache(): reserved ${formatBytes(before)} -> ${formatBytes(engine.reservedBytes)} (live storages keep their memory)`);
  const counters = (rt.allocator('cpu') as StatisticsAllocator).counters();
  console.log(`  StatisticsAllocator adaptor: ${counters.count.total} allocations in all, peak ${formatBytes(counters.bytes.peak)} requested at once`);

  if (typeof gpu === 'string') console.log(`\nWebGPU: skipped — ${gpu}`);
  else await webGpuSection(rt, gpu);
  if (typeof libcuda === 'string') console.log(`\nCUDA: skipped — ${libcuda}`);
  else await cudaSection(rt, libcuda.hooks === null ? 'the CUDA driver' : 'the stand-in libcuda (no GPU here)');

  console.log('\nMemory summary:');
  console.log(rt.memorySummary());
  const snapshot = rt.allocator('arena').snapshot();
  const blocks = snapshot.segments.flatMap((s) => s.blocks);
  console.log(`\nArena snapshot (PyTorch schema): ${snapshot.segments.length} segment, ${blocks.length} blocks: ${blocks.map((b) => `${b.state} ${formatBytes(b.size)}`).join(', ')}`);
}

/** Tensors on a real WebGPU device: sub-allocated GPUBuffer ranges, a reshape that copies on the device. */
async function webGpuSection(rt: Runtime, gpu: WebGpuContext): Promise<void> {
  console.log(`\nWebGPU on ${gpu.adapterInfo}:`);
  const t = rt.tensor([64, 48], { dtype: 'float32', device: 'webgpu' });
  rt.write(t.storage, new Float32Array(64 * 48).map((_, i) => i));
  const copy = t.asStrided([48, 64], [1, 48]).reshape([-1]);
  const values = new Float32Array((await rt.read(copy.storage)).buffer);
  const allocator = rt.allocator('webgpu') as WebGpuAllocator;
  const ptr = copy.storage.data();
  console.log(`  ${String(copy)}: first elements ${[...values.slice(0, 4)].join(', ')} (a transpose, copied on the GPU)`);
  console.log(
    `  block at offset ${ptr.byteOffset} of a ${formatBytes((ptr.handle as GPUBuffer).size)} GPUBuffer; createBuffer calls so far: ${allocator.backend.createdBuffers}`,
  );
  for (let i = 0; i < 100; i++) rt.storage(4096 + 512 * (i % 7), { device: 'webgpu' }).release();
  console.log(`  100 more allocations and frees: createBuffer calls ${allocator.backend.createdBuffers}`);
}

/** Tensors in CUDA device memory: an expandable segment growing by pages, the driver calls made, an OOM message. */
async function cudaSection(rt: Runtime, driverName: string): Promise<void> {
  const allocator = rt.allocator('cuda:0') as CudaAllocator;
  const driver = allocator.backend.driver;
  console.log(`\nCUDA on ${driverName}, ${driver.deviceName(allocator.backend.cuDevice)}:`);
  const calls = driver.callCount;
  const t = rt.tensor([512, 512], { dtype: 'float32', device: 'cuda:0' });
  rt.write(t.storage, new Float32Array(512 * 512).map((_, i) => i / 2));
  const values = new Float32Array((await rt.read(t.storage)).buffer);
  console.log(`  ${String(t)} at device address 0x${allocator.devicePointer(t.storage.data()).toString(16)}: first elements ${[...values.slice(0, 4)].join(', ')}`);
  const storages = Array.from({ length: 20 }, (_, i) => rt.storage((i + 1) << 20, { device: 'cuda:0' }));
  const segments = allocator.snapshot().segments;
  console.log(
    `  21 storages in ${segments.length} expandable segment${segments.length === 1 ? '' : 's'} (${formatBytes(allocator.memoryStats()['reserved_bytes.all.current'])} mapped, in runs of ${formatBytes(PAGES.small)} pages in the small pool and ${formatBytes(PAGES.large)} pages in the large): ${driver.callCount - calls} driver calls`,
  );
  for (const s of storages) s.release();
  try {
    rt.storage(300 << 20, { device: 'cuda:0' });
  } catch (error) {
    if (!isStowageError(error)) throw error;
    console.log(`  ${error.code}: ${error.message}`);
  }
}

function fill(t: TensorImpl, value: (i: number) => number): void {
  const values = new Float32Array(t.numel).map((_, i) => value(i));
  hostBytes(t.storage.mutableData()).set(new Uint8Array(values.buffer));
}

/** A float32 tensor's elements in row-major order. */
function floats(t: TensorImpl): Float32Array {
  const data = new Float32Array(hostBytes(t.storage.data()).slice().buffer);
  const out = new Float32Array(t.numel);
  const index = new Array<number>(t.dim).fill(0);
  for (let n = 0; n < t.numel; n++) {
    out[n] = data[t.storageOffset + index.reduce((s, i, d) => s + i * t.strides[d]!, 0)]!;
    for (let d = t.dim - 1; d >= 0; d--) {
      if (++index[d]! < t.sizes[d]!) break;
      index[d] = 0;
    }
  }
  return out;
}

function describe(label: string, t: TensorImpl, base?: TensorImpl): void {
  const aliasing = base === undefined ? '' : t.storage === base.storage ? '  [same storage]' : '  [new storage]';
  console.log(`${label}\n  ${String(t)}, storage ${formatBytes(t.storage.byteLength)}${aliasing}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
