// The stowage command (bin/stowage.js loads this). An application: reflect-metadata comes first.
import 'reflect-metadata';
import { runCli } from './cli.js';

// A reader that stops early (`stowage trace --list x | head`) closes the pipe: stop quietly, as other tools do.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
  process.exit(process.exitCode ?? 0);
});

process.exitCode = await runCli(process.argv.slice(2));
