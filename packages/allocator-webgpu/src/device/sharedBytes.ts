/**
 * Note [Shared memory uploads] (measure 4 of issue 36): dawn.node refuses `writeBuffer` from a view of a
 * SharedArrayBuffer, which threaded WebAssembly builds (onnxruntime-web's) pass; such data is copied first.
 * Returns the bytes to write, copied, or undefined when `data` is not shared memory.
 */
export function sharedBytes(data: GPUAllowSharedBufferSource, dataOffset = 0, size?: number): Uint8Array | undefined {
  if (typeof SharedArrayBuffer === 'undefined') return undefined;
  const view = ArrayBuffer.isView(data) ? data : undefined;
  const backing = view ? view.buffer : data;
  if (!(backing instanceof SharedArrayBuffer)) return undefined;
  const elementBytes = view ? ((view as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1) : 1;
  const base = view ? view.byteOffset : 0;
  const length = (view ? view.byteLength : (data as SharedArrayBuffer).byteLength) / elementBytes;
  const start = base + dataOffset * elementBytes;
  const bytes = (size ?? length - dataOffset) * elementBytes;
  return new Uint8Array(backing, start, bytes).slice();
}

/** Bytes a `writeBuffer(buffer, offset, data, dataOffset, size)` writes (offset and size in elements of a typed array). */
export function writtenBytes(data: GPUAllowSharedBufferSource, dataOffset = 0, size?: number): number {
  if (ArrayBuffer.isView(data)) {
    const elementBytes = (data as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1;
    return (size ?? data.byteLength / elementBytes - dataOffset) * elementBytes;
  }
  return size ?? (data as ArrayBuffer).byteLength - dataOffset;
}

/** `bytes` rounded up to a whole number of 4-byte words, at least one (WebGPU's copy and clear granularity). */
export function roundUp4(bytes: number): number {
  return Math.max(4, Math.ceil(bytes / 4) * 4);
}
