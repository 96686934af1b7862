/**
 * One reference counter: plain data that a descriptor carries from the producer to a consumer. `file` names the
 * ref-counter file, `slot` is the counter's index in it, and `nonce` is the random 64-bit value the producer wrote
 * into the slot when it handed it out; a descriptor whose nonce differs from the slot's is forged or stale.
 */
export interface CounterSlot {
  readonly file: string;
  readonly slot: number;
  readonly nonce: bigint;
}
