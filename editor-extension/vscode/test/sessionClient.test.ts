import { describe, expect, it } from 'vitest';
import { currentSession, pendingPermissions, ReviewItem, ToolItem } from '../src/protocol/chatState';
import { ProposalEditor, SessionClient } from '../src/protocol/sessionClient';
import {
  CHECKPOINT, chunk, DIFF, FakeConnection, HUNK_0, HUNK_1, MODES, permissionParams, revisablePermissionParams, TURN_CHANGES, WEAK,
} from './support/fakeConnection';

function setUp(responders: Record<string, (p: any) => unknown> = {}, mode: 'agent' | 'review' = 'agent') {
  const conn = new FakeConnection({
    'session/new': () => ({ sessionId: 's1', modes: MODES }),
    'session/set_mode': () => ({}),
    'session/prompt': () => ({ stopReason: 'end_turn' }),
    ...responders,
  });
  const client = new SessionClient({ cwd: '/ws', mode });
  client.attach(conn);
  return { conn, client };
}

describe('the session client', () => {
  it('creates the session on the first prompt and folds the streamed updates in', async () => {
    const { conn, client } = setUp({
      'session/prompt': (p) => {
        conn.notify('session/update', { sessionId: p.sessionId, update: chunk('Hel') });
        conn.notify('session/update', { sessionId: p.sessionId, update: chunk('lo.') });
        return { stopReason: 'end_turn' };
      },
    });
    const result = await client.prompt('hi');
    expect(result.stopReason).toBe('end_turn');
    expect(conn.sent.map((r) => r.method)).toEqual(['session/new', 'session/prompt']);
    expect(conn.sent[0].params).toEqual({ cwd: '/ws', mcpServers: [] });
    expect(conn.sent[1].params).toEqual({ sessionId: 's1', prompt: [{ type: 'text', text: 'hi' }] });
    const s = currentSession(client.state)!;
    expect(s.items.map((i) => (i.type === 'message' ? [i.role, i.text] : i.type))).toEqual([['user', 'hi'], ['agent', 'Hello.']]);
    expect(s.running).toBe(false);
  });

  it('puts a new session in the chosen mode', async () => {
    const { conn, client } = setUp({}, 'review');
    await client.newSession();
    expect(conn.sent[1]).toEqual({ method: 'session/set_mode', params: { sessionId: 's1', modeId: 'review' } });
    expect(currentSession(client.state)!.mode).toBe('review');
  });

  it('holds a permission question until the person answers it, then replies with the option', async () => {
    const { conn, client } = setUp();
    await client.newSession();
    const answer = conn.ask('session/request_permission', permissionParams('s1'));
    const [pending] = pendingPermissions(currentSession(client.state));
    expect(pending.permission.diffs).toHaveLength(1);
    expect(client.pending()).toEqual([{ requestId: pending.permission.requestId, title: 'edit_file hello.py' }]);

    expect(client.answerPermission(pending.permission.requestId, 'allow_once')).toBe(true);
    expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' } });
    const tool = currentSession(client.state)!.items[0] as ToolItem;
    expect(tool.permission!.answer).toEqual({ optionId: 'allow_once' });
    expect(client.answerPermission(pending.permission.requestId, 'reject_once')).toBe(false); // once only
  });

  it('cancel answers the open questions "cancelled" and sends session/cancel', async () => {
    const { conn, client } = setUp();
    await client.newSession();
    const answer = conn.ask('session/request_permission', permissionParams('s1'));
    await client.cancel();
    expect(await answer).toEqual({ outcome: { outcome: 'cancelled' } });
    expect(conn.notifications).toEqual([{ method: 'session/cancel', params: { sessionId: 's1' } }]);
  });

  it('a question left open when the turn ends is answered "cancelled"', async () => {
    let asked: Promise<any> | undefined;
    const { conn, client } = setUp({
      'session/prompt': (p) => {
        asked = conn.ask('session/request_permission', permissionParams(p.sessionId));
        return { stopReason: 'end_turn' };
      },
    });
    await client.prompt('go');
    expect(await asked).toEqual({ outcome: { outcome: 'cancelled' } });
  });

  it('records a failed prompt in the chat and rethrows it', async () => {
    const { client } = setUp({ 'session/prompt': () => { throw new Error('session s1 is already answering a prompt'); } });
    await expect(client.prompt('go')).rejects.toThrow('already answering');
    expect(currentSession(client.state)).toMatchObject({ running: false, error: 'session s1 is already answering a prompt' });
  });

  it('adopts and shows the session a server command (fix this) starts', async () => {
    const { conn, client } = setUp({
      'workspace/executeCommand': (p) => {
        expect(p.command).toBe('composer.fixDiagnostic');
        conn.notify('session/update', { sessionId: 'fix1', update: chunk('Fixed.') });
        expect(currentSession(client.state)).toMatchObject({ id: 'fix1', running: true });
        return { sessionId: 'fix1', stopReason: 'end_turn' };
      },
    });
    const diagnostic = { range: { start: { line: 0, character: 0 }, end: { line: 0, character: 1 } }, message: 'bad' };
    const result = await client.fixDiagnostic('file:///ws/a.py', diagnostic);
    expect(result.sessionId).toBe('fix1');
    expect(conn.sent[0].params.arguments).toEqual(['file:///ws/a.py', diagnostic]);
    const s = currentSession(client.state)!;
    expect(s.items.map((i) => (i.type === 'message' ? i.text : i.type))).toEqual(['Fix: bad', 'Fixed.']);
    expect(s.running).toBe(false);
    expect(client.state.commandTurns).toBe(0);
  });

  it('on a new connection, reloads the current session before prompting it again', async () => {
    const { client } = setUp();
    await client.prompt('first');
    const again = new FakeConnection({
      'session/load': (p) => {
        again.notify('session/update', { sessionId: p.sessionId, update: chunk('first', 'user_message_chunk') });
        return { modes: MODES };
      },
      'session/prompt': () => ({ stopReason: 'end_turn' }),
    });
    client.detach('stopped');
    expect(currentSession(client.state)!.attached).toBe(false);
    client.attach(again);
    await client.prompt('second');
    expect(again.sent.map((r) => r.method)).toEqual(['session/load', 'session/prompt']);
    expect(again.sent[0].params).toEqual({ sessionId: 's1', cwd: '/ws', mcpServers: [] });
    const texts = currentSession(client.state)!.items.map((i) => (i.type === 'message' ? i.text : i.type));
    expect(texts).toEqual(['first', 'second']); // rebuilt from the replay, not doubled
  });

  it('on a new connection, reloads the session before undoing its last turn', async () => {
    const { client } = setUp();
    await client.prompt('first');
    const again = new FakeConnection({
      'session/load': () => ({ modes: MODES }),
      'composer/rewind': () => ({ checkpointId: 'c1', buffers: { reverted: ['a.py'], refused: {} } }),
    });
    client.detach('stopped');
    client.attach(again);
    expect((await client.rewind()).buffers).toEqual({ reverted: ['a.py'], refused: {} });
    expect(again.sent.map((r) => r.method)).toEqual(['session/load', 'composer/rewind']);
    expect(currentSession(client.state)!.attached).toBe(true);
  });

  it('an undo and a prompt sent while the session reloads wait for the one load', async () => {
    const { client } = setUp();
    await client.prompt('first');
    let replied!: () => void;
    const again = new FakeConnection({
      'session/load': () => new Promise((resolve) => { replied = () => resolve({ modes: MODES }); }),
      'composer/rewind': () => ({ checkpointId: 'c1' }),
      'session/prompt': () => ({ stopReason: 'end_turn' }),
    });
    client.detach('stopped');
    client.attach(again);
    const undone = client.rewind();
    const prompted = client.prompt('second');
    await new Promise((r) => setTimeout(r, 0));
    expect(again.sent.map((r) => r.method)).toEqual(['session/load']); // nothing before the load answers
    replied();
    await Promise.all([undone, prompted]);
    expect(again.sent.map((r) => r.method).sort()).toEqual(['composer/rewind', 'session/load', 'session/prompt']);
  });

  it('detaching answers waiting questions and stops listening', async () => {
    const { conn, client } = setUp();
    await client.newSession();
    const answer = conn.ask('session/request_permission', permissionParams('s1'));
    client.detach('stopped', 'bye');
    expect(await answer).toEqual({ outcome: { outcome: 'cancelled' } });
    expect(conn.handled).toEqual([]);
    expect(client.state.server).toEqual({ status: 'stopped', message: 'bye' });
    await expect(client.prompt('x')).rejects.toThrow('not connected');
  });

  it('sets the mode of the current session, and of new chats', async () => {
    const { conn, client } = setUp();
    await client.setMode('review'); // no session yet: only the draft
    expect(conn.sent).toEqual([]);
    expect(client.state.draftMode).toBe('review');
    await client.newSession();
    await client.setMode('agent');
    expect(conn.sent.filter((r) => r.method === 'session/set_mode').map((r) => r.params.modeId)).toEqual(['review', 'agent']);
    expect(currentSession(client.state)!.mode).toBe('agent');
    expect(client.state.draftMode).toBe('agent');
  });

  it('rewinds and lists through the server', async () => {
    const { conn, client } = setUp({
      'composer/rewind': () => ({ checkpointId: 'c1' }),
      'session/list': () => ({ sessions: [{ sessionId: 's1', title: 'hi' }] }),
    });
    await client.newSession();
    expect(await client.rewind()).toEqual({ checkpointId: 'c1' });
    expect(await client.listSessions()).toEqual([{ sessionId: 's1', title: 'hi' }]);
    expect(conn.sent.at(-1)!.params).toEqual({ cwd: '/ws' });
  });

  it('ignores malformed server messages', async () => {
    const { conn, client } = setUp();
    conn.notify('session/update', { update: chunk('no session id') });
    conn.notify('session/update', null);
    expect(await conn.ask('session/request_permission', {})).toEqual({ outcome: { outcome: 'cancelled' } });
    expect(client.state.sessions).toEqual({});
  });
});

