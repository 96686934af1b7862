/**
 * Note [Mapped at creation]: a buffer made `mappedAtCreation` (onnxruntime-web's uploads: a MAP_WRITE | COPY_SRC
 * staging buffer per upload, 414 of a PaddleOCR classifier's 973 buffers in `pnpm bench:ort`; storage buffers made
 * mapped) is a range of a segment like any other, mapped on the host: `getMappedRange` returns host ArrayBuffers,
 * and `unmap` writes what the program put in them to the range with one `queue.writeBuffer` (the bytes not given
 * out are zeros, as a new buffer's are). Until the unmap the program may not use the buffer in a submit, so the
 * write is ordered before every use. Mapping it again later (`mapAsync`) is refused: no program we run does.
 *
 * Invariants: the mapping is open until `unmap`, and writes once; the given-out ranges do not overlap.
 */
export class HostMapping {
  readonly #given: { offset: number; bytes: ArrayBuffer }[] = [];
  #open = true;

  /**
   * @param size the buffer's size as the program asked
   * @param write writes `bytes` (a multiple of 4 long) at `offset` of the buffer, on unmap
   */
  constructor(
    private readonly size: number,
    private readonly write: (bytes: Uint8Array) => void,
  ) {}

  get mapState(): GPUBufferMapState {
    return this.#open ? 'mapped' : 'unmapped';
  }

  /** A host ArrayBuffer for [offset, offset + size) of the buffer. @throws Error when unmapped, or for a range outside the buffer or overlapping one given out */
  getMappedRange(offset = 0, size?: number): ArrayBuffer {
    const bytes = size ?? this.size - offset;
    if (!this.#open) throw new Error('getMappedRange on a buffer that is not mapped (a Stowage range, mapped only at its creation).');
    if (offset % 8 !== 0 || bytes % 4 !== 0 || offset < 0 || offset + bytes > this.size) {
      throw new Error(`getMappedRange(${offset}, ${bytes}): the range must lie in the buffer's ${this.size} bytes, start at a multiple of 8 and be a multiple of 4 long.`);
    }
    if (this.#given.some((g) => g.offset < offset + bytes && offset < g.offset + g.bytes.byteLength)) {
      throw new Error(`getMappedRange(${offset}, ${bytes}) overlaps a range already given out.`);
    }
    const buffer = new ArrayBuffer(bytes);
    this.#given.push({ offset, bytes: buffer });
    return buffer;
  }

  /** Writes the given-out ranges to the buffer (once) and closes the mapping. */
  unmap(): void {
    if (!this.#open) return;
    this.#open = false;
    const whole = new Uint8Array(Math.max(4, Math.ceil(this.size / 4) * 4));
    for (const g of this.#given) whole.set(new Uint8Array(g.bytes), g.offset);
    this.#given.length = 0;
    this.write(whole);
  }
}
