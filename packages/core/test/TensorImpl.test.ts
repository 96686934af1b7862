import { expect } from 'chai';
import type { ReshapePolicy as ReshapePolicyType, Runtime, TensorImpl } from '@stowage/core';
import { createRuntime, InvalidArgumentError, ReshapePolicy, TensorImpl as TensorImplClass, UseAfterReleaseError } from '@stowage/core';
import { AliasReshapePolicy, hostBytes, TensorHooks, viewStrides } from '@stowage/core/plugin-kit';

/** Writes 0, 1, 2, … into a float32 tensor's storage. */
function iota(t: TensorImpl): void {
  const values = new Float32Array(t.storage.byteLength / 4).map((_, i) => i);
  hostBytes(t.storage.mutableData()).set(new Uint8Array(values.buffer));
}

/** The tensor's elements in row-major order. */
function elements(t: TensorImpl): number[] {
  const data = new Float32Array(hostBytes(t.storage.data()).slice().buffer);
  const out: number[] = [];
  const index = new Array<number>(t.dim).fill(0);
  for (let n = 0; n < t.numel; n++) {
    out.push(data[t.storageOffset + index.reduce((s, i, d) => s + i * t.strides[d]!, 0)]!);
    for (let d = t.dim - 1; d >= 0; d--) {
      if (++index[d]! < t.sizes[d]!) break;
      index[d] = 0;
    }
  }
  return out;
}

