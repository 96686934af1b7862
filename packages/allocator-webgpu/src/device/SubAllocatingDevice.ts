import type { DataPtr } from '@stowage/core';
import { DisposedError, InvalidArgumentError } from '@stowage/core';
import type { WebGpuBuffers } from '../WebGpuBuffers.js';
import { BufferUsage } from '../WebGpuUsage.js';
import type { Range, UseSet } from './RangePager.js';
import { RangePager, residentRange } from './RangePager.js';
import { HostMapping } from './HostMapping.js';
import { passThrough } from './passThrough.js';
import { mappedMembers, placementOf } from './placement.js';
import { ReadbackPool } from './ReadbackPool.js';
import { StandIns } from './standIn.js';
import { Uploads } from './uploads.js';
import { roundUp4, sharedBytes, writtenBytes } from './sharedBytes.js';
import type { AliasCopy } from './restartedPass.js';
import { restartedPass } from './restartedPass.js';
import { writableStorageCode, writableStorageLayout } from './storageAccess.js';

/**
 * A GPUDevice that sub-allocates (issue 36): a JavaScript proxy of a real GPUDevice whose storage buffers are
 * ranges of Stowage segments, so that a WebGPU program (onnxruntime-web's WebGPU EP, a hand-written one) runs on
 * Stowage's memory unchanged.
 * - `createBuffer` returns a StowageBuffer, a stand-in GPUBuffer (`instanceof GPUBuffer`, `size` and `usage` as
 *   asked) over a range the device's WebGpuBuffers service allocates under the device's budget, for a buffer whose
 *   usage is STORAGE plus at most COPY_SRC | COPY_DST | INDIRECT (a range of a storage segment), UNIFORM plus at most
 *   COPY_SRC | COPY_DST (a range of a uniform segment: Note [Uniform ranges]), or MAP_WRITE | COPY_SRC made
 *   mappedAtCreation (an upload: host bytes, written where they are copied: Note [Uploads written where they go]);
 *   any of them may be made
 *   mappedAtCreation (Note [Mapped at creation]). A MAP_READ | COPY_DST buffer is a stand-in over a real buffer of
 *   a pool (Note [Pooled readback buffers]). Every other buffer is the real device's.
 * - A new range reads zeros, as a new GPUBuffer does: its clear is encoded before the next submit or writeBuffer.
 * - Every method that takes a buffer translates a StowageBuffer to its segment and offset: bind group entries,
 *   `queue.writeBuffer`, the encoder's copies, `clearBuffer`, `resolveQuerySet`, `dispatchWorkgroupsIndirect`.
 * - Note [Storage bindings are all writable]: shaders and layouts are rewritten so that ranges of one segment can be
 *   read and written in one dispatch; Note [Aliased bindings]: a range bound twice in one bind group is bound once
 *   as itself and once as a copy made before each dispatch; Note [Copies within a segment]: a copy between two
 *   ranges of one segment goes through a scratch range.
 * - Note [Shared memory uploads]: `writeBuffer` from a view of a SharedArrayBuffer is copied first (dawn.node).
 * - `destroy()` frees the range; the allocator's frees wait for the next submit (Note [Submit epochs]), so work
 *   recorded before the destroy and submitted after it still reads the range's bytes. Scratch ranges are freed
 *   once the command buffer that used them is submitted.
 * - With `paging` on, ranges move between the device and the host between runs (Note [Paging between runs] in
 *   RangePager.ts): every translation above first makes the range resident, and a bind group whose ranges moved is
 *   made again where it is set (Note [Bind groups after a move]).
 * Everything else passes through to the real device.
 *
 * Invariants: every live StowageBuffer owns exactly one live pointer of `buffers` while resident and none while
 * paged out (`range.ptr` undefined, its bytes in `range.host`); a range in `#pendingClears` belongs to a live
 * StowageBuffer; the temporaries of a command buffer are freed once, after its submit; a bind group's record holds
 * the generation of each of its ranges when its current real group was made.
 */
