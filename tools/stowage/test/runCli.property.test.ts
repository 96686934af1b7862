import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { expect } from 'chai';
import fc from 'fast-check';
import type { CliIo, CliStdin } from '@stowage/cli';
import { EXIT, runCli } from '@stowage/cli';
import { scratchDir, writeSmallRmmLog, writeSmallTrace } from './runStowage.js';

/**
 * Note [The command line under junk]: `stowage`, run in-process (`runCli`) with generated argument vectors — unknown
 * commands and flags, flags without their values, bad numbers and sizes, missing files, directories, files of no
 * format, `-` (standard input: empty, a trace, a terminal), outputs in missing directories — exits with a
 * documented code (0, or 2 usage, 3 input, 4 out of memory; never 1, which marks a bug) and, when it fails, says so
 * in one line starting `stowage: `, with at most a suggestion and a hint under it, never a stack trace. As core's Note [The public
 * API under junk], plausible values (real inputs, known flags and allocators) are mixed in so that runs get past
 * the first check. `demo` and `bench`, which start child processes, always get a token they refuse before any work.
 */

const DOCUMENTED = [EXIT.ok, EXIT.usage, EXIT.input, EXIT.outOfMemory] as const;

/** What one in-process run gave. */
interface CliRun {
  readonly argv: readonly string[];
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** Standard input as a terminal: `-` must refuse it rather than wait for typing. */
const TERMINAL: CliStdin = Object.assign(Readable.from([]), { isTTY: true });

async function run(argv: readonly string[], stdin: CliStdin): Promise<CliRun> {
  let out = '';
  let err = '';
  const io: CliIo = { out: (t) => void (out += t), err: (t) => void (err += t), outBytes: (b) => ((out += `<${b.length} bytes>`), true), stdin };
  const code = await runCli(argv, io);
  return { argv, code, out, err };
}

/** Exits with a documented code and, failing, a one-line message (and at most a hint line), never a stack. */
function expectDocumentedExit({ argv, code, err }: CliRun): void {
  const shown = `stowage ${argv.map((a) => JSON.stringify(a)).join(' ')}\nstderr: ${err}`;
  expect(DOCUMENTED as readonly number[], `exit ${code} of ${shown}`).to.include(code);
  expect(err, shown).not.to.include('unexpected failure');
  expect(err, `a stack trace: ${shown}`).not.to.match(/^\s+at .+:\d+:\d+\)?$/m);
  if (code === EXIT.ok) return;
  const lines = err.split('\n').filter((l) => l.trim() !== '');
  expect(lines[0], shown).to.match(/^stowage: \S/);
  expect(lines.slice(1).every((l) => !l.startsWith('stowage: ')), `one message: ${shown}`).to.equal(true);
  expect(lines.length, `one line, a suggestion and a hint: ${shown}`).to.be.at.most(3);
}