describe('TensorImpl', () => {
  let rt: Runtime;
  beforeEach(async () => (rt = await createRuntime()));
  afterEach(() => rt.dispose());

  describe('#view', () => {
    it('shares the storage and infers one -1', () => {
      const t = rt.tensor([2, 3, 4]);
      const v = t.view([6, -1]);
      expect(v.sizes).to.deep.equal([6, 4]);
      expect(v.strides).to.deep.equal([4, 1]);
      expect(v.storage).to.equal(t.storage);
    });

    it('views a transposed tensor when dimensions split within a contiguous chunk', () => {
      const t = rt.tensor([4, 6]).asStrided([6, 4], [1, 6]); // transpose
      const v = t.view([2, 3, 4]);
      expect(v.strides).to.deep.equal([3, 1, 6]);
    });

    it('refuses a view that would need a copy, pointing at reshape()', () => {
      const t = rt.tensor([4, 6]).asStrided([6, 4], [1, 6]);
      expect(() => t.view([24])).to.throw(InvalidArgumentError, /reshape\(\)/);
    });

    it('rejects element counts that differ and more than one -1', () => {
      const t = rt.tensor([2, 3]);
      expect(() => t.view([4, 2])).to.throw(InvalidArgumentError, /6 elements/);
      expect(() => t.view([-1, -1])).to.throw(InvalidArgumentError, /at most one -1/);
      expect(() => t.view([-1, 4])).to.throw(InvalidArgumentError);
    });

    it('views empty and zero-dimensional tensors', () => {
      expect(rt.tensor([0, 3]).view([3, 0]).sizes).to.deep.equal([3, 0]);
      expect(rt.tensor([]).view([1, 1]).sizes).to.deep.equal([1, 1]);
      expect(rt.tensor([1]).view([]).numel).to.equal(1);
    });
  });

  describe('#reshape (alias policy)', () => {
    it('returns a view when the layout allows one', () => {
      const t = rt.tensor([2, 6]);
      const r = t.reshape([3, 4]);
      expect(r.storage).to.equal(t.storage);
    });

    it('copies into a new storage when it must, keeping row-major element order', () => {
      const base = rt.tensor([4, 6]);
      iota(base);
      const t = base.asStrided([6, 4], [1, 6]);
      const r = t.reshape([24]);
      expect(r.storage).to.not.equal(base.storage);
      expect(elements(r)).to.deep.equal(elements(t));
      expect(elements(r).slice(0, 5)).to.deep.equal([0, 6, 12, 18, 1]);
    });

    it('copies a strided slice with an offset', () => {
      const base = rt.tensor([4, 5]);
      iota(base);
      const slice = base.asStrided([3, 2], [5, 2], 6); // rows 1..3, columns 1 and 3
      expect(elements(slice.reshape([6]))).to.deep.equal([6, 8, 11, 13, 16, 18]);
    });
  });

  describe('constructor and #asStrided', () => {
    it('rejects a layout that does not fit its storage, naming the bytes it would reach', () => {
      const t = rt.tensor([2, 3]);
      expect(() => t.asStrided([2, 3], [4, 1])).to.throw(InvalidArgumentError, /fits the storage's 24 bytes \(it reaches byte 28/);
      expect(() => t.asStrided([6], [1], 1)).to.throw(InvalidArgumentError);
      expect(t.asStrided([0], [1], 100).numel).to.equal(0);
    });

    it('rejects bad sizes, strides, offsets and dtypes with the argument named', () => {
      const t = rt.tensor([2, 3]);
      expect(() => t.asStrided([2, -3], [3, 1])).to.throw(InvalidArgumentError, /^sizes\[1\]/);
      expect(() => t.asStrided([2, 3], [3])).to.throw(InvalidArgumentError, /^strides/);
      expect(() => t.asStrided([2, 3], [3, 1.5])).to.throw(InvalidArgumentError, /^strides\[1\]/);
      expect(() => t.asStrided([2, 3], [3, 1], -1)).to.throw(InvalidArgumentError, /^storageOffset/);
      expect(() => rt.tensor([2], { dtype: 'float128' as never })).to.throw(InvalidArgumentError, /options.dtype/);
      expect(() => rt.tensor([2 ** 30, 2 ** 30, 2 ** 30])).to.throw(InvalidArgumentError);
    });

    it('refuses a view of a released storage', () => {
      const t = rt.tensor([2, 3]);
      t.storage.release();
      expect(() => t.view([6])).to.throw(UseAfterReleaseError);
    });

    it('reports contiguity, byte offset and a readable description', () => {
      const t = rt.tensor([2, 3], { dtype: 'float64' });
      expect(t.isContiguous()).to.equal(true);
      expect(t.asStrided([3, 2], [1, 3]).isContiguous()).to.equal(false);
      expect(t.asStrided([2], [1], 2).byteOffset).to.equal(16);
      expect(String(t)).to.equal('TensorImpl(float64[2, 3] on cpu:0, strides [3, 1], offset 0)');
    });
  });
});

describe('TensorImpl#clone', () => {
  it('runs the tensor beforeRead hooks: clone() reads the tensor', async () => {
    const reads: TensorImpl[] = [];
    const hooks: TensorHooks = { beforeRead: (t) => void reads.push(t) };
    await using rt = await createRuntime({ plugins: [{ name: 'th', register: (c) => void c.register(TensorHooks, { useValue: hooks }) }] });
    const t = rt.tensor([2, 3]).asStrided([3, 2], [1, 3]);
    t.clone();
    expect(reads).to.include(t);
  });

  it('refuses to clone an empty tensor whose storage was released', async () => {
    await using rt = await createRuntime();
    const t = rt.tensor([0, 3]);
    t.storage.release();
    expect(() => t.clone()).to.throw(UseAfterReleaseError);
  });
});

describe('TensorImpl constructor (what it is handed)', () => {
  it('refuses a null context, a non-storage and a bad shadow with InvalidArgumentError', async () => {
    await using rt = await createRuntime();
    const storage = rt.storage(16);
    const bad: [string, () => unknown][] = [
      ['context', () => new TensorImplClass(storage, { sizes: [4], dtype: 'float32' }, null as never)],
      ['storage', () => new TensorImplClass(null as never, { sizes: [4], dtype: 'float32' }, rt)],
      ['shadow', () => new TensorImplClass(storage, { sizes: [4], dtype: 'float32' }, rt, 7 as never)],
      ['layout.size', () => new TensorImplClass(storage, { size: [4], sizes: [4], dtype: 'float32' } as never, rt)],
    ];
    for (const [argument, make] of bad) {
      let error: unknown;
      try {
        make();
      } catch (e) {
        error = e;
      }
      expect(error, argument).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.equal(argument);
    }
  });
});

describe('TensorImpl#reshape (what the policy returns)', () => {
  const policies: { name: string; reshape: (t: TensorImpl) => unknown }[] = [
    { name: 'its input, unchanged in shape', reshape: (t) => t },
    { name: 'null', reshape: () => null },
    { name: 'a non-tensor', reshape: () => ({ sizes: [2, 2] }) },
  ];
  for (const { name, reshape } of policies) {
    it(`refuses a policy that returns ${name}, naming the policy`, async () => {
      const policy = { name: 'mine', reshape } as unknown as ReshapePolicyType;
      await using rt = await createRuntime({ plugins: [{ name: 'mine', register: (c) => void c.register(ReshapePolicy, { useValue: policy }) }] });
      const t = rt.tensor([4]);
      expect(() => t.reshape([2, 2])).to.throw(InvalidArgumentError, /^the value the reshape policy "mine" \(reshape\(\[2, 2\]\)\) returned must be a float32 TensorImpl of sizes \[2, 2\]/);
    });
  }
});

describe('AliasReshapePolicy#reshape, viewStrides and hostBytes (what they are handed)', () => {
  it('refuse a non-tensor, bad sizes or strides, and a non-pointer with InvalidArgumentError', async () => {
    await using rt = await createRuntime();
    const t = rt.tensor([2, 3]);
    const policy = new AliasReshapePolicy();
    const bad: [string, () => unknown][] = [
      ['tensor', () => policy.reshape(null as never, [6])],
      ['sizes', () => policy.reshape(t, [7])],
      ['oldSizes', () => viewStrides(null as never, [1], [1])],
      ['oldStrides', () => viewStrides([2, 3], [1], [6])],
      ['newSizes[0]', () => viewStrides([2], [1], [0.5])],
      ['ptr', () => hostBytes(undefined as never)],
    ];
    for (const [argument, call] of bad) {
      let error: unknown;
      try {
        call();
      } catch (e) {
        error = e;
      }
      expect(error, argument).to.be.instanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).to.equal(argument);
    }
  });
});