export class SubAllocatingDevice {
  /** The proxy handed to the program. */
  readonly device: GPUDevice;
  /** createBuffer calls the program made, and how many became ranges (the rest went to the real device). */
  readonly counts = { createBuffer: 0, subAllocated: 0, uniforms: 0, mappedAtCreation: 0, readbacks: 0, readbackBuffers: 0, scratch: 0, aliasCopies: 0, indirectCopies: 0 };
  /** Moves ranges to the host and back under the budget (Note [Paging between runs]); inert unless `paging`. */
  readonly pager: RangePager;
  /** The real buffers behind MAP_READ stand-ins (Note [Pooled readback buffers]). */
  readonly readbackPool: ReadbackPool;

  readonly #real: GPUDevice;
  readonly #queue: GPUQueue;
  readonly #ranges = new WeakMap<object, Range>();
  /** Upload stand-ins' host bytes (Note [Uploads written where they go]). */
  readonly #uploads = new Uploads();
  readonly #standIns = new StandIns();
  /** New ranges whose clear is not yet encoded (Note [New ranges read zeros]). */
  readonly #pendingClears = new Set<Range>();
  /** Scratch pointers and kept objects of finished command buffers, freed after their submit. */
  readonly #temporaries = new WeakMap<GPUCommandBuffer, Temporaries>();
  /** Alias copies of bind groups (Note [Aliased bindings]). */
  readonly #aliasCopies = new WeakMap<GPUBindGroup, AliasCopy[]>();
  /** Frees the range of a StowageBuffer collected without `destroy()`. */
  readonly #collected: FinalizationRegistry<Range>;
  /** The ranges each finished command buffer names, closed at its submit (Note [Paging between runs]). */
  readonly #useSets = new WeakMap<GPUCommandBuffer, UseSet>();
  /** Command buffers of encoders a command failed in (Note [A failed command spoils its encoder]). */
  readonly #spoiled = new WeakSet<GPUCommandBuffer>();
  /** What a bind group was made of, to make it again after its ranges moved (Note [Bind groups after a move]). */
  readonly #groups = new WeakMap<GPUBindGroup, GroupRecord>();
  /** Frees the alias scratch of a collected bind group (a command buffer that used it keeps it until its submit). */
  readonly #collectedGroups: FinalizationRegistry<DataPtr[]>;
  /** The real INDIRECT buffer indirect dispatches read their arguments from (Note [Indirect arguments]). */
  #indirect: GPUBuffer | undefined;

