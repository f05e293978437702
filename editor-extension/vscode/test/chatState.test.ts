import { describe, expect, it } from 'vitest';
import { ChatState, currentSession, initialState, MessageItem, pendingPermissions, reduce, ReviewItem, ToolItem } from '../src/protocol/chatState';
import type { SessionUpdate } from '../src/protocol/types';
import { chunk, HUNK_1, MODES, permissionParams, TURN_CHANGES } from './support/fakeConnection';

function fold(updates: SessionUpdate[], state: ChatState = reduce(initialState(), { type: 'opened', sessionId: 's', modes: MODES as any })): ChatState {
  return updates.reduce((s, update) => reduce(s, { type: 'update', sessionId: 's', update }), state);
}

const items = (s: ChatState) => currentSession(s)!.items;

describe('the chat state reducer', () => {
  it('joins streamed chunks of one role into one message, and starts a new one after a tool call', () => {
    const s = fold([chunk('I will '), chunk('edit.'),
      { sessionUpdate: 'tool_call', toolCallId: 'c1', title: 'edit_file a.py', kind: 'edit', status: 'pending' },
      chunk('Done'), chunk('.')]);
    expect(items(s).map((i) => i.type)).toEqual(['message', 'tool', 'message']);
    expect((items(s)[0] as MessageItem).text).toBe('I will edit.');
    expect((items(s)[2] as MessageItem).text).toBe('Done.');
  });

  it('keeps thoughts apart from the answer', () => {
    const s = fold([chunk('hmm', 'agent_thought_chunk'), chunk('Answer')]);
    expect(items(s).map((i) => (i as MessageItem).role)).toEqual(['thought', 'agent']);
  });

  it('merges tool_call_update into its card: only the fields it carries; content replaces', () => {
    const s = fold([
      { sessionUpdate: 'tool_call', toolCallId: 'c1', title: 'run tests', kind: 'execute', status: 'pending', rawInput: { cmd: 'pytest' } },
      { sessionUpdate: 'tool_call_update', toolCallId: 'c1', status: 'in_progress' },
      { sessionUpdate: 'tool_call_update', toolCallId: 'c1', status: 'completed', content: [{ type: 'content', content: { type: 'text', text: 'ok' } }] },
    ]);
    const [tool] = items(s) as ToolItem[];
    expect(tool).toMatchObject({ title: 'run tests', kind: 'execute', status: 'completed', rawInput: { cmd: 'pytest' } });
    expect(tool.content).toHaveLength(1);
  });

  it('gives a reused tool call id a new card once the old one is done', () => {
    const call = { sessionUpdate: 'tool_call' as const, toolCallId: 'call_0', title: 'read a', kind: 'read' as const, status: 'pending' as const };
    const s = fold([call, { sessionUpdate: 'tool_call_update', toolCallId: 'call_0', status: 'completed' }, { ...call, title: 'read b' }]);
    expect((items(s) as ToolItem[]).map((t) => [t.title, t.status])).toEqual([['read a', 'completed'], ['read b', 'pending']]);
  });

  it('puts a permission question on its pending tool call, with the diff and reasons', () => {
    let s = fold([{ sessionUpdate: 'tool_call', toolCallId: 'call_0', title: 'edit_file hello.py', kind: 'edit', status: 'pending' }]);
    s = reduce(s, { type: 'permissionAsked', requestId: 7, params: permissionParams('s') });
    const [tool] = items(s) as ToolItem[];
    expect(tool.permission).toMatchObject({ requestId: 7, title: 'edit_file hello.py', reasons: ['hello.py'] });
    expect(tool.permission!.diffs[0].newText).toBe("print('goodbye')\n");
    expect(pendingPermissions(currentSession(s))).toHaveLength(1);
  });

  it('makes a placeholder card for a question that comes before its tool_call, which then fills it', () => {
    let s = fold([chunk('Let me edit.')]);
    s = reduce(s, { type: 'permissionAsked', requestId: 1, params: permissionParams('s') });
    s = fold([{ sessionUpdate: 'tool_call', toolCallId: 'call_0', title: 'edit_file hello.py', kind: 'edit', status: 'pending' }], s);
    expect(items(s).map((i) => i.type)).toEqual(['message', 'tool']);
    const tool = items(s)[1] as ToolItem;
    expect(tool.placeholder).toBe(false);
    expect(tool.permission?.requestId).toBe(1);
  });

  it('settles open questions when the turn ends, and notes why it stopped', () => {
    let s = reduce(initialState(), { type: 'opened', sessionId: 's' });
    s = reduce(s, { type: 'prompted', sessionId: 's', text: 'go' });
    s = reduce(s, { type: 'permissionAsked', requestId: 1, params: permissionParams('s') });
    s = reduce(s, { type: 'turnEnded', sessionId: 's', stopReason: 'cancelled' });
    const session = currentSession(s)!;
    expect(session).toMatchObject({ running: false, lastStop: 'cancelled', title: 'go' });
    expect(pendingPermissions(session)).toHaveLength(0);
    expect((session.items[1] as ToolItem).permission!.answer).toEqual({ cancelled: 'the turn ended' });
    expect(session.items.at(-1)).toMatchObject({ type: 'notice', text: 'Cancelled.' });
  });

  it('records a failed turn as an error notice', () => {
    let s = reduce(initialState(), { type: 'opened', sessionId: 's' });
    s = reduce(s, { type: 'prompted', sessionId: 's', text: 'go' });
    s = reduce(s, { type: 'turnFailed', sessionId: 's', message: 'model unreachable' });
    expect(currentSession(s)).toMatchObject({ running: false, error: 'model unreachable' });
    expect(items(s).at(-1)).toMatchObject({ type: 'notice', level: 'error', text: 'model unreachable' });
  });

  it('detaches every session when the server stops', () => {
    let s = reduce(initialState(), { type: 'opened', sessionId: 's' });
    s = reduce(s, { type: 'prompted', sessionId: 's', text: 'go' });
    s = reduce(s, { type: 'server', status: 'stopped' });
    expect(currentSession(s)).toMatchObject({ attached: false, running: false });
  });

  it('is pure: the state it was given is unchanged, changed items get new revs, others keep theirs', () => {
    const before = fold([chunk('a'), { sessionUpdate: 'tool_call', toolCallId: 'c', title: 't', kind: 'read', status: 'pending' }, chunk('b')]);
    const snapshot = JSON.stringify(before);
    const after = fold([chunk('c')], before);
    expect(JSON.stringify(before)).toBe(snapshot);
    expect(items(after)[0]).toBe(items(before)[0]);
    expect(items(after)[2].rev).toBeGreaterThan(items(before)[2].rev);
    expect((items(after)[2] as MessageItem).text).toBe('bc');
  });

  it('follows plan, usage, mode and title updates; ignores kinds it does not know', () => {
    const s = fold([
      { sessionUpdate: 'plan', entries: [{ content: 'step 1', status: 'in_progress' }] },
      { sessionUpdate: 'usage_update', used: 1200, size: 8192 },
      { sessionUpdate: 'current_mode_update', currentModeId: 'review' },
      { sessionUpdate: 'session_info_update', title: 'Renaming' },
      { sessionUpdate: 'available_commands_update', availableCommands: [] },
    ]);
    expect(currentSession(s)).toMatchObject({ plan: [{ content: 'step 1' }], usage: { used: 1200, size: 8192 }, mode: 'review', title: 'Renaming' });
    expect(items(s)).toEqual([]);
  });

  it('keeps a new chat\'s mode apart from the sessions\'', () => {
    let s = reduce(initialState('agent'), { type: 'mode', sessionId: null, modeId: 'review' });
    expect(s.draftMode).toBe('review');
    s = reduce(s, { type: 'opened', sessionId: 'x' });
    expect(currentSession(s)!.mode).toBe('review');
  });
});

