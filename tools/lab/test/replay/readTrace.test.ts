import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { InvalidArgumentError } from '@stowage/core';
import { MissingFileError, parseTraceChunks, readTrace } from '@stowage/lab/replay';

describe('readTrace', () => {
  it('rejects a path that is not a non-empty string with InvalidArgumentError, not a TypeError', async () => {
    for (const path of [null, undefined, 42, '', { path: 'a.jsonl' }]) {
      const error: unknown = await readTrace(path as never).then(() => undefined, (caught: unknown) => caught);
      expect(error, String(path)).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(/^path must be the path of a trace file/);
    }
  });

  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'stowage-readTrace-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const write = (name: string, lines: string[], gzip = true): string => {
    const path = join(dir, name);
    const text = `${lines.join('\n')}\n`;
    writeFileSync(path, gzip ? gzipSync(text) : text);
    return path;
  };

  it('reads every event of a gzipped JSON-lines trace in recorded order', async () => {
    const path = write('small.jsonl.gz', [
      '{"seq":0,"action":"alloc","addr":140605707517952,"size":10240,"stream":0,"device":0,"t_us":null,"id":0,"pre":true}',
      '{"seq":1,"action":"segment_alloc","addr":140605707000000,"size":2097152,"stream":0,"device":0,"t_us":5}',
      '{"seq":2,"action":"alloc","addr":null,"size":512,"stream":7,"device":0,"t_us":9,"id":1,"site":"x.py:1:f"}',
      '{"seq":3,"action":"free_requested","addr":null,"size":512,"stream":7,"device":0,"t_us":12,"id":1}',
      '{"seq":4,"action":"free_completed","addr":null,"size":512,"stream":7,"device":0,"t_us":13,"id":1}',
      '{"seq":5,"action":"oom","addr":0,"size":4096,"stream":0,"device":0,"t_us":20,"device_free":0}',
    ]);
    expect(await readTrace(path)).to.deep.equal([
      { action: 'alloc', id: 0, size: 10240, stream: 0, addr: 140605707517952, pre: true, device: 0, timeUs: null },
      { action: 'segment_alloc', id: -1, size: 2097152, stream: 0, addr: 140605707000000, device: 0, timeUs: 5 },
      { action: 'alloc', id: 1, size: 512, stream: 7, device: 0, timeUs: 9 },
      { action: 'free_requested', id: 1, size: 512, stream: 7, device: 0, timeUs: 12 },
      { action: 'free_completed', id: 1, size: 512, stream: 7, device: 0, timeUs: 13 },
      { action: 'oom', id: -1, size: 4096, stream: 0, addr: 0, device: 0, timeUs: 20, deviceFree: 0 },
    ]);
  });

  it('reads an uncompressed .jsonl file and skips blank lines', async () => {
    const path = write('plain.jsonl', ['', '{"action":"alloc","size":1,"id":3}', '   ', '{"action":"free_requested","size":1,"id":3}'], false);
    expect(await readTrace(path)).to.deep.equal([
      { action: 'alloc', id: 3, size: 1, stream: 0 },
      { action: 'free_requested', id: 3, size: 1, stream: 0 },
    ]);
  });

  it('names the file and line of a line that is not JSON', async () => {
    const path = write('broken.jsonl.gz', ['{"action":"alloc","size":1,"id":0}', '{"action":"alloc",', '{"action":"alloc","size":1,"id":2}']);
    const error = await readTrace(path).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.contain(`line 2 of ${path}`);
  });

  it('rejects an unknown action, a negative size and an alloc without an id, citing the field', async () => {
    const cases: [string, string][] = [
      ['{"action":"allocate","size":1,"id":0}', 'action on line 1'],
      ['{"action":"alloc","size":-1,"id":0}', 'size on line 1'],
      ['{"action":"alloc","size":1,"id":null}', 'id on line 1'],
    ];
    for (const [i, [line, where]] of cases.entries()) {
      const path = write(`bad${i}.jsonl.gz`, [line]);
      const error = await readTrace(path).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, line).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.contain(where).and.to.contain(path);
    }
  });

  it('rejects a missing path with MissingFileError (FILE_NOT_FOUND) saying what to give, not the raw ENOENT', async () => {
    for (const path of [join(dir, 'none.jsonl.gz'), join(dir, 'none.jsonl'), join(dir, 'no', 'such', 'dir', 'x.jsonl')]) {
      const error: unknown = await readTrace(path).then(() => undefined, (e: unknown) => e);
      expect(error, path).to.be.instanceOf(MissingFileError);
      expect((error as MissingFileError).code).to.equal('FILE_NOT_FOUND');
      expect((error as Error).message).to.equal(`No file at ${path}; give the path of a trace file (JSON lines, gzipped when the name ends in .gz).`);
    }
  });

  it('rejects a directory with InvalidArgumentError naming it, not the raw EISDIR', async () => {
    for (const path of [dir, `${dir}.gz`]) {
      if (path !== dir) mkdirSync(path);
      const error: unknown = await readTrace(path).then(() => undefined, (e: unknown) => e);
      expect(error, path).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.equal(`path must be the path of a trace file (JSON lines, gzipped when the name ends in .gz), not a directory (listTraces lists the traces under a directory); got "${path}".`);
      if (path !== dir) rmSync(path, { recursive: true });
    }
  });

  it('rejects a .gz file that is not gzip with InvalidArgumentError naming the file', async () => {
    const path = join(dir, 'fake.jsonl.gz');
    writeFileSync(path, '{"action":"alloc","size":1,"id":0}\n');
    const error = await readTrace(path).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.contain(path);
  });
});

describe('parseTraceChunks', () => {
  it('parses JSON lines split anywhere between chunks, a multi-byte character included, as readTrace does', async () => {
    const text = '{"action":"alloc","id":0,"size":16,"stream":0,"device":1}\n{"action":"free_requested","id":0,"size":16,"stream":0,"note":"é"}\n';
    const bytes = new TextEncoder().encode(text);
    const chunks = [bytes.subarray(0, 7), bytes.subarray(7, bytes.indexOf(0xc3) + 1), bytes.subarray(bytes.indexOf(0xc3) + 1)];
    expect(await parseTraceChunks(chunks, 'standard input')).to.deep.equal([
      { action: 'alloc', id: 0, size: 16, stream: 0, device: 1 },
      { action: 'free_requested', id: 0, size: 16, stream: 0 },
    ]);
  });

  it('names the source and line of a bad line', async () => {
    const chunks = [new TextEncoder().encode('{"action":"alloc","id":0,"size":16}\n{"action":"alloc","id":1,"size":-1}\n')];
    let error: unknown;
    try {
      await parseTraceChunks(chunks, 'standard input');
    } catch (e) {
      error = e;
    }
    expect(error).to.be.instanceOf(InvalidArgumentError);
    expect((error as Error).message).to.match(/size on line 2 of standard input/);
  });
});
