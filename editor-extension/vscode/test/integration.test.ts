/* The extension's protocol layer against the real composer-lsp (python -m server --stdio) and the
 * scripted model endpoint: what the chat view does, minus VS Code. Run: npm test
 */

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { pathToFileURL } from 'url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ChatItem, currentSession, MessageItem, pendingPermissions, ReviewItem, ToolItem } from '../src/protocol/chatState';
import { ProposalEditor, SessionClient } from '../src/protocol/sessionClient';
import type { SessionNotification } from '../src/protocol/types';
import type { ViewReview } from '../src/protocol/view';
import { handleViewMessage, ViewHost } from '../src/protocol/viewMessages';
import { permissionView, ViewSync } from '../src/protocol/viewModel';
import { connectServer, Model, PYTHON, REPO_ROOT, ScriptReply, Server, startModel, startServer, until } from './support/composer';

const EDIT = { name: 'edit_file', arguments: { path: 'hello.py', old_string: 'hello', new_string: 'goodbye' } };
const EDIT_BACK = { name: 'edit_file', arguments: { path: 'hello.py', old_string: 'goodbye', new_string: 'farewell' } };

let tmp: string;
let workspace: string;
let running: { model?: Model; servers: Server[] };

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'composer-vscode-'));
  workspace = path.join(tmp, 'ws');
  fs.mkdirSync(workspace);
  fs.writeFileSync(path.join(workspace, 'hello.py'), "print('hello')\n");
  running = { servers: [] };
});

