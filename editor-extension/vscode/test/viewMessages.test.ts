import { describe, expect, it, vi } from 'vitest';
import { currentSession } from '../src/protocol/chatState';
import { SessionClient } from '../src/protocol/sessionClient';
import { handleViewMessage, parseFromView, ViewHost } from '../src/protocol/viewMessages';
import { DIFF, FakeConnection, MODES, permissionParams, revisablePermissionParams } from './support/fakeConnection';

function setUp() {
  const conn = new FakeConnection({
    'session/new': () => ({ sessionId: 's1', modes: MODES }),
    'session/set_mode': () => ({}),
    'session/prompt': () => ({ stopReason: 'end_turn' }),
    'composer/rewind': () => ({ checkpointId: 'c' }),
  });
  const client = new SessionClient({ cwd: '/ws' });
  client.attach(conn);
  const host: ViewHost = { resync: vi.fn(), openDiff: vi.fn(), editProposal: vi.fn(), openLocation: vi.fn(), pickSession: vi.fn(),
    showError: vi.fn() };
  return { conn, client, host };
}

describe('the chat view\'s messages', () => {
  it('drops malformed messages', () => {
    for (const bad of [null, 'send', {}, { type: 'send' }, { type: 'send', text: 3 }, { type: 'answer', requestId: '1', optionId: 'x' },
      { type: 'openDiff', itemId: 'i1', index: 0, source: 'elsewhere' }, { type: 'setMode' }, { type: 'rm -rf' }]) {
      expect(parseFromView(bad)).toBeNull();
    }
    expect(parseFromView({ type: 'answer', requestId: 2, optionId: 'allow_once', extra: 1 })).toEqual({ type: 'answer', requestId: 2, optionId: 'allow_once' });
  });

  it('sends a prompt, trimmed, and ignores empty ones', async () => {
    const { conn, client, host } = setUp();
    await handleViewMessage({ type: 'send', text: '   ' }, client, host);
    expect(conn.sent).toEqual([]);
    await handleViewMessage({ type: 'send', text: '  fix it \n' }, client, host);
    expect(conn.sent.at(-1)!.params.prompt).toEqual([{ type: 'text', text: 'fix it' }]);
  });

  it('answers a permission question from its button', async () => {
    const { conn, client, host } = setUp();
    await client.newSession();
    const answer = conn.ask('session/request_permission', permissionParams('s1'));
    const requestId = client.pending()[0].requestId;
    await handleViewMessage({ type: 'answer', requestId, optionId: 'reject_once' }, client, host);
    expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'reject_once' } });
  });

  it('changes the mode only to one the server offers', async () => {
    const { conn, client, host } = setUp();
    await client.newSession();
    await handleViewMessage({ type: 'setMode', modeId: 'yolo' }, client, host);
    expect(conn.sent.map((r) => r.method)).toEqual(['session/new']);
    await handleViewMessage({ type: 'setMode', modeId: 'review' }, client, host);
    expect(currentSession(client.state)!.mode).toBe('review');
  });

  it('routes editor actions to the host, and shows what fails', async () => {
    const { client, host } = setUp();
    await handleViewMessage({ type: 'ready' }, client, host);
    expect(host.resync).toHaveBeenCalled();
    await handleViewMessage({ type: 'history' }, client, host);
    expect(host.pickSession).toHaveBeenCalled();
    await handleViewMessage({ type: 'openLocation', path: '/ws/a.py', line: 3 }, client, host);
    expect(host.openLocation).toHaveBeenCalledWith('/ws/a.py', 3);
    await handleViewMessage({ type: 'undo' }, client, host); // no session yet
    expect(host.showError).toHaveBeenCalledWith('There is no session to undo');
  });

  it('opens a permission question\'s diff in the editor', async () => {
    const { conn, client, host } = setUp();
    await client.newSession();
    void conn.ask('session/request_permission', permissionParams('s1'));
    const item = currentSession(client.state)!.items[0];
    await handleViewMessage({ type: 'openDiff', itemId: item.id, index: 0, source: 'permission' }, client, host);
    expect(host.openDiff).toHaveBeenCalledWith(expect.objectContaining({ path: '/ws/hello.py' }), 'proposed');
    expect(host.editProposal).not.toHaveBeenCalled(); // not revisable: read-only
  });

  it('opens a waiting revisable question\'s diff for editing, and read-only once it is answered', async () => {
    const { conn, client, host } = setUp();
    await client.newSession();
    void conn.ask('session/request_permission', revisablePermissionParams('s1'));
    const requestId = client.pending()[0].requestId;
    const item = currentSession(client.state)!.items[0];
    const open = { type: 'openDiff', itemId: item.id, index: 0, source: 'permission' };
    await handleViewMessage(open, client, host);
    expect(host.editProposal).toHaveBeenCalledWith(requestId, DIFF);
    expect(host.openDiff).not.toHaveBeenCalled();
    client.answerPermission(requestId, 'reject_once');
    await handleViewMessage(open, client, host);
    expect(host.openDiff).toHaveBeenCalledWith(DIFF, 'proposed');
    expect(host.editProposal).toHaveBeenCalledTimes(1);
  });

  it('new chat shows a draft; cancel reaches the server', async () => {
    const { conn, client, host } = setUp();
    await client.newSession();
    await handleViewMessage({ type: 'cancel' }, client, host);
    expect(conn.notifications.map((n) => n.method)).toEqual(['session/cancel']);
    await handleViewMessage({ type: 'newChat' }, client, host);
    expect(client.state.currentId).toBeNull();
  });
});
