import { expect } from 'chai';
import type { Runtime, TensorImpl } from '@stowage/core';
import { createRuntime, ReshapePolicy } from '@stowage/core';
import { hostBytes } from '@stowage/core/plugin-kit';
import type { WarnReshapePolicy } from '@stowage/cow';
import { cow } from '@stowage/cow';

/** Reads and writes through tensors, the accesses the warning mode tracks. */
const read = (t: TensorImpl): number => hostBytes(t.data())[t.byteOffset]!;
const write = (t: TensorImpl, value: number): void => void (hostBytes(t.mutableData())[t.byteOffset] = value);

async function warnRuntime(): Promise<{ rt: Runtime; warnings: string[] }> {
  const rt = await createRuntime({ plugins: [cow({ reshape: 'warn' })] });
  const warnings: string[] = [];
  (rt.container.resolve(ReshapePolicy) as WarnReshapePolicy).events.on('aliasingObserved', (e) => warnings.push(`${e.access} ${e.tensor.sizes.join('x')}`));
  return { rt, warnings };
}

describe('WarnReshapePolicy', () => {
  let nodeWarnings: string[];
  const onWarning = (w: Error & { code?: string }): void => void nodeWarnings.push(w.code ?? '');
  beforeEach(() => {
    nodeWarnings = [];
    process.on('warning', onWarning);
  });
  afterEach(() => void process.off('warning', onWarning));

  it('still returns a view when the layout allows one', async () => {
    const { rt } = await warnRuntime();
    await using _ = rt;
    const t = rt.tensor([2, 3], { dtype: 'uint8' });
    const r = t.reshape([6]);
    expect(r.storage).to.equal(t.storage);
    expect(r.shadow).to.not.equal(null);
    expect(r.view([3, 2]).shadow, 'views inherit the shadow storage').to.equal(r.shadow);
  });

  it('warns once when one family reads what another wrote after the reshape', async () => {
    const { rt, warnings } = await warnRuntime();
    await using _ = rt;
    const t = rt.tensor([2, 3], { dtype: 'uint8' });
    const r = t.reshape([6]);
    write(t, 5); // under copy semantics r would not see this
    expect(read(r)).to.equal(5);
    read(r);
    write(r, 6);
    expect(warnings).to.deep.equal(['read 6']);
    await new Promise((resolve) => setImmediate(resolve));
    expect(nodeWarnings).to.deep.equal(['STOWAGE_RESHAPE_ALIASING']);
  });

  it('warns when the reshaped family writes and the original reads', async () => {
    const { rt, warnings } = await warnRuntime();
    await using _ = rt;
    const t = rt.tensor([4], { dtype: 'uint8' });
    const r = t.reshape([2, 2]);
    write(r, 1);
    read(t.view([2, 2])); // a view of t is t's family
    expect(warnings).to.deep.equal(['read 2x2']);
  });

  it('stays silent where copy semantics would give the same results, and warns where they would not', async () => {
    const { rt, warnings } = await warnRuntime();
    await using _ = rt;
    const t = rt.tensor([2, 3], { dtype: 'uint8' });
    write(t, 1); // before the reshape: a copy would hold it too
    const r = t.reshape([3, 2]);
    read(r);
    read(t);
    write(r, 2); // r's own family reads its own write
    read(r);
    read(r.view([6]));
    const copy = t.asStrided([3, 2], [1, 3]).reshape([6]); // not viewable: a real copy
    write(copy, 3);
    read(copy);
    expect(warnings).to.deep.equal([]);
    read(t); // t now sees r's write of 2: here copy semantics would differ
    expect(warnings).to.deep.equal(['read 2x3']);
    const fresh = rt.tensor([4], { dtype: 'uint8' });
    write(fresh, 1);
    read(fresh);
    expect(warnings.length, 'storages never reshaped are not tracked').to.equal(1);
  });

  it('warns when a reshape of a family that missed another family\'s write reads that write', async () => {
    const { rt, warnings } = await warnRuntime();
    await using _ = rt;
    const t = rt.tensor([2, 3], { dtype: 'uint8' });
    const r = t.reshape([6]);
    write(r, 7); // t's family does not see this under copy semantics
    const s = t.reshape([3, 2]); // under copy semantics: a copy of t, which still holds 0
    expect(read(s), 'aliasing: s reads r\'s write').to.equal(7);
    expect(warnings, 'copy semantics would read 0 here').to.deep.equal(['read 3x2']);
  });

  it('warns when a non-viewable reshape copies data another family wrote after the reshape', async () => {
    const { rt, warnings } = await warnRuntime();
    await using _ = rt;
    const t = rt.tensor([2, 3], { dtype: 'uint8' });
    const r = t.reshape([6]);
    write(r, 9); // t's family does not see this under copy semantics
    const copy = t.asStrided([3, 2], [1, 3]).reshape([6]); // not viewable: reshape copies t's elements now
    expect(read(copy), 'the copy holds r\'s write').to.equal(9);
    expect(warnings.length, 'copy semantics would have copied 0: the copy read should warn').to.be.greaterThan(0);
  });
});
