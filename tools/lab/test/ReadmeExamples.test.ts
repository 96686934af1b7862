import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';
import { testLibcuda } from '@stowage/allocator-cuda/testing';
import { hasChromium, missingLimits } from '@stowage/lab/browser';
import { TFJS_LIMITS } from '@stowage/lab/tfjs';

// Note [README examples]
// Every ```ts block of the root README.md and of packages/*/, examples/*/ and tools/*/README.md is checked as a
// user would paste it into a file of their own:
// - type-checked, each block as its own module, with the repository's compiler options plus
//   `exactOptionalPropertyTypes` (a stricter setting a user may have), against the built packages (`dist/*.d.ts`);
// - then run: types stripped with target ESNext (so syntax is kept as written: `using` would fail on Node 20, as it
//   does in a pasted .mjs file), written as an .mjs file and run with this Node; it must exit 0.
// The files live under tools/lab/dist-test/readme-examples/<README's directory>/, one directory a README, because
// the lab's node_modules resolves every package of the workspace (it depends on them all), and `@stowage/lab`
// itself by self-reference. A block that starts another process or thread starts its own file
// (`new URL(import.meta.url)`) or a file the README shows.
// A marker comment just before a block says how to check it; the reason in parentheses is required where shown,
// and appears in the test's title:
// - none: run, as above.
// - `<!-- readme-test: file <path> -->`: the block is the file <path> of the README's directory, which later
//   blocks of that README use (a worker's or a child's script, a browser entry). Type-checked; not run on its own;
//   written as it is and, for a .ts path, also as the .js file Node runs.
// - `<!-- readme-test: mocha (reason) -->`: a mocha test file: type-checked, then run with mocha; it must pass.
// - `<!-- readme-test: cuda (reason) -->`: run with STOWAGE_LIBCUDA set to the libcuda the CUDA tests use (the
//   variable's own value, else a real libcuda when one loads, else the stand-in built with the C compiler);
//   reported skipped, saying why, when there is none.
// - `<!-- readme-test: webgpu (reason) -->`: run when this machine has a WebGPU adapter (as the WebGPU tests
//   do); reported skipped, with what is missing, when it has none. `tfjs (reason)`: the same, and the device must
//   have the limits tfjs's kernels assume (TFJS_LIMITS of @stowage/lab/tfjs), else skipped naming the limit.
// - `<!-- readme-test: chromium (reason) -->`: run when Debian's Chromium is installed (the browser harness's
//   `hasChromium()`), else reported skipped.
// - `<!-- readme-test: typecheck-only (reason) -->`: type-checked, not run; `skip (reason)`: neither. A block that
//   can run somewhere carries one of the markers above instead: these two are for what no machine can run.

const execFileAsync = promisify(execFile);
const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const workDir = fileURLToPath(new URL('../dist-test/readme-examples/', import.meta.url));
const mochaBin = join(repoRoot, 'node_modules/mocha/bin/mocha.js');

type Mode = 'run' | 'file' | 'mocha' | 'cuda' | 'webgpu' | 'tfjs' | 'chromium' | 'typecheck-only' | 'skip';
const MODES_WITH_REASON: readonly Mode[] = ['mocha', 'cuda', 'webgpu', 'tfjs', 'chromium', 'typecheck-only', 'skip'];

interface Example {
  /** README path relative to the repository root. */
  readonly readme: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly code: string;
  readonly mode: Mode;
  readonly reason: string;
  /** The block's files, relative to workDir: what is type-checked, and what runs (a `file` block's own path). */
  readonly checked: string;
  readonly run: string;
}

