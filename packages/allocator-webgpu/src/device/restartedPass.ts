import type { DataPtr } from '@stowage/core';

/** A copy made before each dispatch that binds a range twice (Note [Aliased bindings] in SubAllocatingDevice.ts). */
export interface AliasCopy {
  readonly ptr: DataPtr<GPUBuffer>;
  readonly source: GPUBuffer;
  readonly sourceOffset: number;
  readonly target: GPUBuffer;
  readonly targetOffset: number;
  readonly bytes: number;
  /** A scratch range the copy goes through when the target lies in the source's segment (Note [Scratch ranges]). */
  readonly bounce: { readonly ptr: DataPtr<GPUBuffer>; readonly buffer: GPUBuffer; readonly offset: number } | undefined;
}

/** Bytes of a dispatchWorkgroupsIndirect's arguments (three u32). */
const INDIRECT_BYTES = 12;

/** What a compute pass of the Stowage device asks of the device. */
export interface PassHooks {
  /** The real bind group to set for `group` now (Note [Bind groups after a move]). */
  currentGroup(group: GPUBindGroup): GPUBindGroup;
  /** The alias copies a dispatch with `group` needs first; none for most groups. */
  aliasCopies(group: GPUBindGroup): readonly AliasCopy[];
  /** Where an indirect dispatch's arguments lie when `buffer` is a range (Note [Indirect arguments]); else undefined. */
  indirectSource(buffer: GPUBuffer): { buffer: GPUBuffer; offset: number } | undefined;
  /** The real INDIRECT buffer the arguments are copied to. */
  indirectArguments(): GPUBuffer;
  /** Keeps a bind group whose alias copies the command buffer uses alive until its submit. */
  keep(group: unknown): void;
}

/**
 * A compute pass on `encoder` that the program uses as its own. Note [Restarted passes]: a dispatch whose bind groups
 * hold alias copies (Note [Aliased bindings]), or whose indirect arguments lie in a range, ends the pass, copies, and
 * begins a new one with the same label, then sets the pipeline, the bind groups and the open debug groups again. The
 * restarted pass has no timestamp writes (they would be written twice).
 */
export function restartedPass(encoder: GPUCommandEncoder, descriptor: GPUComputePassDescriptor | undefined, hooks: PassHooks): GPUComputePassEncoder {
  let real = encoder.beginComputePass(descriptor);
  let pipeline: GPUComputePipeline | undefined;
  const groups: (unknown[] | undefined)[] = [];
  const debugGroups: string[] = [];
  const copyAliases = (indirect?: { buffer: GPUBuffer; offset: number }) => {
    const copies = groups.flatMap((args) => (args ? hooks.aliasCopies(args[1] as GPUBindGroup) : []));
    if (copies.length === 0 && indirect === undefined) return;
    for (let i = debugGroups.length; i > 0; i--) real.popDebugGroup();
    real.end();
    for (const c of copies) {
      if (c.bounce) {
        encoder.copyBufferToBuffer(c.source, c.sourceOffset, c.bounce.buffer, c.bounce.offset, c.bytes);
        encoder.copyBufferToBuffer(c.bounce.buffer, c.bounce.offset, c.target, c.targetOffset, c.bytes);
      } else {
        encoder.copyBufferToBuffer(c.source, c.sourceOffset, c.target, c.targetOffset, c.bytes);
      }
    }
    if (indirect) encoder.copyBufferToBuffer(indirect.buffer, indirect.offset, hooks.indirectArguments(), 0, INDIRECT_BYTES);
    for (const args of groups) if (args) hooks.keep(args[1]);
    real = encoder.beginComputePass(descriptor?.label === undefined ? {} : { label: descriptor.label });
    for (const label of debugGroups) real.pushDebugGroup(label);
    if (pipeline) real.setPipeline(pipeline);
    groups.forEach((args) => args && (real.setBindGroup as (...a: unknown[]) => void)(...args));
  };
  const pass: Record<string, unknown> = {
    setPipeline: (p: GPUComputePipeline) => {
      pipeline = p;
      real.setPipeline(p);
    },
    setBindGroup: (...given: unknown[]) => {
      const args = given[1] === null || given[1] === undefined ? given : [given[0], hooks.currentGroup(given[1] as GPUBindGroup), ...given.slice(2)];
      groups[args[0] as number] = args[1] === null ? undefined : args;
      (real.setBindGroup as (...a: unknown[]) => void)(...args);
    },
    dispatchWorkgroups: (x: number, y?: number, z?: number) => {
      copyAliases();
      real.dispatchWorkgroups(x, y, z);
    },
    dispatchWorkgroupsIndirect: (buffer: GPUBuffer, offset: number) => {
      const source = hooks.indirectSource(buffer);
      if (source === undefined) {
        copyAliases();
        real.dispatchWorkgroupsIndirect(buffer, offset);
        return;
      }
      copyAliases({ buffer: source.buffer, offset: source.offset + offset });
      real.dispatchWorkgroupsIndirect(hooks.indirectArguments(), 0);
    },
    pushDebugGroup: (label: string) => {
      debugGroups.push(label);
      real.pushDebugGroup(label);
    },
    popDebugGroup: () => {
      debugGroups.pop();
      real.popDebugGroup();
    },
    insertDebugMarker: (label: string) => real.insertDebugMarker(label),
    end: () => real.end(),
  };
  const first = real;
  return new Proxy(first, {
    get: (_, key) => (Object.hasOwn(pass, key) ? pass[key as string] : Reflect.get(real, key, real)),
    set: (_, key, value) => Reflect.set(real, key, value, real),
  });
}
