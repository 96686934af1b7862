import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { openWebGpuDevice } from '@stowage/allocator-webgpu';

// Note [README examples]
// Every ```ts block of the root README.md and of packages/*/, examples/*/ and tools/*/README.md is checked as a
// user would paste it into a file of their own:
// - type-checked, each block as its own module, with the repository's compiler options plus
//   `exactOptionalPropertyTypes` (a stricter setting a user may have), against the built packages (`dist/*.d.ts`);
// - then run: types stripped with target ESNext (so syntax is kept as written: `await using` would fail on a
//   Node without it, as it does in a pasted .mjs file), written as an .mjs file and run with this Node; it must
//   exit 0.
// The files live under packages/cow/dist-test/readme-examples/ because cow's node_modules resolves every package a
// README imports (@stowage/core, @stowage/cow by self-reference, @stowage/allocator-webgpu, @stowage/lms, @stowage/example-train,
// @stowage/snapshot-pickle, reflect-metadata).
// A block preceded by `<!-- readme-test: mocha (reason) -->` is a mocha test file: it is type-checked, then run
// with mocha and must pass. One preceded by `<!-- readme-test: typecheck-only (reason) -->` is type-checked but not
// run, one preceded by `<!-- readme-test: skip (reason) -->` neither; the reason is required and shown in the
// test's title. `<!-- readme-test: webgpu (reason) -->` runs the block when this machine has a WebGPU adapter
// (as the WebGPU tests do) and reports it skipped, with what is missing, when it has none.

const execFileAsync = promisify(execFile);
const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const workDir = fileURLToPath(new URL('../dist-test/readme-examples/', import.meta.url));
const mochaBin = join(repoRoot, 'node_modules/mocha/bin/mocha.js');

type Mode = 'run' | 'mocha' | 'webgpu' | 'typecheck-only' | 'skip';

interface Example {
  /** README path relative to the repository root. */
  readonly readme: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly code: string;
  readonly mode: Mode;
  readonly reason: string;
  /** File name (without extension) under workDir. */
  readonly name: string;
}

const MARKER = /^<!--\s*readme-test:\s*(typecheck-only|skip|mocha|webgpu|run)\s*(?:\((.*)\))?\s*-->$/;

/** The ```ts blocks of one README, with the mode their marker comment gives. */
function examplesOf(readme: string): Example[] {
  const lines = readFileSync(join(repoRoot, readme), 'utf8').split('\n');
  const examples: Example[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    let before = start - 1;
    while (before >= 0 && lines[before]!.trim() === '') before--;
    const marker = before >= 0 ? MARKER.exec(lines[before]!.trim()) : null;
    if (before >= 0 && /readme-test/.test(lines[before]!) && !marker) {
      throw new Error(`${readme}:${before + 1}: unreadable readme-test marker: ${lines[before]}`);
    }
    const mode = (marker?.[1] ?? 'run') as Mode;
    const reason = marker?.[2]?.trim() ?? '';
    if (mode !== 'run' && reason === '') throw new Error(`${readme}:${before + 1}: a '${mode}' marker needs a (reason)`);
    const name = `${readme.replace(/[^A-Za-z0-9]+/g, '_')}_L${start + 1}`;
    examples.push({ readme, line: start + 1, code: body.join('\n') + '\n', mode, reason, name });
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

describe('README examples', function () {
  this.timeout(120_000);
  const diagnosticsByFile = new Map<string, ts.Diagnostic[]>();
  let globalDiagnostics: ts.Diagnostic[] = [];

  before(() => {
    rmSync(workDir, { recursive: true, force: true });
    mkdirSync(workDir, { recursive: true });
    const checked = examples.filter((e) => e.mode !== 'skip');
    const files = checked.map((e) => join(workDir, `${e.name}.mts`));
    checked.forEach((e, i) => writeFileSync(files[i]!, e.code));
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
      const diagnostics = diagnosticsByFile.get(join(workDir, `${example.name}.mts`)) ?? [];
      expect(diagnostics.length, `${where}:\n${formatDiagnostics(diagnostics)}`).to.equal(0);
    });
    if (example.mode === 'typecheck-only') {
      it(`${where} runs (not run: ${example.reason})`);
      continue;
    }
    const how = example.mode === 'mocha' ? `passes under mocha (${example.reason})` : `runs as written on this Node (${process.version})`;
    it(`${where} ${how}`, async function () {
      if (example.mode === 'webgpu') {
        const context = await openWebGpuDevice().catch((error: Error) => error.message);
        if (typeof context === 'string') {
          console.log(`    skipped: no WebGPU adapter — ${context}`);
          this.skip();
        }
        context.device.destroy();
      }
      const { outputText } = ts.transpileModule(example.code, {
        fileName: `${example.name}.mts`,
        compilerOptions: { target: ts.ScriptTarget.ESNext, module: ts.ModuleKind.ESNext, sourceMap: false },
      });
      const file = join(workDir, `${example.name}.mjs`);
      writeFileSync(file, outputText);
      try {
        const args = example.mode === 'mocha' ? [mochaBin, '--no-config', '--reporter', 'dot', file] : [file];
        await execFileAsync(process.execPath, args, { cwd: workDir, timeout: 60_000 });
      } catch (e) {
        const { stdout, stderr } = e as { stdout?: string; stderr?: string };
        throw new Error(`${where} (run as ${relative(repoRoot, file)}) failed:\n${stderr ?? ''}${stdout ?? ''}`);
      }
    });
  }
});
