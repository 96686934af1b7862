// The stowage command (bin/stowage.js loads this). An application: reflect-metadata comes first.
import 'reflect-metadata';
import { runCli } from './cli.js';

process.exitCode = await runCli(process.argv.slice(2));