describe('the session client when reloading fails', () => {
  it('keeps the transcript when the server is down or the load fails', async () => {
    const conn = new FakeConnection({
      'session/new': () => ({ sessionId: 's1', modes: MODES }),
      'session/prompt': () => ({ stopReason: 'end_turn' }),
    });
    const client = new SessionClient({ cwd: '/ws' });
    client.attach(conn);
    await client.prompt('first');
    client.detach('stopped');
    await expect(client.prompt('again')).rejects.toThrow('not connected');
    expect(currentSession(client.state)!.items).toHaveLength(1);

    client.attach(new FakeConnection({ 'session/load': () => { throw new Error('no log for s1'); } }));
    await expect(client.prompt('again')).rejects.toThrow('no log');
    const texts = currentSession(client.state)!.items.map((i) => (i.type === 'notice' ? i.text : i.type));
    expect(texts).toEqual(['message', 'Could not open the session: no log for s1']);
  });
});

describe('the session client creating a session', () => {
  it('asks the server for its sandbox level, and forgets it when the server goes', async () => {
    const logged: string[] = [];
    const conn = new FakeConnection({ 'composer/isolation': () => WEAK });
    const client = new SessionClient({ cwd: '/ws', log: (level, m) => logged.push(`${level}: ${m}`) });
    client.attach(conn);
    expect(client.state.isolation).toBeNull();
    await client.refreshIsolation();
    expect(conn.sent).toEqual([{ method: 'composer/isolation', params: {} }]);
    expect(client.state.isolation).toEqual(WEAK);
    expect(logged).toEqual([`warn: ${WEAK.message}`]);
    client.detach();
    expect(client.state.isolation).toBeNull();
    client.attach(new FakeConnection({}));  // a server without composer/isolation
    await client.refreshIsolation();
    expect(client.state.isolation).toBeNull();
    expect(logged[1]).toContain('composer/isolation: no responder');
  });

  it('creates one session for prompts sent while it is being created', async () => {
    const { conn, client } = setUp();
    await Promise.allSettled([client.prompt('one'), client.prompt('two')]);
    expect(conn.sent.filter((r) => r.method === 'session/new')).toHaveLength(1);
  });
});

