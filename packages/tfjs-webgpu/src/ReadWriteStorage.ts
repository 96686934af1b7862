/** What the rewrite did so far, per device wrapper. */
export interface ReadWriteStorageCounts {
  /** Shader modules created through the wrapper. */
  shaders: number;
  /** `var<storage, read>` declarations turned into `var<storage, read_write>`. */
  rewrittenDeclarations: number;
  /** Inputs bound a second time in one dispatch, and so bound as a copy (Note [Storage usage per buffer]). */
  aliasCopies: number;
  /** Bytes of those copies. */
  aliasCopyBytes: number;
}

/** A read-only storage buffer declaration in WGSL, as tfjs writes it (`var<storage, read>`). */
const READ_ONLY_STORAGE = /var<storage\s*,\s*read\s*>/g;
const READ_WRITE_STORAGE = 'var<storage, read_write>';

/**
 * Note [Storage usage per buffer]: WebGPU validates the usage of a buffer per dispatch for the whole buffer, not per
 * bound range. A dispatch that binds one GPUBuffer both as a read-only storage binding (a kernel's input) and as a
 * writable one (its output) is a validation error: the dispatch is dropped and its output keeps whatever it held.
 * Several writable bindings of one buffer are allowed as long as their ranges do not overlap (Dawn checks that
 * too: "writable storage buffer binding aliasing"). Under Stowage, a kernel's inputs and output are ranges of the
 * same few segments, so the first rule bites on almost every dispatch; with tfjs's own buffer manager every tensor
 * has a buffer of its own and it never does.
 *
 * Three ways out were weighed:
 * - rewrite every read-only storage declaration of the backend's shaders to `read_write` (chosen): the bind group
 *   layouts tfjs derives (`layout: 'auto'`) then hold only writable storage bindings, and any placement is valid.
 *   It touches nothing in tfjs but the text of its shaders, it costs nothing at allocation, and WGSL's semantics
 *   of a read are the same; the price is that a driver can no longer treat inputs as read-only (no read-only
 *   caches, no reordering of loads past stores). One tensor bound as two inputs of a dispatch (`mul(x, x)`, and
 *   the many gradients built that way) would be two overlapping writable bindings: the backend binds the second
 *   one to a copy made in the command encoder just before the dispatch, released at the next submit
 *   (StowageWebGpuBackend#tensorToBinding). The package README has the measured cost of both;
 * - keep a dispatch's output in another segment than its inputs: the output is allocated before tfjs has
 *   uploaded the inputs, the engine places blocks by size with no notion of "not in these segments", and it would
 *   split the pools into segments by role, growing peak memory, which the targets weigh first;
 * - an allocator option giving each tensor a buffer of its own above some size: that is tfjs's own manager again.
 *
 * The rewrite is made by a proxy of the backend's GPUDevice whose `createShaderModule` edits the source; its
 * `queue` is `queue` (default: the device's); every other member is the device's own (methods bound to it). Other
 * users of the device (another backend, Stowage's kernels) are not affected.
 */
export function readWriteStorageDevice(device: GPUDevice, counts: ReadWriteStorageCounts, queue: GPUQueue = device.queue): GPUDevice {
  const bound = new Map<PropertyKey, unknown>();
  const createShaderModule = (descriptor: GPUShaderModuleDescriptor): GPUShaderModule => {
    let rewritten = 0;
    const code = descriptor.code.replace(READ_ONLY_STORAGE, () => {
      rewritten++;
      return READ_WRITE_STORAGE;
    });
    counts.shaders++;
    counts.rewrittenDeclarations += rewritten;
    return device.createShaderModule({ ...descriptor, code });
  };
  return new Proxy(device, {
    get(target, key) {
      if (key === 'createShaderModule') return createShaderModule;
      if (key === 'queue') return queue;
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== 'function') return value;
      let method = bound.get(key);
      if (method === undefined) bound.set(key, (method = (value as (...args: unknown[]) => unknown).bind(target)));
      return method;
    },
  });
}
