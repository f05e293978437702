/* The real thing for the integration test: the scripted model endpoint
 * (tests/server/scripted_model.py) and composer-lsp (`python -m server --stdio`), connected over
 * vscode-languageserver-protocol, the layer vscode-languageclient is built on.
 *
 *   const model = await startModel([[{text: 'Hello.'}]]);
 *   const server = await startServer(workspace, model.url, logDir);
 *   client.attach(server.connection);
 *   ...
 *   await server.stop(); await model.stop();
 *
 * Python: $COMPOSER_PYTHON, else the repository's .venv/bin/python.
 */

import { ChildProcessWithoutNullStreams, spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { pathToFileURL } from 'url';
import {
  createProtocolConnection, InitializeRequest, ProtocolConnection, StreamMessageReader, StreamMessageWriter,
} from 'vscode-languageserver-protocol/node';

export const EXTENSION_DIR = path.resolve(__dirname, '..', '..');
export const REPO_ROOT = path.resolve(EXTENSION_DIR, '..', '..');
export const PYTHON = process.env.COMPOSER_PYTHON || path.resolve(EXTENSION_DIR, '..', '..', '.venv', 'bin', 'python');

export type ScriptReply = { text?: string; delay?: number; tool_calls?: { name: string; arguments: Record<string, unknown> }[] };

function collect(proc: ChildProcessWithoutNullStreams, into: string[]): void {
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (chunk: string) => into.push(chunk));
}

async function exited(proc: ChildProcessWithoutNullStreams, ms: number): Promise<boolean> {
  if (proc.exitCode !== null || proc.signalCode !== null) return true;
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    proc.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

export interface Model {
  url: string;
  stop(): Promise<void>;
}

/** Starts tests/server/scripted_model.py with `script` (a list of turns of replies). */
export async function startModel(script: ScriptReply[][], dir: string): Promise<Model> {
  const file = path.join(dir, `script-${Date.now()}-${Math.random().toString(36).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify(script));
  const proc = spawn(PYTHON, [path.join('tests', 'server', 'scripted_model.py'), '--script', file, '--port', '0'], { cwd: REPO_ROOT });
  const stderr: string[] = [];
  collect(proc, stderr);
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`scripted model did not start: ${stderr.join('')}`)), 30_000);
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (chunk: string) => {
      out += chunk;
      const line = out.split('\n').find((l) => l.startsWith('http'));
      if (line) {
        clearTimeout(timer);
        resolve(line.trim());
      }
    });
    proc.once('exit', (code) => reject(new Error(`scripted model exited (${code}): ${stderr.join('')}`)));
  });
  return {
    url,
    stop: async () => {
      proc.kill('SIGTERM');
      if (!(await exited(proc, 5000))) proc.kill('SIGKILL');
    },
  };
}

export interface Server {
  connection: ProtocolConnection;
  /** window/logMessage messages and stderr, for failure messages. */
  logs: string[];
  /** Requests and notifications the server sent that the test did not handle otherwise. */
  progress: unknown[];
  stop(): Promise<void>;
}

/** Starts `python -m server --stdio` on `workspace` and initializes it as VS Code would. */
export async function startServer(workspace: string, modelUrl: string, logDir: string): Promise<Server> {
  const args = ['-m', 'server', '--stdio', '--workspace', workspace, '--endpoint', modelUrl, '--log-dir', logDir];
  return connectServer(PYTHON, args, { cwd: REPO_ROOT }, workspace, { mode: 'agent' });
}

/** Runs `command args` and speaks LSP with it over stdio: initialize (with the capabilities of
 * vscode-languageclient that matter to composer-lsp), then initialized. */
export async function connectServer(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv },
  workspace: string, initializationOptions: unknown): Promise<Server> {
  const base = options.env ?? process.env;
  const env = { ...base, PYTHONPATH: [REPO_ROOT, base.PYTHONPATH].filter(Boolean).join(path.delimiter) };
  const proc = spawn(command, args, { cwd: options.cwd ?? REPO_ROOT, env });
  const logs: string[] = [];
  const progress: unknown[] = [];
  collect(proc, logs);
  const connection = createProtocolConnection(new StreamMessageReader(proc.stdout), new StreamMessageWriter(proc.stdin));
  connection.onNotification('window/logMessage', (p: { message: string }) => { logs.push(p.message); });
  connection.onRequest('window/workDoneProgress/create', (p: unknown) => {
    progress.push(p);
    return null;
  });
  connection.onNotification('$/progress', (p: unknown) => { progress.push(p); });
  connection.listen();
  const uri = pathToFileURL(workspace).toString();
  await connection.sendRequest(InitializeRequest.type, {
    processId: process.pid,
    rootUri: uri,
    workspaceFolders: [{ uri, name: path.basename(workspace) }],
    capabilities: {
      workspace: { applyEdit: true, workspaceEdit: { documentChanges: true }, executeCommand: { dynamicRegistration: true } },
      window: { workDoneProgress: true },
      textDocument: { synchronization: { dynamicRegistration: true, didSave: true }, codeAction: { dynamicRegistration: true } },
    },
    initializationOptions,
    clientInfo: { name: 'composer-vscode-test' },
  });
  await connection.sendNotification('initialized', {});
  return {
    connection,
    logs,
    progress,
    stop: async () => {
      try {
        await Promise.race([connection.sendRequest('shutdown'), new Promise((r) => setTimeout(r, 5000))]);
        await connection.sendNotification('exit');
      } catch {
        // the server is gone already
      }
      if (!(await exited(proc, 5000))) proc.kill('SIGKILL');
      connection.dispose();
    },
  };
}

/** Resolves once `check()` is true (checked every 20 ms), or fails after `ms`. */
export async function until(check: () => boolean, ms = 15_000, what = 'condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