const MARKER = /^<!--\s*readme-test:\s*(typecheck-only|skip|mocha|cuda|webgpu|tfjs|chromium|run|file)\s*([^\s(]+)?\s*(?:\((.*)\))?\s*-->$/;

/** The ```ts blocks of one README, with the mode their marker comment gives. */
function examplesOf(readme: string): Example[] {
  const lines = readFileSync(join(repoRoot, readme), 'utf8').split('\n');
  const folder = dirname(readme) === '.' ? 'root' : dirname(readme).replace(/[^A-Za-z0-9]+/g, '_');
  const examples: Example[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    let before = start - 1;
    while (before >= 0 && lines[before]!.trim() === '') before--;
    const marker = before >= 0 ? MARKER.exec(lines[before]!.trim()) : null;
    const where = `${readme}:${before + 1}`;
    if (before >= 0 && /readme-test/.test(lines[before]!) && !marker) throw new Error(`${where}: unreadable readme-test marker: ${lines[before]}`);
    const mode = (marker?.[1] ?? 'run') as Mode;
    const path = marker?.[2];
    const reason = marker?.[3]?.trim() ?? '';
    if (MODES_WITH_REASON.includes(mode) && reason === '') throw new Error(`${where}: a '${mode}' marker needs a (reason)`);
    if ((mode === 'file') !== (path !== undefined)) throw new Error(`${where}: a path goes with 'file' markers only, and every 'file' marker needs one`);
    if (path !== undefined && (path.startsWith('/') || path.split('/').includes('..'))) throw new Error(`${where}: a file's path stays in the README's directory`);
    const checked = mode === 'file' ? `${folder}/${path!}` : `${folder}/L${start + 1}.mts`;
    const run = mode === 'file' ? checked.replace(/\.m?ts$/, '.js') : `${folder}/L${start + 1}.mjs`;
    examples.push({ readme, line: start + 1, code: body.join('\n') + '\n', mode, reason, checked, run });
  }
  return examples;
}

function readmes(): string[] {
  const found = ['README.md'];
  for (const parent of ['packages', 'examples', 'tools']) {
    for (const dir of readdirSync(join(repoRoot, parent)).sort()) {
      const path = `${parent}/${dir}/README.md`;
      if (existsSync(join(repoRoot, path))) found.push(path);
    }
  }
  return found;
}

/** Writes `text` at `path` under workDir, making its directory. */
function writeWorkFile(path: string, text: string): string {
  const full = join(workDir, path);
  mkdirSync(dirname(full), { recursive: true });
  writeFileSync(full, text);
  return full;
}

/** The block as Node runs it: types stripped, syntax kept (target ESNext). */
function transpiled(example: Example): string {
  return ts.transpileModule(example.code, {
    fileName: example.checked,
    compilerOptions: { target: ts.ScriptTarget.ESNext, module: ts.ModuleKind.ESNext, sourceMap: false },
  }).outputText;
}

/** The repository's compiler options (tsconfig.base.json), made a user's: no emit, and stricter optional types. */
function userCompilerOptions(): ts.CompilerOptions {
  const configPath = join(repoRoot, 'tsconfig.base.json');
  const { config, error } = ts.readConfigFile(configPath, (p) => ts.sys.readFile(p));
  if (error) throw new Error(ts.flattenDiagnosticMessageText(error.messageText, '\n'));
  const { options, errors } = ts.parseJsonConfigFileContent(config, ts.sys, repoRoot, undefined, configPath);
  if (errors.length > 0) throw new Error(errors.map((e) => ts.flattenDiagnosticMessageText(e.messageText, '\n')).join('\n'));
  delete options.configFilePath; // else `types` resolve from the repository root, not from the user's file
  return {
    ...options,
    noEmit: true,
    composite: false,
    declaration: false,
    declarationMap: false,
    sourceMap: false,
    incremental: false,
    exactOptionalPropertyTypes: true,
    moduleDetection: ts.ModuleDetectionKind.Force,
    types: ['node', '@webgpu/types'],
  };
}

function formatDiagnostics(diagnostics: readonly ts.Diagnostic[]): string {
  return ts.formatDiagnostics(diagnostics, {
    getCanonicalFileName: (f) => f,
    getCurrentDirectory: () => repoRoot,
    getNewLine: () => '\n',
  });
}

const examples = readmes().flatMap(examplesOf);

/** Why this machine cannot run a block of `mode` (skip saying so), or the environment it runs in. */
type Machine = { readonly env: NodeJS.ProcessEnv } | { readonly missing: string };

describe('README examples', function () {
  this.timeout(120_000);
  const diagnosticsByFile = new Map<string, ts.Diagnostic[]>();
  let globalDiagnostics: ts.Diagnostic[] = [];
  const machines = new Map<Mode, Promise<Machine>>();

  /** What a block of `mode` needs of this machine, looked for once a mode. */
  function machineFor(mode: Mode): Promise<Machine> {
    let machine = machines.get(mode);
    if (machine === undefined) {
      machine = findMachine(mode);
      machines.set(mode, machine);
    }
    return machine;
  }

  before(() => {
    rmSync(workDir, { recursive: true, force: true });
    mkdirSync(workDir, { recursive: true });
    const checked = examples.filter((e) => e.mode !== 'skip');
    const files = checked.map((e) => writeWorkFile(e.checked, e.code));
    for (const e of checked) if (e.mode === 'file' && e.run !== e.checked) writeWorkFile(e.run, transpiled(e));
    const options = userCompilerOptions();
    const host = ts.createCompilerHost(options);
    host.getCurrentDirectory = () => workDir; // `types` resolve from where a user's file would be
    const program = ts.createProgram(files, options, host);
    for (const d of ts.getPreEmitDiagnostics(program)) {
      const file = d.file?.fileName;
      if (file !== undefined && files.includes(file)) diagnosticsByFile.set(file, [...(diagnosticsByFile.get(file) ?? []), d]);
      else globalDiagnostics.push(d);
    }
    globalDiagnostics = globalDiagnostics.filter((d) => d.category === ts.DiagnosticCategory.Error);
  });

  it('finds the ts blocks of the root README', () => {
    expect(examples.filter((e) => e.readme === 'README.md').length).to.be.greaterThan(3);
  });

  it('type-checks the declarations the examples import (no errors outside the examples)', () => {
    expect(globalDiagnostics, formatDiagnostics(globalDiagnostics)).to.deep.equal([]);
  });

  for (const example of examples) {
    const where = `${example.readme}:${example.line}`;
    if (example.mode === 'skip') {
      it(`${where} (not checked: ${example.reason})`);
      continue;
    }
    it(`${where} type-checks as written`, () => {
      const diagnostics = diagnosticsByFile.get(join(workDir, example.checked)) ?? [];
      expect(diagnostics.length, `${where}:\n${formatDiagnostics(diagnostics)}`).to.equal(0);
    });
    if (example.mode === 'file') continue; // run by the blocks that use it
    if (example.mode === 'typecheck-only') {
      it(`${where} runs (not run: ${example.reason})`);
      continue;
    }
    const how =
      example.mode === 'mocha' ? `passes under mocha (${example.reason})` : `runs as written on this Node (${process.version})${example.mode === 'run' ? '' : `, ${example.mode}: ${example.reason}`}`;
    it(`${where} ${how}`, async function () {
      const machine = await machineFor(example.mode);
      if ('missing' in machine) {
        console.log(`    skipped: ${machine.missing}`);
        this.skip();
      }
      const file = writeWorkFile(example.run, transpiled(example));
      try {
        const args = example.mode === 'mocha' ? [mochaBin, '--no-config', '--reporter', 'dot', file] : [file];
        await execFileAsync(process.execPath, args, { cwd: dirname(file), env: (machine as { env: NodeJS.ProcessEnv }).env, timeout: 90_000 });
      } catch (e) {
        const { stdout, stderr } = e as { stdout?: string; stderr?: string };
        throw new Error(`${where} (run as ${relative(repoRoot, file)}) failed:\n${stderr ?? ''}${stdout ?? ''}`);
      }
    });
  }
});

/** Looks for what a block of `mode` needs (Note [README examples]). */
async function findMachine(mode: Mode): Promise<Machine> {
  const env = { ...process.env };
  switch (mode) {
    case 'cuda': {
      const libcuda = testLibcuda();
      return typeof libcuda === 'string' ? { missing: libcuda } : { env: { ...env, STOWAGE_LIBCUDA: libcuda.path } };
    }
    case 'webgpu':
    case 'tfjs': {
      const context = await openWebGpuDevice().catch((error: Error) => error.message);
      if (typeof context === 'string') return { missing: `no WebGPU adapter — ${context}` };
      const missing = mode === 'tfjs' ? missingLimits(context.device, TFJS_LIMITS) : [];
      context.device.destroy();
      return missing.length > 0 ? { missing: `the WebGPU device (${context.adapterInfo}) lacks ${missing.join(', ')}, which tfjs's kernels need` } : { env };
    }
    case 'chromium':
      return hasChromium() ? { env } : { missing: 'no Chromium (apt-get install chromium)' };
    default:
      return { env };
  }
}
