import { EventEmitter } from 'eventemitter3';
import type { ReshapePolicy, StorageImpl, TensorHooks, TensorImpl } from '@stowage/core';
import { viewStrides } from '@stowage/core';

/** A view family: the tensors sharing one shadow storage (Note [Shadow storages]). */
class ShadowStorage {
  constructor(public generation: number) {}
}

/** The generation state of one physical storage. */
interface Physical {
  generation: number;
  /** The family that wrote last. */
  lastWriter: ShadowStorage;
  /** The storage's own family: tensors without a shadow. */
  readonly own: ShadowStorage;
}

export interface ReshapeWarningEvents {
  /** A read or write saw another view family's write: copy semantics would give a different result. */
  aliasingObserved: [e: { readonly tensor: TensorImpl; readonly access: 'read' | 'write'; readonly message: string }];
}

/**
 * The warning mode of reshape (`cow({ reshape: 'warn' })`): reshape still returns a view when it can, as the
 * alias policy does, but warns wherever the program relies on that aliasing, i.e. wherever copy semantics
 * would give a different result.
 *
 * Note [Shadow storages]: a viewable reshape gives its output a new shadow storage; views inherit their base's,
 * so a view family is the set of tensors sharing one (tensors with none form the storage's own family). The
 * physical storage and each shadow carry a generation number; a write through a tensor bumps the physical
 * generation and sets its family's to it. A read or write whose family's generation differs from the physical
 * one sees a write made through another family after the reshape: it warns, once per pair of families, as an
 * `aliasingObserved` event and `process.emitWarning` (code STOWAGE_RESHAPE_ALIASING) where Node has it. Only
 * tensor-level access (`TensorImpl#data`, `#mutableData`) is tracked, not Runtime#read/#write on storages.
 */
export class WarnReshapePolicy implements ReshapePolicy, TensorHooks {
  readonly name = 'warn';
  readonly #emitter = new EventEmitter<ReshapeWarningEvents>();
  readonly #physical = new WeakMap<StorageImpl, Physical>();
  /** Pairs of families already warned about, both ways round. */
  readonly #warned = new WeakMap<ShadowStorage, WeakSet<ShadowStorage>>();

  get events(): Pick<EventEmitter<ReshapeWarningEvents>, 'on' | 'once' | 'off'> {
    return this.#emitter;
  }

  reshape(tensor: TensorImpl, sizes: readonly number[]): TensorImpl {
    const strides = viewStrides(tensor.sizes, tensor.strides, sizes);
    if (strides === null) return tensor.clone().view(sizes); // a copy already: nothing aliases
    const physical = this.#physicalOf(tensor.storage);
    return tensor.asStrided(sizes, strides).withShadow(new ShadowStorage(physical.generation));
  }

  beforeRead(tensor: TensorImpl): void {
    this.#check(tensor, 'read');
  }

  beforeWrite(tensor: TensorImpl): void {
    this.#check(tensor, 'write');
    const physical = this.#physical.get(tensor.storage);
    if (!physical) return;
    const family = this.#familyOf(tensor, physical);
    family.generation = ++physical.generation;
    physical.lastWriter = family;
  }

  #check(tensor: TensorImpl, access: 'read' | 'write'): void {
    const physical = this.#physical.get(tensor.storage);
    if (!physical) return; // never reshaped: one family, nothing to compare
    const family = this.#familyOf(tensor, physical);
    if (family.generation === physical.generation) return;
    const writer = physical.lastWriter;
    if (this.#warned.get(family)?.has(writer)) return;
    for (const [a, b] of [[family, writer], [writer, family]] as const) {
      let set = this.#warned.get(a);
      if (!set) this.#warned.set(a, (set = new WeakSet()));
      set.add(b);
    }
    const message =
      `This ${access} of ${String(tensor)} sees a write made through another view of its storage after reshape() ` +
      'returned a view; if reshape copied, it would not. Call clone() where the copy is meant, or view() where the aliasing is.';
    this.#emitter.emit('aliasingObserved', { tensor, access, message });
    const proc = (globalThis as { process?: { emitWarning?: (m: string, o: object) => void } }).process;
    proc?.emitWarning?.(message, { code: 'STOWAGE_RESHAPE_ALIASING', type: 'StowageWarning' });
  }

  #familyOf(tensor: TensorImpl, physical: Physical): ShadowStorage {
    return tensor.shadow instanceof ShadowStorage ? tensor.shadow : physical.own;
  }

  #physicalOf(storage: StorageImpl): Physical {
    let physical = this.#physical.get(storage);
    if (!physical) {
      const own = new ShadowStorage(0);
      physical = { generation: 0, lastWriter: own, own };
      this.#physical.set(storage, physical);
    }
    return physical;
  }
}
