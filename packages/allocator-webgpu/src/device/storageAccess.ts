/**
 * Note [Storage bindings are all writable] (measure 1 of issue 36): tensors of a Stowage device share segments, so
 * one dispatch may bind a range of a segment read-only (an input) and another range of the same segment writable
 * (its output). WebGPU tracks usage per buffer, not per range, and refuses a buffer used as read-only storage and
 * writable storage in one dispatch ("includes writable usage"). So every storage binding is made writable: WGSL
 * `var<storage>` and `var<storage, read>` become `var<storage, read_write>`, and `read-only-storage` layout entries
 * become `storage`. Writable bindings that overlap are then an error of their own (Note [Aliased bindings]).
 * Compute shaders only: a vertex or fragment stage may not declare writable storage.
 */
const READ_ONLY_STORAGE = /var\s*<\s*storage\s*(?:,\s*read\s*)?>/g;

/** `code` with every read-only storage variable declared read_write (Note [Storage bindings are all writable]). */
export function writableStorageCode(code: string): string {
  return code.replace(READ_ONLY_STORAGE, 'var<storage, read_write>');
}

/** `descriptor` with its `read-only-storage` buffer entries as `storage` (Note [Storage bindings are all writable]). */
export function writableStorageLayout(descriptor: GPUBindGroupLayoutDescriptor): GPUBindGroupLayoutDescriptor {
  const entries = Array.from(descriptor.entries);
  if (!entries.some((entry) => entry.buffer?.type === 'read-only-storage')) return descriptor;
  return {
    ...descriptor,
    entries: entries.map((entry) => (entry.buffer?.type === 'read-only-storage' ? { ...entry, buffer: { ...entry.buffer, type: 'storage' } } : entry)),
  };
}