afterEach(async () => {
  for (const s of running.servers) await s.stop();
  await running.model?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** A model with `script`, a server, and a session client attached to it. */
async function setUp(script: ScriptReply[][], mode: 'agent' | 'review' = 'agent', proposals?: ProposalEditor) {
  running.model = await startModel(script, tmp);
  const server = await startServer(workspace, running.model.url, path.join(tmp, 'logs'));
  running.servers.push(server);
  const client = new SessionClient({ cwd: workspace, mode, proposals });
  client.attach(server.connection);
  return { client, server };
}

function items(client: SessionClient): ChatItem[] {
  return currentSession(client.state)?.items ?? [];
}

function texts(client: SessionClient, role: 'user' | 'agent'): string[] {
  return items(client).filter((i): i is MessageItem => i.type === 'message' && i.role === role).map((i) => i.text);
}

function tools(client: SessionClient): ToolItem[] {
  return items(client).filter((i): i is ToolItem => i.type === 'tool');
}

/** Answers every permission question of `client` with `optionId`; returns the questions as the chat shows them. */
function answerEach(client: SessionClient, optionId: string): ReturnType<typeof permissionView>[] {
  const seen: ReturnType<typeof permissionView>[] = [];
  const answered = new Set<number>();
  client.onDidChange((state) => {
    for (const { permission } of pendingPermissions(currentSession(state))) {
      if (answered.has(permission.requestId)) continue;
      answered.add(permission.requestId);
      seen.push(permissionView(permission, workspace));
      queueMicrotask(() => client.answerPermission(permission.requestId, optionId));
    }
  });
  return seen;
}

describe('composer-lsp through the session client', () => {
  it('streams a chat round trip into the chat state', async () => {
    const reply = 'Hello from the scripted model, one word at a time.';
    const { client } = await setUp([[{ text: reply }], [{ text: 'Second turn.' }]]);
    const chunks: SessionNotification[] = [];
    client.onUpdate((n) => { if (n.update.sessionUpdate === 'agent_message_chunk') chunks.push(n); });
    const seen: string[] = [];
    client.onDidChange((s) => { const t = currentSession(s)?.items.at(-1); if (t?.type === 'message' && t.role === 'agent') seen.push(t.text); });

    const result = await client.prompt('hi');

    expect(result.stopReason).toBe('end_turn');
    expect(chunks.length).toBeGreaterThan(3); // it streamed
    expect(new Set(seen).size).toBeGreaterThan(3); // and the chat grew as it did
    expect(texts(client, 'user')).toEqual(['hi']);
    expect(texts(client, 'agent')).toEqual([reply]);
    const session = currentSession(client.state)!;
    expect(session.running).toBe(false);
    expect(session.lastStop).toBe('end_turn');
    const view = new ViewSync(workspace).next(client.state);
    expect(view.header.canSend).toBe(true);
    expect(view.items.map((i) => i.type)).toEqual(['message', 'message']);

    const listed = await client.listSessions();
    expect(listed.map((s) => s.sessionId)).toContain(session.id);
  });

  it('reloads the session on a restarted server and goes on with it', async () => {
    const { client } = await setUp([[{ text: 'First answer.' }], [{ text: 'Second answer.' }]]);
    await client.prompt('first');
    const id = client.state.currentId!;
    await running.servers[0].stop();
    client.detach('stopped');
    expect(client.state.sessions[id].attached).toBe(false);

    const again = await startServer(workspace, running.model!.url, path.join(tmp, 'logs'));
    running.servers.push(again);
    client.attach(again.connection);
    const result = await client.prompt('second');

    expect(result.stopReason).toBe('end_turn');
    expect(client.state.currentId).toBe(id);
    expect(texts(client, 'user')).toEqual(['first', 'second']); // the first from the replay
    expect(texts(client, 'agent')).toEqual(['First answer.', 'Second answer.']);
  });

  it('asks before an edit in review mode, with the diff; accepting it changes the file', async () => {
    const file = path.join(workspace, 'hello.py');
    const { client } = await setUp([
      [{ text: 'I will change the greeting.', tool_calls: [EDIT] }, { text: 'Changed it.' }],
      [{ text: '', tool_calls: [EDIT_BACK] }, { text: 'Left it alone.' }],
    ], 'review');
    const asked: { requestId: number; oldText?: string | null; newText: string; added: number; removed: number }[] = [];
    let answer = 'allow_once';
    client.onDidChange((state) => {
      for (const { permission } of pendingPermissions(currentSession(state))) {
        if (asked.some((a) => a.requestId === permission.requestId)) continue;
        const view = permissionView(permission, workspace);
        asked.push({ requestId: permission.requestId, oldText: permission.diffs[0]?.oldText, newText: permission.diffs[0]?.newText,
          added: view.diffs[0]?.added, removed: view.diffs[0]?.removed });
        expect(view.diffs[0].displayPath).toBe('hello.py');
        expect(view.options.map((o) => o.name)).toContain('Accept');
        queueMicrotask(() => client.answerPermission(permission.requestId, answer));
      }
    });

    const first = await client.prompt('say goodbye');

    expect(first.stopReason).toBe('end_turn');
    expect(currentSession(client.state)!.mode).toBe('review');
    expect(asked).toHaveLength(1);
    expect(asked[0]).toMatchObject({ oldText: "print('hello')\n", newText: "print('goodbye')\n", added: 1, removed: 1 });
    expect(fs.readFileSync(file, 'utf8')).toBe("print('goodbye')\n");
    const [edit] = tools(client);
    expect(edit.status).toBe('completed');
    expect(edit.permission?.answer).toEqual({ optionId: 'allow_once' });
    expect(edit.content.some((c) => c.type === 'diff')).toBe(true);

    answer = 'reject_once';
    const second = await client.prompt('now farewell');

    expect(second.stopReason).toBe('end_turn');
    expect(asked).toHaveLength(2);
    expect(fs.readFileSync(file, 'utf8')).toBe("print('goodbye')\n");
    expect(tools(client)[1].status).toBe('failed');
    expect(tools(client)[1].permission?.answer).toEqual({ optionId: 'reject_once' });
  });

  it('writes the edit as the person changed it in review, and tells the model', async () => {
    const file = path.join(workspace, 'hello.py');
    const discarded: number[] = [];
    const typed: ProposalEditor = { editedText: () => "print('see you')\n", discard: (id) => discarded.push(id) };
    const { client } = await setUp([[{ text: '', tool_calls: [EDIT] }, { text: 'Kept yours.' }]], 'review', typed);
    const asked = answerEach(client, 'allow_once');

    expect((await client.prompt('say goodbye')).stopReason).toBe('end_turn');

    expect(asked).toHaveLength(1);
    expect(fs.readFileSync(file, 'utf8')).toBe("print('see you')\n");
    expect(discarded).toHaveLength(1);
    const [edit] = tools(client);
    expect(edit.permission?.answer).toEqual({ optionId: 'allow_once', revised: true });
    expect(edit.content.filter((c) => c.type === 'diff').map((c) => (c as { newText: string }).newText)).toEqual(["print('see you')\n"]);
    // what the model read: its proposal against the person's version
    expect(JSON.stringify(edit.content)).toContain("The user changed your proposed edit");
    expect(JSON.stringify(edit.content)).toContain("+print('see you')");
  });

  it('in review mode asks before every command, showing it whole; the server runs with bubblewrap', async () => {
    const made = path.join(workspace, 'made.txt');
    const { client } = await setUp([[{ text: '', tool_calls: [{ name: 'run_terminal', arguments: { command: 'echo made > made.txt' } }] },
      { text: 'Ran it.' }]], 'review');
    await client.refreshIsolation();
    expect(client.state.isolation).toMatchObject({ level: 'bwrap', weaker: false, restricted: false });
    const views = answerEach(client, 'allow_once');

    expect((await client.prompt('make a file')).stopReason).toBe('end_turn');
    expect(views).toHaveLength(1); // the default rules allow this command: review mode asked anyway
    expect(views[0]).toMatchObject({ details: ['$ echo made > made.txt'], warning: null });
    expect(views[0].options.map((o) => o.kind)).toEqual(['allow_once', 'reject_once', 'reject_always']);
    expect(fs.readFileSync(made, 'utf8')).toBe('made\n');
  });

  it('without bubblewrap asks about every command with the level, and a rejected one never runs', async () => {
    const stubs = path.join(tmp, 'stubs');
    fs.mkdirSync(stubs);
    for (const tool of ['bwrap', 'unshare']) fs.writeFileSync(path.join(stubs, tool), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
    running.model = await startModel([[{ text: '', tool_calls: [{ name: 'run_terminal', arguments: { command: 'echo made > made.txt' } }] },
      { text: 'Stopped.' }]], tmp);
    const env = { ...process.env, PATH: `${stubs}${path.delimiter}${process.env.PATH}`, XDG_CONFIG_HOME: path.join(tmp, 'xdg') };
    const server = await connectServer(PYTHON, ['-m', 'server', '--stdio', '--workspace', workspace, '--endpoint', running.model.url,
      '--log-dir', path.join(tmp, 'logs')], { cwd: REPO_ROOT, env }, workspace, { mode: 'agent' });
    running.servers.push(server);
    const client = new SessionClient({ cwd: workspace, mode: 'agent' });
    client.attach(server.connection);
    await client.refreshIsolation();
    expect(client.state.isolation).toMatchObject({ level: 'none', weaker: true, restricted: true });
    const views = answerEach(client, 'reject_once');

    expect((await client.prompt('make a file')).stopReason).toBe('end_turn');
    expect(views).toHaveLength(1); // agent mode, and the rules allow it: asked because of the sandbox
    expect(views[0].details).toEqual(['$ echo made > made.txt']);
    expect(views[0].warning).toContain("sandbox isolation 'none', weaker than bubblewrap");
    expect(views[0].options.map((o) => o.kind)).not.toContain('allow_always');
    expect(fs.existsSync(path.join(workspace, 'made.txt'))).toBe(false);
    expect(tools(client)[0].status).toBe('failed');
  });

  it('reviews a turn\'s two changes to a file hunk by hunk: undoing the second leaves only the first on disk', async () => {
    const file = path.join(workspace, 'config.py');
    const before = Array.from({ length: 20 }, (_, i) => `value_${i} = ${i}\n`).join('');
    fs.writeFileSync(file, before);
    const edits = [1, 17].map((i) => ({ name: 'edit_file',
      arguments: { path: 'config.py', old_string: `value_${i} = ${i}\n`, new_string: `value_${i} = ${i * 100}\n` } }));
    const { client } = await setUp([[{ text: '', tool_calls: edits }, { text: 'Scaled them.' }]]);
    const host: ViewHost = { resync: vi.fn(), openDiff: vi.fn(), editProposal: vi.fn(), openLocation: vi.fn(), pickSession: vi.fn(),
      showError: vi.fn() };
    // what a webview that (re)loads now is sent
    const shown = () => new ViewSync(workspace).next(client.state).items.find((i): i is ViewReview => i.type === 'review');
    const config = () => shown()!.files.find((f) => f.path === 'config.py')!;

    const result = await client.prompt('scale values 1 and 17');
    expect(result._meta?.composer?.checkpoint).toBeTruthy();
    expect(fs.readFileSync(file, 'utf8')).toBe(before.replace('value_1 = 1\n', 'value_1 = 100\n').replace('value_17 = 17\n', 'value_17 = 1700\n'));
    const itemId = items(client).find((i): i is ReviewItem => i.type === 'review')!.id;
    expect(shown()).toMatchObject({ state: 'closed' });

    await handleViewMessage({ type: 'reviewChanges', itemId }, client, host); // "Review changes"
    expect(host.showError).not.toHaveBeenCalled();
    expect(config().hunks).toHaveLength(2);
    const [first, second] = config().hunks;
    expect(first.lines).toContainEqual({ op: '+', text: 'value_1 = 100' });
    expect(second.lines).toContainEqual({ op: '+', text: 'value_17 = 1700' });
    expect([config().absPath, first.line, second.line]).toEqual([file, 2, 18]);

    await handleViewMessage({ type: 'reviewHunk', itemId, path: 'config.py', index: 1, verdict: 'undo' }, client, host);
    expect(host.showError).not.toHaveBeenCalled();
    expect(fs.readFileSync(file, 'utf8')).toBe(before.replace('value_1 = 1\n', 'value_1 = 100\n'));
    expect(config().hunks.map((h) => h.lines.filter((l) => l.op !== ' '))).toEqual([
      [{ op: '-', text: 'value_1 = 1' }, { op: '+', text: 'value_1 = 100' }]]); // listed again

    await handleViewMessage({ type: 'reviewHunk', itemId, path: 'config.py', index: 0, verdict: 'keep' }, client, host);
    expect(host.showError).not.toHaveBeenCalled();
    expect(config().hunks.map((h) => h.kept)).toEqual([true]);
    expect(config().refused).toBeNull();
    expect(shown()!.error).toBeNull();
    expect(fs.readFileSync(file, 'utf8')).toBe(before.replace('value_1 = 1\n', 'value_1 = 100\n'));
  });

  it('cancel ends the turn with stopReason cancelled', async () => {
    const words = Array.from({ length: 200 }, () => 'word').join(' ');
    const { client } = await setUp([[{ text: words, delay: 0.05 }]]);
    const turn = client.prompt('talk');
    await until(() => texts(client, 'agent').length > 0, 15_000, 'the first chunk');

    await client.cancel();
    const result = await turn;

    expect(result.stopReason).toBe('cancelled');
    expect(texts(client, 'agent')[0].split(' ').length).toBeLessThan(200);
    const notices = items(client).filter((i) => i.type === 'notice').map((i) => (i as { text: string }).text);
    expect(notices).toContain('Cancelled.');
    expect(currentSession(client.state)!.running).toBe(false);
  });

  it('cancel while a permission question waits answers it "cancelled" and edits nothing', async () => {
    const { client } = await setUp([[{ text: '', tool_calls: [EDIT] }]], 'review');
    const turn = client.prompt('say goodbye');
    await until(() => pendingPermissions(currentSession(client.state)).length === 1, 15_000, 'the permission question');

    await client.cancel();
    const result = await turn;

    expect(result.stopReason).toBe('cancelled');
    expect(tools(client)[0].permission?.answer).toEqual({ cancelled: 'cancelled' });
    expect(fs.readFileSync(path.join(workspace, 'hello.py'), 'utf8')).toBe("print('hello')\n");
  });

  it('fixes a diagnostic through composer.fixDiagnostic and shows its new session', async () => {
    const { client, server } = await setUp([[{ text: 'Fixed the paren.' }]]);
    const file = path.join(workspace, 'hello.py');
    const uri = pathToFileURL(file).toString();
    await server.connection.sendNotification('textDocument/didOpen', {
      textDocument: { uri, languageId: 'python', version: 1, text: "print('hello'\n" } });
    const diagnostic = { range: { start: { line: 0, character: 0 }, end: { line: 0, character: 5 } },
      message: "'(' was never closed", source: 'ruff', severity: 1 };

    const result = await client.fixDiagnostic(uri, diagnostic);

    expect(result.stopReason).toBe('end_turn');
    expect(client.state.currentId).toBe(result.sessionId);
    expect(texts(client, 'user')).toEqual(["Fix: '(' was never closed"]);
    expect(texts(client, 'agent')).toEqual(['Fixed the paren.']);
    expect(currentSession(client.state)!.running).toBe(false);
    expect(client.state.commandTurns).toBe(0);
    expect(server.progress.length).toBeGreaterThan(0); // the turn showed work-done progress
  });
});