/** The diff editor as the session client sees it: what the person left in each proposal. */
class FakeProposals implements ProposalEditor {
  texts = new Map<number, string>();
  discarded: number[] = [];
  editedText(requestId: number): string | null {
    return this.texts.get(requestId) ?? null;
  }
  discard(requestId: number): void {
    this.discarded.push(requestId);
  }
}

describe('the session client with revisable questions', () => {
  async function asked(params: unknown) {
    const proposals = new FakeProposals();
    const conn = new FakeConnection({ 'session/new': () => ({ sessionId: 's1', modes: MODES }) });
    const client = new SessionClient({ cwd: '/ws', proposals });
    client.attach(conn);
    await client.newSession();
    const answer = conn.ask('session/request_permission', params);
    const [pending] = pendingPermissions(currentSession(client.state));
    return { client, proposals, answer, requestId: pending.permission.requestId, permission: pending.permission };
  }

  it('allows an edited proposal with the person\'s whole text as revisedText, then closes it', async () => {
    const { client, proposals, answer, requestId, permission } = await asked(revisablePermissionParams('s1'));
    expect(permission.revisable).toBe(true);
    proposals.texts.set(requestId, "print('goodbye, world')\n");
    client.answerPermission(requestId, 'allow_once');
    expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' },
      _meta: { composer: { revisedText: "print('goodbye, world')\n" } } });
    expect(proposals.discarded).toEqual([requestId]);
    const tool = currentSession(client.state)!.items[0] as ToolItem;
    expect(tool.permission!.answer).toEqual({ optionId: 'allow_once', revised: true });
  });

  it('sends the revision with "allow always" too', async () => {
    const { client, proposals, answer, requestId } = await asked(revisablePermissionParams('s1'));
    proposals.texts.set(requestId, 'mine\n');
    client.answerPermission(requestId, 'allow_always');
    expect((await answer)._meta).toEqual({ composer: { revisedText: 'mine\n' } });
  });

  it('allows an unedited proposal, or one edited back to the model\'s text, without _meta', async () => {
    const untouched = await asked(revisablePermissionParams('s1'));
    untouched.client.answerPermission(untouched.requestId, 'allow_once');
    expect(await untouched.answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' } });
    expect(untouched.proposals.discarded).toEqual([untouched.requestId]);

    const same = await asked(revisablePermissionParams('s1'));
    same.proposals.texts.set(same.requestId, DIFF.newText);
    same.client.answerPermission(same.requestId, 'allow_once');
    expect(await same.answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' } });
  });

  it('never sends the revision with a reject, a dismissal or a cancel, and closes the proposal each time', async () => {
    for (const settle of [
      (c: SessionClient, id: number) => c.answerPermission(id, 'reject_once'),
      (c: SessionClient, id: number) => c.answerPermission(id, 'reject_always'),
      (c: SessionClient, id: number) => c.answerPermission(id, null),
      (c: SessionClient) => void c.cancel(),
    ]) {
      const { client, proposals, answer, requestId } = await asked(revisablePermissionParams('s1'));
      proposals.texts.set(requestId, 'edited, then rejected\n');
      settle(client, requestId);
      const response = await answer;
      expect(response).not.toHaveProperty('_meta');
      expect(response.outcome.optionId ?? response.outcome.outcome).not.toMatch(/^allow/);
      expect(proposals.discarded).toEqual([requestId]);
    }
  });

  it('never offers editing, nor sends a revision, for a question that is not revisable', async () => {
    const twoDiffs = revisablePermissionParams('s1');
    twoDiffs.toolCall.content = [DIFF, { ...DIFF, path: '/ws/other.py' }];
    for (const params of [permissionParams('s1'), twoDiffs]) {
      const { client, proposals, answer, requestId, permission } = await asked(params);
      expect(permission.revisable).toBe(false);
      proposals.texts.set(requestId, 'typed somewhere\n');
      client.answerPermission(requestId, 'allow_once');
      expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' } });
      expect(proposals.discarded).toEqual([]);
    }
  });

  it('still answers, as proposed, when the proposal cannot be read', async () => {
    const { client, proposals, answer, requestId } = await asked(revisablePermissionParams('s1'));
    proposals.editedText = () => { throw new Error('the document is gone'); };
    client.answerPermission(requestId, 'allow_once');
    expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' } });
  });
});

