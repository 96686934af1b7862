import { expect } from 'chai';
import { allocatorNames, BenchUsageError, parseBenchFlags, selectByName } from '@stowage/lab/bench-kit';

describe('selectByName (bench-kit)', () => {
  const all = [{ name: 'no-cache' }, { name: 'caching-pytorch' }, { name: 'caching-best' }];

  it('keeps every allocator without names, and the named ones in the list order otherwise', () => {
    expect(selectByName(all, undefined).map((a) => a.name)).to.deep.equal(['no-cache', 'caching-pytorch', 'caching-best']);
    expect(selectByName(all, ['caching-best', 'no-cache']).map((a) => a.name)).to.deep.equal(['no-cache', 'caching-best']);
  });

  it('refuses an unknown name with a usage error that lists the known ones', () => {
    expect(() => selectByName(all, ['nope'])).to.throw(BenchUsageError, 'Unknown allocator nope; known: no-cache, caching-pytorch, caching-best.');
  });
});

describe('allocatorNames (bench-kit)', () => {
  it('rejects an --allocator flag that names no allocator, instead of selecting none', () => {
    const all = [{ name: 'best' }, { name: 'pytorch' }];
    for (const argv of [['--allocator='], ['--allocator', ',']]) {
      let error: unknown;
      try {
        const flags = parseBenchFlags(argv, { allocator: { type: 'string', multiple: true } }, 'usage');
        const chosen = selectByName(all, allocatorNames(flags.allocator));
        expect(chosen, `allocators chosen by ${argv.join(' ')}`).to.not.deep.equal([]);
      } catch (e) {
        error = e;
      }
      expect(error, argv.join(' ')).to.be.instanceOf(BenchUsageError);
    }
  });
});
