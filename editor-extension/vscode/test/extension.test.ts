/* The extension itself (src/extension.ts and what it wires up: settings, server start, chat view,
 * status bar, commands, restart) activated in Node on a stub of the `vscode` API
 * (test/support/vscodeStub.ts), with a LanguageClient stand-in that runs the configured command for
 * real: composer-lsp answers, with the scripted model behind it.
 */

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import * as vscode from 'vscode';
import type { ToView, ViewItem } from '../src/protocol/view';
import { Model, PYTHON, startModel, until } from './support/composer';
import { LanguageClient } from './support/fakeLanguageClient';
import { stub } from './support/vscodeStub';

vi.mock('vscode-languageclient/node', () => import('./support/fakeLanguageClient'));

const { activate, deactivate } = await import('../src/extension');

const EDIT = { name: 'edit_file', arguments: { path: 'hello.py', old_string: 'hello', new_string: 'goodbye' } };

let tmp: string;
let workspace: string;
let model: Model;
const posted: ToView[] = [];
let fromView: (m: unknown) => Promise<void>;

/** The chat webview as VS Code would host it: records what the extension posts. */
function fakeWebviewView() {
  let receive: (m: unknown) => Promise<void> = async () => undefined;
  const view = {
    webview: {
      options: {}, html: '', cspSource: 'vscode-resource:',
      asWebviewUri: (u: vscode.Uri) => u,
      postMessage: async (m: ToView) => { posted.push(m); return true; },
      onDidReceiveMessage: (l: (m: unknown) => Promise<void>) => { receive = l; return { dispose() {} }; },
    },
    onDidDispose: () => ({ dispose() {} }),
    show: () => undefined,
    visible: true,
  };
  return { view, send: (m: unknown) => receive(m) };
}

/** The webview's picture of the chat: items by id, as the painter keeps them. */
function picture(): { items: Map<string, ViewItem>; order: string[]; last: ToView | undefined } {
  const items = new Map<string, ViewItem>();
  let order: string[] = [];
  for (const m of posted) {
    if (m.reset) items.clear();
    for (const i of m.items) items.set(i.id, i);
    order = m.order;
  }
  return { items, order, last: posted.at(-1) };
}

const shown = () => picture().order.map((id) => picture().items.get(id)!);
const agentText = () => shown().filter((i) => i.type === 'message' && i.role === 'agent').map((i) => (i as { text: string }).text);

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'composer-vscode-ext-'));
  workspace = path.join(tmp, 'ws');
  fs.mkdirSync(workspace);
  fs.writeFileSync(path.join(workspace, 'hello.py'), "print('hello')\n");
  model = await startModel([[{ text: 'Hello from composer-lsp.' }], [{ text: 'Editing.', tool_calls: [EDIT] }, { text: 'Changed it.' }],
    [{ text: 'After the restart.' }]], tmp);
  stub.reset();
  stub.folders = [{ uri: vscode.Uri.file(workspace), name: 'ws', index: 0 }];
  Object.assign(stub.settings, { 'composer.interpreter': [PYTHON], 'composer.endpoint': model.url,
    'composer.logDir': '${workspaceFolder}/../logs', 'composer.mode': 'review' });
  const context = { subscriptions: [] as { dispose(): void }[], extensionUri: vscode.Uri.file(path.resolve(__dirname, '..')) };
  await activate(context as unknown as vscode.ExtensionContext);
  const provider = stub.views.get('composer.chat');
  const { view, send } = fakeWebviewView();
  provider.resolveWebviewView(view);
  fromView = send;
  expect(view.webview.html).toContain("script-src 'nonce-");
  expect(view.webview.html).toContain('out/webview/webview/main.js');
});

afterAll(async () => {
  await deactivate();
  await model?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('the extension, activated on a stubbed VS Code', () => {
  it('starts composer-lsp with the configured interpreter, options and initializationOptions', () => {
    const [client] = LanguageClient.instances;
    const { command, args, options } = client.serverOptions.run;
    expect(command).toBe(PYTHON);
    expect(args).toEqual(['-m', 'server', '--stdio', '--workspace', workspace, '--endpoint', model.url,
      '--log-dir', `${workspace}/../logs`, '--log-level', 'WARNING']);
    expect(options.cwd).toBe(workspace);
    expect(client.clientOptions.initializationOptions).toMatchObject({ mode: 'review' });
    expect(client.state).toBe(2); // Running
    expect(stub.statusBar.at(-1)!.text).toBe('$(comment-discussion) Composer');
  });

  it('registers every command its package.json declares', () => {
    const pkg = JSON.parse(fs.readFileSync(path.resolve(__dirname, '..', 'package.json'), 'utf8'));
    for (const c of pkg.contributes.commands) expect(stub.commands.has(c.command), c.command).toBe(true);
  });

  it('answers a prompt from the chat view with streamed text, the status bar working meanwhile', async () => {
    await fromView({ type: 'ready' });
    await until(() => picture().last?.header.server.status === 'running', 5000, 'the first state');
    await fromView({ type: 'send', text: 'hi' });
    await until(() => agentText().join('') === 'Hello from composer-lsp.', 15_000, 'the answer in the view');
    expect(shown().map((i) => i.type)).toEqual(['message', 'message']);
    expect(stub.statusBar.some((s) => s.text === '$(loading~spin) Composer')).toBe(true);
    await until(() => picture().last?.header.canSend === true, 5000, 'the turn to end');
    expect(picture().last!.header.mode).toBe('review');
  });

  it('shows an edit\'s diff for review, and Accept from the view applies it', async () => {
    const turn = fromView({ type: 'send', text: 'say goodbye' });
    await until(() => shown().some((i) => i.type === 'tool' && i.permission?.state === 'pending'), 15_000, 'the question');
    const tool = shown().find((i) => i.type === 'tool')!;
    if (tool.type !== 'tool' || !tool.permission) throw new Error('no permission card');
    expect(tool.permission.diffs[0]).toMatchObject({ displayPath: 'hello.py', added: 1, removed: 1 });
    expect(stub.statusBar.at(-1)!.text).toBe('$(question) Composer');
    await fromView({ type: 'answer', requestId: tool.permission.requestId, optionId: 'allow_once' });
    await turn;
    expect(fs.readFileSync(path.join(workspace, 'hello.py'), 'utf8')).toBe("print('goodbye')\n");
    await until(() => agentText().at(-1) === 'Changed it.', 5000, 'the rest of the turn');
    const done = shown().find((i) => i.type === 'tool')!;
    expect(done.type === 'tool' && [done.status, done.permission?.answerLabel]).toEqual(['completed', 'Accepted']);
  });

  it('Composer: Restart Server starts a new server; the chat goes on in its session', async () => {
    await vscode.commands.executeCommand('composer.restartServer');
    expect(LanguageClient.instances).toHaveLength(2);
    expect(LanguageClient.instances[0].state).toBe(1); // Stopped
    await fromView({ type: 'send', text: 'still there?' });
    await until(() => agentText().at(-1) === 'After the restart.', 15_000, 'the answer after the restart');
    const users = shown().filter((i) => i.type === 'message' && i.role === 'user').map((i) => (i as { text: string }).text);
    expect(users).toEqual(['hi', 'say goodbye', 'still there?']); // reloaded from the session log
  });

  it('restarts when a server setting changes', async () => {
    stub.configListeners.fire({ affectsConfiguration: (s: string) => s === 'composer.logLevel' });
    await until(() => LanguageClient.instances.length === 3 && LanguageClient.instances[2].state === 2, 15_000, 'the restart');
  });
});