describe('runCli under junk (Note [The command line under junk])', function () {
  this.timeout(60_000);
  const cwd = process.cwd();
  const dir = scratchDir();
  const paths = {
    trace: writeSmallTrace(dir),
    rmm: writeSmallRmmLog(dir),
    snapshot: join(dir, 'small.json'),
    pickle: join(dir, 'small.pickle'),
    missing: join(dir, 'none.jsonl'),
    directory: join(dir, 'a-directory'),
    garbage: join(dir, 'garbage.pickle'),
    empty: join(dir, 'empty.jsonl'),
  };
  const outputs = [join(dir, 'out.json'), join(dir, 'out.pickle'), join(dir, 'out.html'), join(dir, 'out.svg'), join(dir, 'no', 'such', 'dir', 'x.json'), paths.directory, '-', ''];

  before(async () => {
    mkdirSync(paths.directory);
    writeFileSync(paths.garbage, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    writeFileSync(paths.empty, '');
    for (const out of [paths.snapshot, paths.pickle]) expect((await run(['snapshot', paths.trace, '--at', 'end', '-o', out], TERMINAL)).code).to.equal(EXIT.ok);
    // Relative paths a run makes up land in the scratch directory, not the checkout.
    process.chdir(dir);
  });
  after(() => process.chdir(cwd));

  const inputs = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...Object.values(paths), '-') },
    { weight: 1, arbitrary: fc.constantFrom('', 'x', '--', '.', '/', 'a\0b') },
  );
  const value = fc.oneof(
    fc.constantFrom('pytorch', 'best', 'pytorh', '', '-1', '0', '1', '3', 'NaN', '1e999', '99999999999999999999', '0x10', '2MiB', '-2MiB', '0.5', '1KiB', '80GiB', 'end', 'peak', 'json', 'pickle', 'x', '-', '--', '__proto__'),
    fc.string({ maxLength: 6 }),
  );
  const output = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...outputs) }, { weight: 1, arbitrary: fc.string({ maxLength: 6 }) });
  /** The flags each command takes beyond the replay flags (--allocator, --capacity, --limit, --device, --streams). */
  const OWN_FLAGS: Record<string, { valued: string[]; switches: string[] }> = {
    replay: { valued: [], switches: [] },
    snapshot: { valued: ['--at', '-o', '-f', '--format'], switches: ['--replay'] },
    viz: { valued: ['-o', '--output'], switches: [] },
    trace: { valued: ['-o'], switches: ['--chrome', '--list', '--replay'] },
    stats: { valued: ['--page'], switches: [] },
    segments: { valued: ['-o'], switches: [] },
    memory: { valued: ['--output'], switches: [] },
    compare: { valued: ['-o'], switches: [] },
  };
  /**
   * For `name`: a flag it takes with a value, good or bad (an output from the outputs); one without its value; an
   * unknown flag, or one another command takes; a positional input.
   */
  const tokenFor = (name: string): fc.Arbitrary<string[]> => {
    const own = OWN_FLAGS[name] ?? { valued: [], switches: [] };
    const valued = ['-a', '--allocator', '--capacity', '--limit', '--device', ...own.valued];
    return fc.oneof(
      { weight: 8, arbitrary: fc.constantFrom(...valued).chain((f) => (f === '-o' || f === '--output' ? output : value).map((v) => [f, v])) },
      { weight: 3, arbitrary: fc.constantFrom('--streams', '--json', ...own.switches).map((f) => [f]) },
      { weight: 1, arbitrary: fc.constantFrom(...valued).map((f) => [f]) },
      { weight: 1, arbitrary: fc.constantFrom('--frob', '-z', '---', '--allocator=', '--device=-1', '--at=99', '-oo', '--help', '-h', '--version', '--chrome', '--page').map((f) => [f]) },
      { weight: 1, arbitrary: inputs.map((p) => [p]) },
    );
  };
  const commandLine = fc
    .oneof({ weight: 12, arbitrary: fc.constantFrom(...Object.keys(OWN_FLAGS)) }, { weight: 1, arbitrary: fc.constantFrom('frob', 'help', '') })
    .chain((name) => fc.tuple(fc.constant(name), fc.array(tokenFor(name), { maxLength: 4 })));
  const stdin = fc.constantFrom<(() => CliStdin)[]>(() => Readable.from([]), () => Readable.from([Buffer.from('{"action":"alloc","id":0,"size":16,"stream":0}\n')]), () => TERMINAL);

  it('exits with a documented code, failing with one line and no stack, for any argument vector', async () => {
    await fc.assert(
      fc.asyncProperty(fc.boolean(), commandLine, inputs, inputs, stdin, async (json, [name, tokens], first, second, makeStdin) => {
        const argv = [...(json ? ['--json'] : []), ...(name === '' ? [] : [name]), first, ...(name === 'compare' ? [second] : []), ...tokens.flat()];
        expectDocumentedExit(await run(argv, makeStdin()));
      }),
      { numRuns: 1000 },
    );
  });

  it('refuses junk given to demo and bench before starting anything', async () => {
    // Each vector holds one token commander refuses (an unknown flag, a bad choice or number), wherever it lies.
    const refused = fc.constantFrom(['--frob'], ['--steps', '0'], ['--fraction', '2'], ['--model', 'cnn'], ['--policy', 'fifo'], ['--device', 'tpu']);
    const demoToken = fc.constantFrom(['--skip-train'], ['--skip-composition'], ['--steps', '1'], ['--model'], ['--fraction'], ['--steps']);
    const benchArgs = fc.array(fc.constantFrom('engin', 'frob', '', '--list', '--no-build', '--frob', '--', '--quick', '-x'), { maxLength: 4 });
    await fc.assert(
      fc.asyncProperty(fc.array(demoToken, { maxLength: 3 }), refused, fc.nat(3), benchArgs, async (tokens, bad, at, bench) => {
        const demo = [...tokens.slice(0, at), bad, ...tokens.slice(at)].flat();
        const demoRun = await run(['demo', ...demo], TERMINAL);
        expectDocumentedExit(demoRun);
        expect(demoRun.code, demo.join(' ')).to.equal(EXIT.usage);
        // A bench name is never one that exists (the nearest is 'engine'): a listing, or a refusal.
        expectDocumentedExit(await run(['bench', ...bench], TERMINAL));
      }),
      { numRuns: 60 },
    );
  });
});
