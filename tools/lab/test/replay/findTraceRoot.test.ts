import { expect } from 'chai';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findTraceRoot, listTraces } from '@stowage/lab/replay';

describe('findTraceRoot', () => {
  let dir: string;
  beforeEach(() => {
    dir = realpathSync(mkdtempSync(join(tmpdir(), 'stowage-root-')));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('finds shared/traces beside an ancestor of the start directory', () => {
    mkdirSync(join(dir, 'shared', 'traces'), { recursive: true });
    mkdirSync(join(dir, 'main', 'packages', 'core'), { recursive: true });
    expect(findTraceRoot(join(dir, 'main', 'packages', 'core'), {})).to.equal(join(dir, 'shared', 'traces'));
    expect(findTraceRoot(join(dir, 'main'), {})).to.equal(join(dir, 'shared', 'traces'));
  });

  it('prefers STOWAGE_TRACES, and returns undefined when it names no directory', () => {
    mkdirSync(join(dir, 'elsewhere'));
    expect(findTraceRoot(dir, { STOWAGE_TRACES: join(dir, 'elsewhere') })).to.equal(join(dir, 'elsewhere'));
    expect(findTraceRoot(dir, { STOWAGE_TRACES: join(dir, 'missing') })).to.equal(undefined);
  });

  it('returns undefined when no ancestor has shared/traces', () => {
    const start = join(dir, 'a', 'b');
    mkdirSync(start, { recursive: true });
    const found = findTraceRoot(start, {});
    // An ancestor outside the temporary directory could have one; none inside it does.
    expect(found === undefined || !found.startsWith(dir)).to.equal(true);
  });
});

describe('listTraces', () => {
  it('lists gzipped traces under pytorch/ and static/ and CSV logs anywhere, sorted by name', () => {
    const dir = realpathSync(mkdtempSync(join(tmpdir(), 'stowage-list-')));
    try {
      for (const sub of ['pytorch/nested', 'static', 'rmm/logs', 'examples']) mkdirSync(join(dir, sub), { recursive: true });
      for (const file of ['pytorch/b.jsonl.gz', 'pytorch/nested/a.jsonl.gz', 'static/c.jsonl.gz', 'rmm/logs/d.csv', 'e.csv', 'pytorch/notes.txt', 'examples/x.jsonl.gz', 'top.jsonl.gz']) {
        writeFileSync(join(dir, file), '');
      }
      expect(listTraces(dir)).to.deep.equal([
        { name: 'a', path: join(dir, 'pytorch/nested/a.jsonl.gz'), kind: 'pytorch' },
        { name: 'b', path: join(dir, 'pytorch/b.jsonl.gz'), kind: 'pytorch' },
        { name: 'c', path: join(dir, 'static/c.jsonl.gz'), kind: 'static' },
        { name: 'd', path: join(dir, 'rmm/logs/d.csv'), kind: 'rmm-csv' },
        { name: 'e', path: join(dir, 'e.csv'), kind: 'rmm-csv' },
      ]);
      expect(listTraces(join(dir, 'missing'))).to.deep.equal([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
