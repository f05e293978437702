/* Starting and restarting composer-lsp under vscode-languageclient, as the Python tools extension
 * template's src/common/server.ts does: the configured interpreter runs `-m server --stdio`, the
 * settings go as initializationOptions, and a restart stops the old client before the new one.
 */

import { Disposable, LogOutputChannel, WorkspaceFolder } from 'vscode';
import { Executable, LanguageClient, LanguageClientOptions, Middleware, RevealOutputChannelOn, ServerOptions, State } from 'vscode-languageclient/node';
import { initializationOptions, ISettings, serverCommand } from './command';
import { traceError, traceInfo, traceLog, traceVerbose } from './logging';

export const SERVER_ID = 'composer';
export const SERVER_NAME = 'Composer';

export function createServer(
  settings: ISettings,
  interpreter: string[],
  root: WorkspaceFolder,
  outputChannel: LogOutputChannel,
  middleware: Middleware,
): LanguageClient {
  const cwd = root.uri.fsPath;
  const { command, args } = serverCommand(settings, interpreter, cwd);
  traceLog(`Server run command: ${[command, ...args].join(' ')}`);
  const run: Executable = { command, args, options: { cwd, env: { ...process.env } } };
  const serverOptions: ServerOptions = { run, debug: run };
  const clientOptions: LanguageClientOptions = {
    // every file the editor has open feeds the agent's view of the workspace (unsaved text included),
    // and diagnostics anywhere get the server's "Ask Composer to fix this" action
    documentSelector: [{ scheme: 'file' }],
    workspaceFolder: root,
    outputChannel,
    traceOutputChannel: outputChannel,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationOptions: initializationOptions(settings),
    diagnosticCollectionName: SERVER_ID,
    middleware,
  };
  return new LanguageClient(SERVER_ID, SERVER_NAME, serverOptions, clientOptions);
}

let disposables: Disposable[] = [];

export interface StartHandlers {
  /** The client reached a state (Starting, Running, Stopped); Running also after an automatic restart. */
  onState(state: State, client: LanguageClient): void;
  onStartFailed(message: string): void;
}

/** Stops `lsClient` (if any) and starts a new client; undefined when the new one failed to start. */
export async function restartServer(
  settings: ISettings,
  interpreter: string[],
  root: WorkspaceFolder,
  outputChannel: LogOutputChannel,
  middleware: Middleware,
  handlers: StartHandlers,
  lsClient?: LanguageClient,
): Promise<LanguageClient | undefined> {
  if (lsClient) {
    traceInfo('Server: stop requested');
    try {
      await lsClient.stop();
    } catch (err) {
      traceError('Server: stopping failed:', err);
    }
    disposables.forEach((d) => d.dispose());
    disposables = [];
  }
  const client = createServer(settings, interpreter, root, outputChannel, middleware);
  disposables.push(client.onDidChangeState((e) => {
    traceVerbose(`Server state: ${State[e.newState]}`);
    handlers.onState(e.newState, client);
  }));
  traceInfo('Server: start requested');
  try {
    await client.start();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    traceError(`Server: could not start composer-lsp: ${message}`);
    handlers.onStartFailed(message);
    return undefined;
  }
  return client;
}