describe('reviewing a turn\'s changes hunk by hunk', () => {
  /** A session whose turn changed config.py (HUNK_0, HUNK_1) and logo.png; `listing` is what
   * composer/turnChanges answers next. */
  async function changed(responders: Record<string, (p: any) => unknown> = {}) {
    const server = { listing: TURN_CHANGES as unknown, answer: { undone: [], refused: {}, backupCheckpointId: 'b1' } as unknown };
    const { conn, client } = setUp({
      'session/prompt': () => ({ stopReason: 'end_turn', _meta: { composer: { steps: 2, toolCalls: 2, checkpoint: CHECKPOINT } } }),
      'composer/turnChanges': () => server.listing,
      'composer/reviewHunks': () => server.answer,
      ...responders,
    });
    await client.prompt('change the config');
    const review = () => currentSession(client.state)!.items.find((i): i is ReviewItem => i.type === 'review')!;
    const methods = () => conn.sent.map((r) => r.method).filter((m) => m.startsWith('composer/'));
    return { conn, client, server, review, methods };
  }

  it('offers a review after a turn that changed files, and none after one that changed nothing', async () => {
    const { review } = await changed();
    expect(review()).toMatchObject({ checkpointId: CHECKPOINT, phase: 'closed' });
    const { client } = setUp({ 'session/prompt': () => ({ stopReason: 'end_turn', _meta: { composer: { checkpoint: null } } }) });
    await client.prompt('just talk');
    expect(currentSession(client.state)!.items.map((i) => i.type)).toEqual(['message']);
  });

  it('lists the turn\'s changes since its checkpoint, binary files without hunks', async () => {
    const { conn, client, review } = await changed();
    await client.reviewChanges(review().id);
    expect(conn.sent.at(-1)).toEqual({ method: 'composer/turnChanges', params: { sessionId: 's1', checkpointId: CHECKPOINT } });
    expect(review()).toMatchObject({ phase: 'open', busy: false, error: null });
    expect(review().files.map((f) => [f.path, f.binary, f.hunks.map((h) => h.digest)])).toEqual([['config.py', false, ['d0', 'd1']], ['logo.png', true, []]]);
  });

  it('undoes one hunk by its index and digest, then lists again (the indices shift)', async () => {
    const { conn, client, server, review, methods } = await changed();
    await client.reviewChanges(review().id);
    server.listing = { checkpointId: CHECKPOINT, files: [{ path: 'config.py', status: 'modified', binary: false, hunks: [HUNK_0] }] };
    await client.reviewHunks(review().id, 'undo', [{ path: 'config.py', index: 1 }]);
    expect(methods()).toEqual(['composer/turnChanges', 'composer/reviewHunks', 'composer/turnChanges']);
    expect(conn.sent.find((r) => r.method === 'composer/reviewHunks')!.params).toEqual(
      { sessionId: 's1', checkpointId: CHECKPOINT, undo: [{ path: 'config.py', index: 1, digest: 'd1' }] });
    expect(review().files.map((f) => f.hunks.map((h) => h.digest))).toEqual([['d0']]);
  });

  it('keeps a hunk without listing again; it stays kept when an undo above it shifts its index', async () => {
    const { conn, client, server, review, methods } = await changed();
    await client.reviewChanges(review().id);
    await client.reviewHunks(review().id, 'keep', [{ path: 'config.py', index: 1 }]);
    expect(conn.sent.at(-1)!.params).toEqual({ sessionId: 's1', checkpointId: CHECKPOINT, keep: [{ path: 'config.py', index: 1, digest: 'd1' }] });
    expect(methods()).toEqual(['composer/turnChanges', 'composer/reviewHunks']);
    expect(review().files[0].hunks.map((h) => h.kept)).toEqual([false, true]);

    server.listing = { checkpointId: CHECKPOINT, files: [{ path: 'config.py', status: 'modified', binary: false,
      hunks: [{ ...HUNK_1, index: 0, digest: 'd1-shifted' }] }] };
    await client.reviewHunks(review().id, 'undo', [{ path: 'config.py', index: 0 }]);
    expect(conn.sent.find((r) => r.params?.undo)!.params.undo).toEqual([{ path: 'config.py', index: 0, digest: 'd0' }]);
    expect(review().files[0].hunks).toMatchObject([{ index: 0, digest: 'd1-shifted', kept: true }]);
  });

  it('Keep all sends every hunk not kept yet', async () => {
    const { conn, client, review } = await changed();
    await client.reviewChanges(review().id);
    await client.reviewHunks(review().id, 'keep', [{ path: 'config.py', index: 0 }]);
    await client.keepAll(review().id);
    expect(conn.sent.at(-1)!.params.keep).toEqual([{ path: 'config.py', index: 1, digest: 'd1' }]);
    expect(review().files[0].hunks.every((h) => h.kept)).toBe(true);
  });

  it('shows why the server left a file untouched, listed again', async () => {
    const { client, server, review, methods } = await changed();
    await client.reviewChanges(review().id);
    server.answer = { undone: [], refused: { 'config.py': 'config.py changed since it was listed: list them again' }, backupCheckpointId: null };
    await client.reviewHunks(review().id, 'keep', [{ path: 'config.py', index: 0 }]);
    expect(methods()).toEqual(['composer/turnChanges', 'composer/reviewHunks', 'composer/turnChanges']);
    expect(review().files[0]).toMatchObject({ refused: 'config.py changed since it was listed: list them again',
      hunks: [{ kept: false }, { kept: false }] });
  });

  /** composer/reviewHunks answers `server.answer` once `open()` is called. */
  async function held() {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => { open = resolve; });
    const changes = await changed({ 'composer/reviewHunks': () => gate.then(() => changes.server.answer) });
    await changes.client.reviewChanges(changes.review().id);
    const inSession = () => changes.client.state.sessions.s1.items.find((i): i is ReviewItem => i.type === 'review')!;
    return { ...changes, open, inSession };
  }

  it('an undo answered after the person switched chats lists again in its own session', async () => {
    const { client, server, review, methods, open, inSession } = await held();
    const undo = client.reviewHunks(review().id, 'undo', [{ path: 'config.py', index: 1 }]);
    client.newChat();
    server.listing = { checkpointId: CHECKPOINT, files: [{ path: 'config.py', status: 'modified', binary: false, hunks: [HUNK_0] }] };
    open();
    await undo;
    expect(methods()).toEqual(['composer/turnChanges', 'composer/reviewHunks', 'composer/turnChanges']);
    expect(inSession()).toMatchObject({ busy: false, error: null });
    expect(inSession().files.map((f) => f.hunks.map((h) => h.digest))).toEqual([['d0']]);
  });

  it('an undo answered after its session\'s review went stale says so there, listing nothing', async () => {
    const { client, review, methods, open, inSession } = await held();
    const undo = client.reviewHunks(review().id, 'undo', [{ path: 'config.py', index: 1 }]);
    client.newChat();
    client.dispatch({ type: 'reviewStale', sessionId: 's1' });
    open();
    await expect(undo).rejects.toThrow('earlier turn');
    expect(methods()).toEqual(['composer/turnChanges', 'composer/reviewHunks']);
    expect(inSession()).toMatchObject({ busy: false, stale: true, error: expect.stringContaining('earlier turn') });
  });

  it('refuses a second request about the changes while one is under way, leaving it be', async () => {
    const { client, review, methods, open } = await held();
    const itemId = review().id;
    const keep = client.reviewHunks(itemId, 'keep', [{ path: 'config.py', index: 1 }]);
    await expect(client.reviewHunks(itemId, 'undo', [{ path: 'config.py', index: 1 }])).rejects.toThrow('under way');
    await expect(client.keepAll(itemId)).rejects.toThrow('under way');
    await expect(client.reviewChanges(itemId)).rejects.toThrow('under way');
    expect(review()).toMatchObject({ busy: true, error: null });
    open();
    await keep;
    expect(methods()).toEqual(['composer/turnChanges', 'composer/reviewHunks']);
    expect(review()).toMatchObject({ busy: false, error: null });
    expect(review().files[0].hunks.map((h) => h.kept)).toEqual([false, true]);
  });

  it('marks kept only the picks the server says it kept', async () => {
    const { client, server, review } = await changed();
    await client.reviewChanges(review().id);
    server.answer = { undone: [], kept: [{ path: 'config.py', index: 0 }], refused: {}, backupCheckpointId: null };
    await client.keepAll(review().id);
    expect(review().files[0].hunks.map((h) => h.kept)).toEqual([true, false]);
  });

  it('shows a failed listing on the review, and refuses an earlier turn\'s review', async () => {
    const { client, review } = await changed({ 'composer/turnChanges': () => { throw new Error('a turn is running'); } });
    await expect(client.reviewChanges(review().id)).rejects.toThrow('a turn is running');
    expect(review()).toMatchObject({ phase: 'closed', busy: false, error: 'a turn is running' });
    const first = review().id;
    await client.prompt('again');
    await expect(client.reviewChanges(first)).rejects.toThrow('earlier turn');
    await expect(client.reviewChanges('nope')).rejects.toThrow('no changes to review');
  });

  it('after a server restart, a listing is not reviewed against the new server', async () => {
    const { client, review } = await changed();
    client.detach('stopped');
    const again = new FakeConnection({ 'session/load': () => ({ modes: MODES }) });
    client.attach(again);
    await expect(client.reviewChanges(review().id)).rejects.toThrow('The server restarted');
    await expect(client.reviewHunks(review().id, 'undo', [{ path: 'a.py', index: 1 }])).rejects.toThrow();
    expect(again.sent).toEqual([]);
  });

  it('an undone turn (composer/rewind) leaves nothing to review', async () => {
    const { client, review } = await changed({ 'composer/rewind': () => ({ checkpointId: CHECKPOINT }) });
    await client.rewind();
    expect(review().stale).toBe(true);
  });

  it('asks the server to forget the turn when told to, and says so', async () => {
    const asked: unknown[] = [];
    const { client } = await changed({ 'composer/rewind': (params: unknown) => {
      asked.push(params);
      return { checkpointId: CHECKPOINT, forgotTurn: true };
    } });
    await client.rewind(undefined, true);
    expect(asked).toEqual([{ sessionId: expect.any(String), conversation: true }]);
    const notes = client.state.sessions[client.state.currentId!].items.filter((i: any) => i.type === 'notice');
    expect(notes.at(-1)).toMatchObject({ text: expect.stringContaining('Composer forgot it') });
  });

  it('says a turn that changed no file was only forgotten', async () => {
    const { client } = await changed({ 'composer/rewind': () => ({ checkpointId: null, forgotTurn: true,
      changes: { added: [], modified: [], deleted: [] }, buffers: { reverted: [], refused: {} } }) });
    await client.rewind(undefined, true);
    const notes = client.state.sessions[client.state.currentId!].items.filter((i: any) => i.type === 'notice');
    expect(notes.at(-1)).toMatchObject({ text: expect.stringMatching(/^The last turn changed no file; Composer forgot it/) });
  });

  it('says which open editors a rewind did not put back, and why', async () => {
    const { client } = await changed({ 'composer/rewind': () => ({ checkpointId: CHECKPOINT,
      buffers: { reverted: ['a.py'], refused: { 'b.py': 'the editor refused the edit to b.py' } } }) });
    await client.rewind();
    const notes = client.state.sessions[client.state.currentId!].items.filter((i: any) => i.type === 'notice');
    expect(notes.at(-1)).toMatchObject({ level: 'error', text: expect.stringContaining('b.py (the editor refused') });
  });
});