  /** @param options.paging pages ranges out between runs (Note [Paging between runs]); default false */
  constructor(
    private readonly buffers: WebGpuBuffers,
    options: { readonly paging?: boolean } = {},
  ) {
    this.#real = buffers.backend.gpuDevice;
    this.#queue = this.#real.queue;
    this.pager = new RangePager(buffers, this.#queue, options.paging === true, () => {
      const clears = this.#clearsCommandBuffer();
      if (clears) this.#queue.submit([clears]);
    });
    this.readbackPool = new ReadbackPool(this.#real);
    this.#collected = new FinalizationRegistry((range) => {
      const ptr = this.pager.forget(range);
      if (ptr !== undefined) this.#freeCollected(ptr);
    });
    this.#collectedGroups = new FinalizationRegistry((ptrs) => {
      for (const ptr of ptrs) this.#freeCollected(ptr);
    });
    this.device = passThrough(this.#real, {
      queue: passThrough(this.#queue, {
        submit: (commandBuffers: Iterable<GPUCommandBuffer>) => this.#submit(commandBuffers),
        writeBuffer: (...args: Parameters<GPUQueue['writeBuffer']>) => this.#writeBuffer(...args),
      }),
      createBuffer: (descriptor: GPUBufferDescriptor) => this.#createBuffer(descriptor),
      createBindGroup: (descriptor: GPUBindGroupDescriptor) => this.#createBindGroup(descriptor),
      createBindGroupLayout: (descriptor: GPUBindGroupLayoutDescriptor) => this.#real.createBindGroupLayout(writableStorageLayout(descriptor)),
      createShaderModule: (descriptor: GPUShaderModuleDescriptor) => this.#real.createShaderModule({ ...descriptor, code: writableStorageCode(descriptor.code) }),
      createCommandEncoder: (descriptor?: GPUCommandEncoderDescriptor) => this.#encoder(this.#real.createCommandEncoder(descriptor)),
    });
  }

  /** Frees a collected object's pointer; nothing when its allocator was disposed meanwhile (it freed everything). */
  #freeCollected(ptr: DataPtr): void {
    try {
      if (!ptr.isReleased) this.buffers.free(ptr);
    } catch (error) {
      if (!(error instanceof DisposedError)) throw error;
    }
  }

  /** True when `buffer` is a stand-in this device made. */
  isStowageBuffer(buffer: unknown): boolean {
    return typeof buffer === 'object' && buffer !== null && this.#ranges.has(buffer);
  }

  /** The segment and offset a StowageBuffer's range starts at (made resident first), a readback stand-in's real buffer, or the buffer itself at offset 0. */
  bindingOf(buffer: GPUBuffer): { buffer: GPUBuffer; offset: number } {
    return this.#place(buffer, undefined, false);
  }

  /**
   * Where `buffer` lies now: a range made resident first and its use noted by `set` (Note [Paging between runs]),
   * `writes` when the use may change its bytes, `wholeWrite` when it overwrites all of them; `use` when a command,
   * bind group or write names it (Note [Uploads written where they go]).
   */
  #place(buffer: GPUBuffer, set: UseSet | undefined, writes: boolean, wholeWrite = false, use = false): { buffer: GPUBuffer; offset: number } {
    const range = this.#ranges.get(buffer);
    if (!range) return { buffer: this.readbackPool.realOf(buffer) ?? buffer, offset: 0 };
    if (use) range.used = true;
    this.pager.use(range, set, writes, wholeWrite);
    return { buffer: range.segment, offset: range.offset };
  }

  #createBuffer(descriptor: GPUBufferDescriptor): GPUBuffer {
    this.counts.createBuffer++;
    const placement = placementOf(descriptor);
    if (placement === 'readback') return this.#readbackBuffer(descriptor);
    if (placement === 'upload') return this.#uploadBuffer(descriptor);
    if (placement === undefined) return this.#real.createBuffer(descriptor);
    const mapped = descriptor.mappedAtCreation === true;
    const uniform = placement === 'uniform';
    const ptr = this.pager.allocate(roundUp4(descriptor.size), uniform ? { usage: 'uniform' } : undefined);
    const { buffer: segment, offset } = this.buffers.bindingOf(ptr);
    const range = residentRange(ptr, segment, offset, descriptor.size, roundUp4(descriptor.size), uniform, mapped);
    // The mapping's bytes go where the range lies at its unmap (paging may have moved it since).
    const mapping = mapped ? new HostMapping(descriptor.size, (bytes) => this.#writeBuffer(stand, 0, bytes)) : undefined;
    const stand = this.#standIns.make(segment, descriptor, () => this.#destroy(range), mapping && mappedMembers(mapping));
    this.#track(stand, range);
    if (!mapped) this.#pendingClears.add(range); // a mapping writes every byte at its unmap
    this.counts.subAllocated++;
    if (range.uniform && !mapped) this.counts.uniforms++;
    if (mapped) this.counts.mappedAtCreation++;
    return stand;
  }

  /** An upload stand-in (Note [Uploads written where they go] in uploads.ts). */
  #uploadBuffer(descriptor: GPUBufferDescriptor): GPUBuffer {
    this.counts.mappedAtCreation++;
    return this.#uploads.make(
      descriptor,
      (destroy, mapping) => this.#standIns.make(this.#indirectArguments(), descriptor, destroy, mapping),
      (stand) => {
        const range = this.#ranges.get(stand);
        if (range) this.#destroy(range);
      },
    );
  }

  /** The host bytes of an upload not yet a range (Note [Uploads written where they go]), else undefined. */
  #uploadBytes(buffer: GPUBuffer): Uint8Array | undefined {
    return this.#ranges.has(buffer) ? undefined : this.#uploads.bytesOf(buffer);
  }

  /** Makes an upload a range of a uniform segment holding its bytes (Note [Uploads written where they go]). */
  #uploadRange(stand: GPUBuffer, bytes: Uint8Array, notIn?: GPUBuffer): void {
    let ptr = notIn === undefined ? undefined : this.pager.allocate(bytes.byteLength);
    if (ptr !== undefined && this.buffers.bindingOf(ptr).buffer === notIn) {
      this.buffers.free(ptr);
      ptr = undefined;
    }
    ptr ??= this.pager.allocate(bytes.byteLength, { usage: 'uniform' });
    const { buffer: segment, offset } = this.buffers.bindingOf(ptr);
    const uniform = (segment.usage & BufferUsage.UNIFORM) !== 0;
    const range = residentRange(ptr, segment, offset, stand.size, bytes.byteLength, uniform, true);
    this.#queue.writeBuffer(segment, offset, bytes);
    this.#track(stand, range);
    this.counts.subAllocated++;
  }

  /** Makes `stand` the program's handle of `range`: found by its stand-in, paged (when paging), freed when collected. */
  #track(stand: GPUBuffer, range: Range): void {
    this.#ranges.set(stand, range);
    this.pager.track(range);
    this.#collected.register(stand, range, range);
  }


  /** A MAP_READ stand-in over a pooled real buffer (Note [Pooled readback buffers]). */
  #readbackBuffer(descriptor: GPUBufferDescriptor): GPUBuffer {
    const stand = this.readbackPool.standIn(descriptor, (real, destroy, mapping) => this.#standIns.make(real, descriptor, destroy, mapping));
    this.counts.readbacks++;
    this.counts.readbackBuffers = this.readbackPool.created;
    return stand;
  }

  #destroy(range: Range): void {
    if (range.destroyed) return;
    range.destroyed = true;
    this.#pendingClears.delete(range);
    this.#collected.unregister(range);
    const ptr = this.pager.forget(range);
    if (ptr !== undefined) this.buffers.free(ptr);
  }

  /**
   * Note [Scratch ranges]: a copy between two ranges of one segment goes through a scratch range, which must lie in
   * another buffer: a range of the other kind of segment (storage and uniform segments are never shared), under the
   * same budget. Only copies use it, never a binding: a uniform segment bound as writable storage and as a uniform
   * in one dispatch would be refused (Note [Uniform ranges]).
   */
  #allocateScratch(bytes: number, notIn: GPUBuffer): DataPtr<GPUBuffer> {
    const inUniform = (notIn.usage & BufferUsage.UNIFORM) !== 0;
    return this.pager.allocate(roundUp4(bytes), inUniform ? undefined : { usage: 'uniform' });
  }

  /** A scratch range of `bytes` outside `notIn` (Note [Scratch ranges]); freed after the submit of the command buffer that used it. */
  #scratch(bytes: number, notIn: GPUBuffer, temporaries: Temporaries): { buffer: GPUBuffer; offset: number } {
    const ptr = this.#allocateScratch(bytes, notIn);
    temporaries.pointers.push(ptr);
    this.counts.scratch++;
    const { buffer, offset } = this.buffers.bindingOf(ptr);
    return { buffer, offset };
  }

  /**
   * Note [Indirect arguments]: a program asks for STORAGE | INDIRECT buffers (onnxruntime-web asks INDIRECT of every
   * storage buffer, and binds an indirect dispatch's arguments as an input of the same dispatch) but segments have no
   * INDIRECT usage. Such buffers are ranges too; an indirect dispatch from one copies its 12 bytes of arguments into
   * one small INDIRECT buffer of the device's own just before it (the pass is restarted for the copy: Note [Restarted
   * passes]). Commands run in order, so one buffer serves every dispatch. It is 16 bytes outside the budget.
   */
  #indirectArguments(): GPUBuffer {
    this.#indirect ??= this.#real.createBuffer({ size: 16, usage: INDIRECT | BufferUsage.COPY_DST, label: 'stowage indirect arguments' });
    return this.#indirect;
  }

  /**
   * Note [New ranges read zeros]: a new GPUBuffer reads zeros, and programs rely on it; a range may hold a freed
   * buffer's bytes. So every new range is cleared, by one command buffer of clears submitted before the program's
   * next submit (in the same submit) or next writeBuffer.
   */
  #clearsCommandBuffer(): GPUCommandBuffer | undefined {
    if (this.#pendingClears.size === 0) return undefined;
    const encoder = this.#real.createCommandEncoder({ label: 'stowage clears' });
    for (const range of this.#pendingClears) if (range.ptr !== undefined) encoder.clearBuffer(range.segment, range.offset, range.clearBytes);
    this.#pendingClears.clear();
    return encoder.finish();
  }

  #submit(commandBuffers: Iterable<GPUCommandBuffer>): undefined {
    const list = Array.from(commandBuffers);
    if (list.some((cb) => this.#spoiled.has(cb))) {
      // Note [A failed command spoils its encoder]: nothing of the submit runs.
      throw new InvalidArgumentError('commandBuffers', 'a command buffer whose encoder had a command fail', 'command buffers of encoders whose every command succeeded: record the work again once there is room');
    }
    const clears = this.#clearsCommandBuffer();
    this.#queue.submit(clears ? [clears, ...list] : list);
    for (const cb of list) {
      const uses = this.#useSets.get(cb);
      if (uses) this.pager.close(uses);
    }
    const done = list.map((cb) => this.#temporaries.get(cb)).filter((t): t is Temporaries => t !== undefined);
    if (done.length > 0) {
      // Note [Frees after their submit]: the command buffers that used them are submitted; queue order protects them.
      this.buffers.freeingSubmitted(() => {
        for (const t of done) for (const ptr of t.pointers) if (!ptr.isReleased) this.buffers.free(ptr);
      });
      for (const cb of list) this.#temporaries.delete(cb);
    }
    return undefined;
  }

  #writeBuffer(buffer: GPUBuffer, bufferOffset: number, data: GPUAllowSharedBufferSource, dataOffset?: number, size?: number): undefined {
    const clears = this.#clearsCommandBuffer();
    if (clears) this.#queue.submit([clears]);
    const shared = sharedBytes(data, dataOffset, size);
    const range = this.#ranges.get(buffer);
    const whole = range !== undefined && bufferOffset === 0 && writtenBytes(data, dataOffset, size) >= range.size;
    const target = this.#place(buffer, undefined, true, whole, true);
    const offset = target.offset + bufferOffset;
    if (shared) this.#queue.writeBuffer(target.buffer, offset, shared);
    else if (dataOffset === undefined) this.#queue.writeBuffer(target.buffer, offset, data as GPUAllowSharedBufferSource);
    else this.#queue.writeBuffer(target.buffer, offset, data as GPUAllowSharedBufferSource, dataOffset, size);
    return undefined;
  }

  /**
   * Note [Aliased bindings] (measure 2 of issue 36): with every storage binding writable (Note [Storage bindings are
   * all writable]), a range bound twice in one bind group (ONNX `Mul(x, x)`, `Concat(x, x)`) would be two writable
   * bindings of overlapping ranges, which WebGPU refuses. The second is bound to a scratch range instead, and
   * every dispatch with the bind group first copies the range into it (the pass is ended for the copy and begun
   * again, its pipeline and bind groups restored: Note [Restarted passes] in restartedPass.ts). The copy is a range of a storage
   * segment (a binding of a uniform segment would make it writable beside its uniforms: Note [Uniform ranges]); when
   * it lands in the source's own segment, the copy goes through a scratch range of a uniform segment (Note [Scratch
   * ranges]). Uniform ranges are read-only and never alias. Only within one bind group: the same range in two bind
   * groups of one dispatch is not handled yet.
   */
  #createBindGroup(descriptor: GPUBindGroupDescriptor): GPUBindGroup {
    const ranges: Range[] = [];
    const group = this.#makeBindGroup(descriptor, ranges);
    if (this.pager.enabled && ranges.length > 0) this.#groups.set(group, { descriptor, ranges, generations: ranges.map((r) => r.generation), current: group });
    return group;
  }

  /**
   * Note [Bind groups after a move]: a real bind group binds a range's place when it was made; paging may move the
   * range since (Note [Paging between runs]). So where a bind group is set, its ranges are made resident, and when
   * one of them moved since the group was made, the group is made again from its descriptor (with its alias copies)
   * and that one is set. Only compute passes do this: a render pass or bundle binding a range that moved would read
   * its old place (paging is for compute programs).
   */
  #currentGroup(group: GPUBindGroup, uses: UseSet): GPUBindGroup {
    const record = this.#groups.get(group);
    if (record === undefined) return group;
    for (const range of record.ranges) uses.ranges.add(range); // held together: a page-in for one never pages out another
    for (const range of record.ranges) this.pager.use(range, uses, true);
    if (record.ranges.every((r, i) => r.generation === record.generations[i])) return record.current;
    record.current = this.#makeBindGroup(record.descriptor, []);
    record.generations = record.ranges.map((r) => r.generation);
    this.pager.counts.rebuiltBindGroups++;
    return record.current;
  }

  /** The real bind group of `descriptor`, its ranges translated (and made resident); `ranges` receives them. */
  #makeBindGroup(descriptor: GPUBindGroupDescriptor, ranges: Range[]): GPUBindGroup {
    const entries = Array.from(descriptor.entries);
    // The group's ranges stay resident while it is made (a page-in for one must not page out another).
    const making = this.pager.open();
    let translated: GPUBindGroupEntry[] | undefined;
    const bound: { buffer: GPUBuffer; start: number; end: number }[] = [];
    const copies: AliasCopy[] = [];
    try {
      entries.forEach((entry, i) => {
        const resource = entry.resource as GPUBindingResource | GPUBuffer;
        const binding = this.#ranges.has(resource as object) ? { buffer: resource as GPUBuffer } : (resource as GPUBufferBinding);
        const range = typeof binding === 'object' && binding !== null && 'buffer' in binding ? this.#ranges.get(binding.buffer) : undefined;
        if (!range) return;
        range.used = true;
        this.pager.use(range, making, false);
        ranges.push(range);
        const offset = binding.offset ?? 0;
        const size = binding.size ?? range.size - offset;
        const start = range.offset + offset;
        let target = { buffer: range.segment, offset: start };
        if (!range.uniform && bound.some((b) => b.buffer === range.segment && b.start < start + size && start < b.end)) {
          const ptr = this.pager.allocate(roundUp4(size));
          const scratch = this.buffers.bindingOf(ptr);
          const bouncePtr = scratch.buffer === range.segment ? this.#allocateScratch(size, range.segment) : undefined;
          const bounce = bouncePtr && { ptr: bouncePtr, ...this.buffers.bindingOf(bouncePtr) };
          copies.push({ ptr, source: range.segment, sourceOffset: start, target: scratch.buffer, targetOffset: scratch.offset, bytes: roundUp4(size), bounce });
          target = { buffer: scratch.buffer, offset: scratch.offset };
          this.counts.aliasCopies++;
        } else if (!range.uniform) {
          bound.push({ buffer: range.segment, start, end: start + size });
        }
        translated ??= entries.slice();
        translated[i] = { ...entry, resource: { buffer: target.buffer, offset: target.offset, size } };
      });
    } finally {
      this.pager.close(making);
    }
    const group = this.#real.createBindGroup(translated ? { ...descriptor, entries: translated } : descriptor);
    if (copies.length > 0) {
      this.#aliasCopies.set(group, copies);
      this.#collectedGroups.register(group, copies.flatMap((c) => (c.bounce ? [c.ptr, c.bounce.ptr] : [c.ptr])));
    }
    return group;
  }

  /**
   * Note [A failed command spoils its encoder]: a command whose range found no room (OutOfMemoryError from a page-in
   * or an upload's range) was not recorded, so the encoder no longer holds the program's work. Its use set closes at
   * once (else an encoder the program drops would keep its ranges from paging until it is collected), and its command
   * buffer is refused at submit, as WebGPU refuses one from an invalid encoder: its ranges may have moved since.
   */
  #encoder(real: GPUCommandEncoder): GPUCommandEncoder {
    const temporaries: Temporaries = { pointers: [], kept: [] };
    const uses = this.pager.open();
    let failed = false;
    const guarded = <T>(body: () => T): T => {
      try {
        return body();
      } catch (error) {
        failed = true;
        this.pager.close(uses);
        throw error;
      }
    };
    const at = (buffer: GPUBuffer, offset: number, writes: boolean) =>
      guarded(() => {
        const upload = this.#uploadBytes(buffer);
        if (upload) this.#uploadRange(buffer, upload);
        const b = this.#place(buffer, uses, writes, false, true);
        return { buffer: b.buffer, offset: b.offset + offset };
      });
    return passThrough(real, {
      copyBufferToBuffer: (...args: unknown[]) => {
        // Both forms: (src, srcOffset, dst, dstOffset, size?) and (src, dst, size?).
        const [source, sourceOffset, destination, destinationOffset, size] =
          typeof args[1] === 'number' ? (args as [GPUBuffer, number, GPUBuffer, number, number?]) : [args[0] as GPUBuffer, 0, args[1] as GPUBuffer, 0, args[2] as number | undefined];
        const bytes = size ?? source.size - sourceOffset;
        const upload = this.#uploadBytes(source);
        if (upload && this.#ranges.get(destination)?.used === false) {
          this.#writeBuffer(destination, destinationOffset, upload, sourceOffset, bytes);
          return;
        }
        if (upload) this.#uploadRange(source, upload, this.bindingOf(destination).buffer);
        const s = at(source, sourceOffset, false);
        const d = at(destination, destinationOffset, true);
        // Note [Copies within a segment] (measure 3 of issue 36): WebGPU refuses a copy whose source and destination
        // are one buffer even for disjoint ranges; two ranges of one segment copy through a scratch range.
        if (s.buffer === d.buffer && source !== destination) {
          const scratch = this.#scratch(bytes, s.buffer, temporaries);
          real.copyBufferToBuffer(s.buffer, s.offset, scratch.buffer, scratch.offset, bytes);
          real.copyBufferToBuffer(scratch.buffer, scratch.offset, d.buffer, d.offset, bytes);
        } else {
          real.copyBufferToBuffer(s.buffer, s.offset, d.buffer, d.offset, bytes);
        }
      },
      clearBuffer: (buffer: GPUBuffer, offset = 0, size?: number) => {
        const b = at(buffer, offset, true);
        real.clearBuffer(b.buffer, b.offset, size ?? buffer.size - offset);
      },
      resolveQuerySet: (querySet: GPUQuerySet, first: number, count: number, destination: GPUBuffer, destinationOffset: number) => {
        const d = at(destination, destinationOffset, true);
        real.resolveQuerySet(querySet, first, count, d.buffer, d.offset);
      },
      copyBufferToTexture: (source: GPUTexelCopyBufferInfo, destination: GPUTexelCopyTextureInfo, size: GPUExtent3DStrict) => {
        const b = at(source.buffer, source.offset ?? 0, false);
        real.copyBufferToTexture({ ...source, ...b }, destination, size);
      },
      copyTextureToBuffer: (source: GPUTexelCopyTextureInfo, destination: GPUTexelCopyBufferInfo, size: GPUExtent3DStrict) => {
        const b = at(destination.buffer, destination.offset ?? 0, true);
        real.copyTextureToBuffer(source, { ...destination, ...b }, size);
      },
      beginComputePass: (descriptor?: GPUComputePassDescriptor) =>
        restartedPass(real, descriptor, {
          // Note [Bind groups after a move]: the group set is the one of its ranges' places now.
          currentGroup: (group) => guarded(() => this.#currentGroup(group, uses)),
          aliasCopies: (group) => this.#aliasCopies.get(group) ?? [],
          indirectSource: (buffer) => {
            const range = this.#ranges.get(buffer);
            if (range === undefined) return undefined;
            guarded(() => this.pager.use(range, uses, false));
            this.counts.indirectCopies++;
            return { buffer: range.segment, offset: range.offset };
          },
          indirectArguments: () => this.#indirectArguments(),
          keep: (group) => temporaries.kept.push(group),
        }),
      finish: (descriptor?: GPUCommandBufferDescriptor) => {
        const commandBuffer = real.finish(descriptor);
        if (failed) this.#spoiled.add(commandBuffer);
        if (this.pager.enabled) this.#useSets.set(commandBuffer, uses);
        if (temporaries.pointers.length > 0 || temporaries.kept.length > 0) this.#temporaries.set(commandBuffer, temporaries);
        return commandBuffer;
      },
    });
  }

}

/** GPUBufferUsage.INDIRECT: served from a segment, its arguments copied out (Note [Indirect arguments]). */
const INDIRECT = 0x0100;

/** A bind group's descriptor and the places of its ranges when its real group was made (Note [Bind groups after a move]). */
interface GroupRecord {
  readonly descriptor: GPUBindGroupDescriptor;
  readonly ranges: readonly Range[];
  /** Each range's generation when `current` was made. */
  generations: number[];
  /** The real bind group binding the ranges' places now. */
  current: GPUBindGroup;
}

interface Temporaries {
  /** Scratch pointers, freed after the submit. */
  readonly pointers: DataPtr<GPUBuffer>[];
  /** Bind groups with alias copies used by the command buffer: alive (and their scratch with them) until its submit. */
  readonly kept: unknown[];
}
