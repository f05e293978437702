/* Composer for VS Code: starts composer-lsp through vscode-languageclient and puts its sessions in a
 * chat view. Layout follows the Python tools extension template (src/common/{server,settings,
 * python,logging}.ts); the protocol layer (src/protocol/) has no `vscode` import and is tested in
 * Node (test/). Build: `npm run compile`; run: F5 in VS Code (see README.md).
 */

import * as vscode from 'vscode';
import { LanguageClient, Middleware, State } from 'vscode-languageclient/node';
import { ChatViewProvider, CHAT_VIEW_ID } from './chatView';
import { COMMANDS, pickSession, registerCommands, CommandContext } from './commands';
import { getInterpreter, initializePython, onDidChangePythonInterpreter } from './common/python';
import { registerLogger, traceError, traceInfo, traceLog, traceWarn } from './common/logging';
import { restartServer, SERVER_NAME } from './common/server';
import { checkIfConfigurationChanged, getProjectRoot, getWorkspaceSettings } from './common/settings';
import { DIFF_SCHEME, DiffDocuments } from './diffDocuments';
import { PROPOSAL_SCHEME, ProposalDocuments } from './proposalDocuments';
import { SessionClient } from './protocol/sessionClient';
import { SERVER_COMMANDS } from './protocol/types';
import { StatusBar } from './statusBar';

let lsClient: LanguageClient | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const outputChannel = vscode.window.createOutputChannel(SERVER_NAME, { log: true });
  context.subscriptions.push(outputChannel, registerLogger(outputChannel));
  const root = getProjectRoot();
  const rootPath = root?.uri.fsPath ?? null;
  const settings = getWorkspaceSettings(root);
  const log = { info: traceInfo, warn: traceWarn, error: traceError };
  const diffs = new DiffDocuments();
  const proposals = new ProposalDocuments(diffs);
  context.subscriptions.push(vscode.workspace.registerTextDocumentContentProvider(DIFF_SCHEME, diffs),
    vscode.workspace.registerFileSystemProvider(PROPOSAL_SCHEME, proposals, { isCaseSensitive: true }));
  const sessions = new SessionClient({ cwd: rootPath, mode: settings.mode, log: (level, m) => log[level](m), proposals });

  let ctx: CommandContext;
  const view = new ChatViewProvider(context.extensionUri, sessions, {
    openDiff: (diff, label) => diffs.open(diff, label),
    editProposal: (requestId, diff) => proposals.open(requestId, diff),
    openLocation: async (file, line) => {
      const at = line ? new vscode.Position(Math.max(0, line - 1), 0) : undefined;
      await vscode.window.showTextDocument(vscode.Uri.file(file), at ? { selection: new vscode.Range(at, at) } : {});
    },
    pickSession: () => pickSession(ctx),
    showError: (message) => void vscode.window.showErrorMessage(`Composer: ${message}`),
  }, rootPath);
  context.subscriptions.push(view, vscode.window.registerWebviewViewProvider(CHAT_VIEW_ID, view,
    { webviewOptions: { retainContextWhenHidden: true } }));

  const status = new StatusBar(`${CHAT_VIEW_ID}.focus`);
  context.subscriptions.push(status, sessions.onDidChange((state) => status.update(state)));
  status.update(sessions.state);

  // The server's own commands, run by its code action ("Ask Composer to fix this"), start turns in
  // sessions the chat has not seen: show them in the chat while they run.
  const middleware: Middleware = {
    executeCommand: async (command, args, next) => {
      if (command !== SERVER_COMMANDS.fixDiagnostic && command !== SERVER_COMMANDS.prompt) return next(command, args);
      const label = command === SERVER_COMMANDS.fixDiagnostic ? `Fix: ${args?.[1]?.message ?? 'a problem'}` : String(args?.[0] ?? '');
      void view.reveal();
      return sessions.commandTurn(label, async () => next(command, args));
    },
  };

  // Each server says which sandbox level its commands run with; the status bar shows it.
  const attach = (client: LanguageClient): void => {
    sessions.attach(client);
    void sessions.refreshIsolation();
  };

  let starting: Promise<void> = Promise.resolve();
  const runServer = (): Promise<void> => {
    starting = starting.then(async () => {
      if (!root) {
        sessions.detach('stopped', 'open a folder: Composer works in the first workspace folder');
        return;
      }
      const current = getWorkspaceSettings(root);
      const interpreter = await getInterpreter(current.interpreter, root.uri);
      sessions.detach('starting');
      lsClient = await restartServer(current, interpreter, root, outputChannel, middleware, {
        onState: (state, client) => {
          if (state === State.Running) attach(client);
          else if (state === State.Starting) sessions.detach('starting');
          else if (client === lsClient) sessions.detach('stopped', 'the server stopped (see the Composer output)');
        },
        onStartFailed: (message) => sessions.detach('failed', message),
      }, lsClient);
      if (lsClient && lsClient.state === State.Running && !sessions.connected) attach(lsClient);
    }).catch((err) => traceError('Could not start composer-lsp:', err));
    return starting;
  };

  ctx = {
    sessions,
    client: () => lsClient,
    reveal: () => view.reveal(),
    restart: runServer,
    showLogs: () => outputChannel.show(),
    root: rootPath,
  };
  context.subscriptions.push(...registerCommands(ctx));
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (checkIfConfigurationChanged(e)) {
        traceLog(`Settings changed: restarting ${SERVER_NAME}`);
        await runServer();
      }
    }),
    onDidChangePythonInterpreter(async () => {
      if (!getWorkspaceSettings(root).interpreter.length) await runServer();
    }),
  );
  setImmediate(() => void initializePython(context.subscriptions));
  traceInfo(`${SERVER_NAME} activated (${COMMANDS.newChat} opens a chat)`);
  await runServer();
}

export async function deactivate(): Promise<void> {
  if (lsClient) await lsClient.stop();
}