describe('a turn\'s changes to review', () => {
  const ended = (checkpoint: string | null) => reduce(reduce(fold([]), { type: 'prompted', sessionId: 's', text: 'change it' }),
    { type: 'turnEnded', sessionId: 's', stopReason: 'end_turn', checkpoint });
  const reviews = (s: ChatState) => items(s).filter((i): i is ReviewItem => i.type === 'review');

  it('follows a turn that changed files (a checkpoint), not one that changed nothing', () => {
    expect(reviews(ended(null))).toEqual([]);
    expect(reviews(ended('cp1'))).toMatchObject([{ checkpointId: 'cp1', phase: 'closed', files: [], stale: false }]);
  });

  it('goes stale when the next turn starts or the turn is undone', () => {
    const s = ended('cp1');
    expect(reviews(reduce(s, { type: 'prompted', sessionId: 's', text: 'more' }))[0].stale).toBe(true);
    expect(reviews(reduce(s, { type: 'reviewStale', sessionId: 's' }))[0].stale).toBe(true);
  });

  it('keeps a kept hunk kept when a listing shifts its index and digest, and shows refused files', () => {
    let s = ended('cp1');
    const itemId = reviews(s)[0].id;
    s = reduce(s, { type: 'reviewListed', sessionId: 's', itemId, files: TURN_CHANGES.files });
    s = reduce(s, { type: 'reviewKept', sessionId: 's', itemId, kept: [{ path: 'config.py', index: 1 }], refused: {} });
    expect(reviews(s)[0].files[0].hunks.map((h) => h.kept)).toEqual([false, true]);
    const shifted = { ...HUNK_1, index: 0, header: '@@ -15,6 +15,6 @@', digest: 'other' };
    s = reduce(s, { type: 'reviewListed', sessionId: 's', itemId, refused: { 'logo.png': 'changed since it was listed' },
      files: [{ path: 'config.py', status: 'modified', binary: false, hunks: [shifted] }] });
    const [config, logo] = reviews(s)[0].files;
    expect(config.hunks).toMatchObject([{ index: 0, digest: 'other', kept: true }]);
    expect(logo).toMatchObject({ path: 'logo.png', hunks: [], refused: 'changed since it was listed' });
  });

  it('tells two identical changes of one file apart by where they start: only the kept one stays kept', () => {
    let s = ended('cp1');
    const itemId = reviews(s)[0].id;
    const same = (index: number, at: number) => ({ index, header: `@@ -${at},3 +${at},3 @@`, digest: `d${index}`,
      lines: [' a = 1', '-debug = True', '+debug = False', ' b = 2'] });
    const listing = (...hunks: ReturnType<typeof same>[]) => [{ path: 'settings.py', status: 'modified', binary: false, hunks }];
    s = reduce(s, { type: 'reviewListed', sessionId: 's', itemId, files: listing(same(0, 3), same(1, 40), same(2, 90)) });
    s = reduce(s, { type: 'reviewKept', sessionId: 's', itemId, kept: [{ path: 'settings.py', index: 2 }], refused: {} });
    // the first is undone: the others shift up an index, their old-side starts stay
    s = reduce(s, { type: 'reviewListed', sessionId: 's', itemId, files: listing(same(0, 40), same(1, 90)) });
    expect(reviews(s)[0].files[0].hunks.map((h) => [h.header, h.kept])).toEqual([['@@ -40,3 +40,3 @@', false], ['@@ -90,3 +90,3 @@', true]]);
  });

  it('a refused keep marks nothing kept in that file', () => {
    let s = ended('cp1');
    const itemId = reviews(s)[0].id;
    s = reduce(s, { type: 'reviewListed', sessionId: 's', itemId, files: TURN_CHANGES.files });
    s = reduce(s, { type: 'reviewKept', sessionId: 's', itemId, kept: [{ path: 'config.py', index: 0 }], refused: { 'config.py': 'why' } });
    expect(reviews(s)[0].files[0]).toMatchObject({ refused: 'why', hunks: [{ kept: false }, { kept: false }] });
  });
});
