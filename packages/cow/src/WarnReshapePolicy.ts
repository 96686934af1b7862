import { EventEmitter } from 'eventemitter3';
import type { ReshapePolicy, StorageImpl } from '@stowage/core';
import type { TensorHooks } from '@stowage/core/plugin-kit';
import { InvalidArgumentError, TensorImpl } from '@stowage/core';
import { viewStrides } from '@stowage/core/plugin-kit';

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
  /**
   * For the copy a non-viewable reshape made of a family that had missed another family's write: that writer,
   * whose data the copy holds while a copy under copy semantics would not (Note [Shadow storages]).
   */
  readonly inherited?: ShadowStorage;
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
 * Note [Shadow storages]: a viewable reshape gives its output a new shadow storage, at the generation its
 * input's family is at (what a copy would hold); views inherit their base's,
 * so a view family is the set of tensors sharing one (tensors with none form the storage's own family). The
 * physical storage and each shadow carry a generation number; a write through a tensor bumps the physical
 * generation and sets its family's to it. A read or write whose family's generation differs from the physical
 * one sees a write made through another family after the reshape: it warns, once per pair of families, as an
 * `aliasingObserved` event and `process.emitWarning` (code STOWAGE_RESHAPE_ALIASING) where Node has it. A
 * non-viewable reshape of a family that missed another family's write copies that write: the copy starts
 * stale with respect to it (#copy). Only
 * tensor-level access (`TensorImpl#data`, `#mutableData`) is tracked, not Runtime#read/#write on storages.
 */
export class WarnReshapePolicy implements ReshapePolicy, TensorHooks {
  readonly name = 'warn';
  readonly #emitter = new EventEmitter<ReshapeWarningEvents>();
  readonly #physical = new WeakMap<StorageImpl, Physical>();
  /** The tensor a non-viewable reshape is copying (#copy). */
  #copying: TensorImpl | undefined;
  /** Pairs of families already warned about, both ways round. */
  readonly #warned = new WeakMap<ShadowStorage, WeakSet<ShadowStorage>>();

  get events(): Pick<EventEmitter<ReshapeWarningEvents>, 'on' | 'once' | 'off'> {
    return this.#emitter;
  }

  reshape(tensor: TensorImpl, sizes: readonly number[]): TensorImpl {
    if (!(tensor instanceof TensorImpl)) throw new InvalidArgumentError('tensor', tensor, 'a TensorImpl');
    const strides = viewStrides(tensor.sizes, tensor.strides, sizes);
    if (strides === null) return this.#copy(tensor, sizes);
    const physical = this.#physicalOf(tensor.storage);
    // The new family sees what `tensor`'s family sees: under copy semantics it would be a copy of that.
    return tensor.asStrided(sizes, strides).withShadow(new ShadowStorage(this.#familyOf(tensor, physical).generation));
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

  /**
   * A non-viewable reshape: a real copy, so nothing aliases afterwards. But if `tensor`'s family had missed
   * another family's write, the copy holds that write where a copy under copy semantics would not: the copy
   * starts stale, so a read of it before it is written warns (a write is its own: it does not).
   */
  #copy(tensor: TensorImpl, sizes: readonly number[]): TensorImpl {
    this.#copying = tensor; // clone() reads `tensor`: that read is judged on the copy's reads instead
    let copy: TensorImpl;
    try {
      copy = tensor.clone().view(sizes);
    } finally {
      this.#copying = undefined;
    }
    const physical = this.#physical.get(tensor.storage);
    if (physical && this.#familyOf(tensor, physical).generation !== physical.generation) {
      const inherited = physical.lastWriter;
      this.#physical.set(copy.storage, { generation: 1, lastWriter: inherited, own: new ShadowStorage(0), inherited });
    }
    return copy;
  }

  #check(tensor: TensorImpl, access: 'read' | 'write'): void {
    if (tensor === this.#copying) return;
    const physical = this.#physical.get(tensor.storage);
    if (!physical) return; // never reshaped: one family, nothing to compare
    const family = this.#familyOf(tensor, physical);
    if (family.generation === physical.generation) return;
    const writer = physical.lastWriter;
    if (access === 'write' && writer === physical.inherited) return; // overwriting what the copy inherited
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
