import { spawn } from 'node:child_process';

/**
 * Runs `node [...nodeArgs] script [...args]` in `cwd` with this process's stdio, resolving to its exit code (1 when
 * a signal ended it).
 */
export function runNode(script: string, args: readonly string[], options: { cwd: string; nodeArgs?: readonly string[] }): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [...(options.nodeArgs ?? []), script, ...args], { cwd: options.cwd, stdio: 'inherit' });
    child.on('error', reject);
    child.on('exit', (code, signal) => resolvePromise(code ?? (signal === null ? 0 : 1)));
  });
}

/** Runs a shell command line in `cwd` with this process's stdio and `extraPath` first on PATH; resolves to its exit code. */
export function runShell(command: string, options: { cwd: string; extraPath?: string }): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const env = { ...process.env };
    if (options.extraPath !== undefined) env.PATH = `${options.extraPath}:${env.PATH ?? ''}`;
    const child = spawn(command, { cwd: options.cwd, stdio: 'inherit', shell: true, env });
    child.on('error', reject);
    child.on('exit', (code, signal) => resolvePromise(code ?? (signal === null ? 0 : 1)));
  });
}
