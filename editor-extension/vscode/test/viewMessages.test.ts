import { describe, expect, it, vi } from 'vitest';
import { currentSession } from '../src/protocol/chatState';
import { SessionClient } from '../src/protocol/sessionClient';
import { handleViewMessage, parseFromView, ViewHost } from '../src/protocol/viewMessages';
import {
  CHECKPOINT, DIFF, FakeConnection, MODES, permissionParams, revisablePermissionParams, TURN_CHANGES,
} from './support/fakeConnection';

function setUp() {
  const conn = new FakeConnection({
    'session/new': () => ({ sessionId: 's1', modes: MODES }),
    'session/set_mode': () => ({}),
    'session/prompt': () => ({ stopReason: 'end_turn' }),
    'composer/rewind': () => ({ checkpointId: 'c' }),
    'composer/turnChanges': () => TURN_CHANGES,
    'composer/reviewHunks': () => ({ undone: [], refused: {}, backupCheckpointId: null }),
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

describe('the review of a turn\'s changes from the chat view', () => {
  async function turned() {
    const made = setUp();
    made.conn.responders['session/prompt'] = () => ({ stopReason: 'end_turn', _meta: { composer: { checkpoint: CHECKPOINT } } });
    await made.client.prompt('change the config');
    const itemId = currentSession(made.client.state)!.items.find((i) => i.type === 'review')!.id;
    return { ...made, itemId };
  }

  it('drops malformed review messages', () => {
    for (const bad of [{ type: 'reviewChanges' }, { type: 'keepAll', itemId: 3 }, { type: 'reviewHunk', itemId: 'i1', path: 'a.py', index: 0 },
      { type: 'reviewHunk', itemId: 'i1', path: 'a.py', index: 0.5, verdict: 'undo' }, { type: 'reviewHunk', itemId: 'i1', index: 0, verdict: 'keep' }]) {
      expect(parseFromView(bad)).toBeNull();
    }
    expect(parseFromView({ type: 'reviewHunk', itemId: 'i1', path: 'a.py', index: 2, verdict: 'undo' }))
      .toEqual({ type: 'reviewHunk', itemId: 'i1', path: 'a.py', index: 2, verdict: 'undo' });
  });

  it('drops a click while a request about the card is under way, showing no error', async () => {
    const { conn, client, host, itemId } = await turned();
    await handleViewMessage({ type: 'reviewChanges', itemId }, client, host);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => { open = resolve; });
    conn.responders['composer/reviewHunks'] = () => gate.then(() => ({ undone: [], refused: {}, backupCheckpointId: null }));
    const keep = handleViewMessage({ type: 'reviewHunk', itemId, path: 'config.py', index: 1, verdict: 'keep' }, client, host);
    await handleViewMessage({ type: 'reviewHunk', itemId, path: 'config.py', index: 1, verdict: 'undo' }, client, host);
    open();
    await keep;
    expect(conn.sent.filter((r) => r.method === 'composer/reviewHunks').map((r) => Object.keys(r.params))).toEqual(
      [['sessionId', 'checkpointId', 'keep']]);
    expect(host.showError).not.toHaveBeenCalled();
  });

  it('shows a request that failed after the person switched chats on its card, not as an error', async () => {
    const { conn, client, host, itemId } = await turned();
    await handleViewMessage({ type: 'reviewChanges', itemId }, client, host);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => { open = resolve; });
    conn.responders['composer/reviewHunks'] = () => gate.then(() => { throw new Error('the file is gone'); });
    const undo = handleViewMessage({ type: 'reviewHunk', itemId, path: 'config.py', index: 1, verdict: 'undo' }, client, host);
    client.newChat();
    open();
    await undo;
    expect(client.state.sessions.s1.items.find((i) => i.id === itemId)).toMatchObject({ busy: false, error: 'the file is gone' });
    expect(host.showError).not.toHaveBeenCalled();
  });

  it('lists, undoes (listing again), keeps and keeps all', async () => {
    const { conn, client, host, itemId } = await turned();
    await handleViewMessage({ type: 'reviewChanges', itemId }, client, host);
    await handleViewMessage({ type: 'reviewHunk', itemId, path: 'config.py', index: 1, verdict: 'undo' }, client, host);
    await handleViewMessage({ type: 'reviewHunk', itemId, path: 'config.py', index: 0, verdict: 'keep' }, client, host);
    await handleViewMessage({ type: 'keepAll', itemId }, client, host);
    const review = conn.sent.filter((r) => r.method.startsWith('composer/'));
    expect(review.map((r) => r.method)).toEqual(['composer/turnChanges', 'composer/reviewHunks', 'composer/turnChanges',
      'composer/reviewHunks', 'composer/reviewHunks']);
    expect(review[1].params.undo).toEqual([{ path: 'config.py', index: 1, digest: 'd1' }]);
    expect(review[3].params.keep).toEqual([{ path: 'config.py', index: 0, digest: 'd0' }]);
    expect(review[4].params.keep).toEqual([{ path: 'config.py', index: 1, digest: 'd1' }]);
    expect(host.showError).not.toHaveBeenCalled();
  });

  it('shows a failure on the review card, not in a popup; a review that is not there in a popup', async () => {
    const { conn, client, host, itemId } = await turned();
    conn.responders['composer/turnChanges'] = () => { throw new Error('a turn is running'); };
    await handleViewMessage({ type: 'reviewChanges', itemId }, client, host);
    expect(currentSession(client.state)!.items.find((i) => i.id === itemId)).toMatchObject({ error: 'a turn is running' });
    expect(host.showError).not.toHaveBeenCalled();
    await handleViewMessage({ type: 'keepAll', itemId: 'gone' }, client, host);
    expect(host.showError).toHaveBeenCalledWith('There are no changes to review here');
  });
});
