/* The extension's commands (package.json contributes.commands). Their ids differ from the server's
 * executeCommand ids (composer.prompt, composer.fixDiagnostic, composer.rewind), which the language
 * client registers itself.
 */

import * as path from 'path';
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { currentSession } from './protocol/chatState';
import { errorMessage, SessionClient } from './protocol/sessionClient';
import type { ContentBlock, ProtocolDiagnostic } from './protocol/types';

export const COMMANDS = {
  newChat: 'composer.newChat',
  askAboutSelection: 'composer.askAboutSelection',
  fixThis: 'composer.fixThis',
  cancel: 'composer.cancel',
  restart: 'composer.restartServer',
  toggleMode: 'composer.toggleMode',
  openSession: 'composer.openSession',
  undoLastTurn: 'composer.undoLastTurn',
  showLogs: 'composer.showLogs',
} as const;

export interface CommandContext {
  sessions: SessionClient;
  client(): LanguageClient | undefined;
  reveal(): Promise<void>;
  restart(): Promise<void>;
  showLogs(): void;
  root: string | null;
}

/** Runs a turn, reporting what fails (a failed turn is already shown in the chat). */
async function turn(ctx: CommandContext, run: () => Promise<unknown>): Promise<void> {
  try {
    await run();
  } catch (err) {
    if (!currentSession(ctx.sessions.state)?.error) void vscode.window.showErrorMessage(`Composer: ${errorMessage(err)}`);
  }
}

async function askAboutSelection(ctx: CommandContext): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.selection.isEmpty) {
    void vscode.window.showInformationMessage('Composer: select some code first.');
    return;
  }
  const question = await vscode.window.showInputBox({ title: 'Ask Composer about the selection', prompt: 'Your question',
    placeHolder: 'What does this do?', ignoreFocusOut: true });
  if (!question) return;
  const doc = editor.document;
  const sel = editor.selection;
  const shown = ctx.root ? path.relative(ctx.root, doc.uri.fsPath) : doc.uri.fsPath;
  const lines = `${sel.start.line + 1}-${sel.end.line + 1}`;
  const blocks: ContentBlock[] = [
    { type: 'text', text: `${question}\n\n(The selection: ${shown}, lines ${lines}.)` },
    { type: 'resource', resource: { uri: `${doc.uri.toString()}#L${lines}`, text: doc.getText(sel), mimeType: `text/x-${doc.languageId}` } },
  ];
  await ctx.reveal();
  await turn(ctx, () => ctx.sessions.prompt(blocks));
}

async function fixThis(ctx: CommandContext, uri?: vscode.Uri, diagnostic?: vscode.Diagnostic): Promise<void> {
  const client = ctx.client();
  if (!client) {
    void vscode.window.showErrorMessage('Composer: composer-lsp is not running.');
    return;
  }
  const editor = vscode.window.activeTextEditor;
  const target = uri ?? editor?.document.uri;
  if (!target) return;
  let chosen = diagnostic;
  if (!chosen && editor) {
    const at = editor.selection.active;
    const here = vscode.languages.getDiagnostics(target).filter((d) => d.range.contains(at) || d.range.start.line === at.line);
    chosen = here.length <= 1 ? here[0] : (await vscode.window.showQuickPick(
      here.map((d) => ({ label: d.message.split('\n')[0], description: d.source, d })), { title: 'Which problem should Composer fix?' }))?.d;
    if (!here.length) void vscode.window.showInformationMessage('Composer: there is no problem (diagnostic) at the cursor.');
  }
  if (!chosen) return;
  const wire = client.code2ProtocolConverter.asDiagnostic(chosen) as ProtocolDiagnostic;
  await ctx.reveal();
  await turn(ctx, () => ctx.sessions.fixDiagnostic(target.toString(), wire));
}

async function cancel(ctx: CommandContext): Promise<void> {
  const state = ctx.sessions.state;
  const current = currentSession(state);
  const running = current?.running ? [current] : Object.values(state.sessions).filter((s) => s.running);
  for (const s of running) await ctx.sessions.cancel(s.id);
}

export async function pickSession(ctx: CommandContext): Promise<void> {
  const listed = await ctx.sessions.listSessions();
  if (!listed.length) {
    void vscode.window.showInformationMessage('Composer: no earlier sessions in this workspace.');
    return;
  }
  const picked = await vscode.window.showQuickPick(listed.map((s) => ({
    label: s.title || s.sessionId, description: s.updatedAt ?? '', detail: s.sessionId, id: s.sessionId })),
  { title: 'Open a Composer session', matchOnDetail: true });
  if (!picked) return;
  const known = ctx.sessions.state.sessions[picked.id];
  await ctx.reveal();
  if (known?.attached) ctx.sessions.select(picked.id);
  else await ctx.sessions.loadSession(picked.id);
}

async function undoLastTurn(ctx: CommandContext): Promise<void> {
  const ok = await vscode.window.showWarningMessage('Undo the last turn? Files go back to how they were before its first change.',
    { modal: true, detail: '"Undo and forget it" also takes the turn out of the conversation: Composer goes on as if it had not happened.' },
    'Undo', 'Undo and forget it');
  if (!ok) return;
  await ctx.sessions.rewind(undefined, ok === 'Undo and forget it');
}

export function registerCommands(ctx: CommandContext): vscode.Disposable[] {
  const report = (fn: (...args: any[]) => Promise<void> | void) => async (...args: any[]) => {
    try {
      await fn(...args);
    } catch (err) {
      void vscode.window.showErrorMessage(`Composer: ${errorMessage(err)}`);
    }
  };
  const table: [string, (...args: any[]) => Promise<void> | void][] = [
    [COMMANDS.newChat, async () => { ctx.sessions.newChat(); await ctx.reveal(); }],
    [COMMANDS.askAboutSelection, () => askAboutSelection(ctx)],
    [COMMANDS.fixThis, (uri?: vscode.Uri, d?: vscode.Diagnostic) => fixThis(ctx, uri instanceof vscode.Uri ? uri : undefined, d)],
    [COMMANDS.cancel, () => cancel(ctx)],
    [COMMANDS.restart, () => ctx.restart()],
    [COMMANDS.toggleMode, async () => {
      const mode = currentSession(ctx.sessions.state)?.mode ?? ctx.sessions.state.draftMode;
      await ctx.sessions.setMode(mode === 'review' ? 'agent' : 'review');
    }],
    [COMMANDS.openSession, () => pickSession(ctx)],
    [COMMANDS.undoLastTurn, () => undoLastTurn(ctx)],
    [COMMANDS.showLogs, () => ctx.showLogs()],
  ];
  return table.map(([id, fn]) => vscode.commands.registerCommand(id, report(fn)));
}
