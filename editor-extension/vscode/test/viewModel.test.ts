import { describe, expect, it } from 'vitest';
import { ChatState, initialState, reduce } from '../src/protocol/chatState';
import { findDiff, header, reviewView, statusOf, ViewSync } from '../src/protocol/viewModel';
import {
  chunk, DIFF, MODES, permissionParams, revisablePermissionParams, terminalPermissionParams, TURN_CHANGES, WEAK,
} from './support/fakeConnection';

function running(): ChatState {
  let s = reduce(initialState(), { type: 'server', status: 'running' });
  s = reduce(s, { type: 'opened', sessionId: 's', modes: MODES as any, cwd: '/ws' });
  s = reduce(s, { type: 'prompted', sessionId: 's', text: 'change it' });
  return s;
}

describe('the chat view model', () => {
  it('sends only the items that changed since the last message', () => {
    const sync = new ViewSync('/ws');
    let s = reduce(running(), { type: 'update', sessionId: 's', update: chunk('Hel') });
    const first = sync.next(s);
    expect(first.reset).toBe(true);
    expect(first.items.map((i) => i.type)).toEqual(['message', 'message']);
    s = reduce(s, { type: 'update', sessionId: 's', update: chunk('lo') });
    const second = sync.next(s);
    expect(second.reset).toBe(false);
    expect(second.order).toHaveLength(2);
    expect(second.items).toHaveLength(1);
    expect(second.items[0]).toMatchObject({ type: 'message', role: 'agent', label: 'Composer', text: 'Hello' });
    expect(sync.next(s).items).toEqual([]);
    sync.reset();
    expect(sync.next(s).items).toHaveLength(2);
  });

  it('starts over when another session is shown', () => {
    const sync = new ViewSync();
    const s = running();
    sync.next(s);
    const draft = sync.next(reduce(s, { type: 'select', sessionId: null }));
    expect(draft).toMatchObject({ reset: true, order: [], items: [] });
    expect(draft.header).toMatchObject({ title: 'New chat', sessionId: null, canSend: true });
  });

  it('shows a permission question with its diff, Accept/Reject first, then what was answered', () => {
    let s = reduce(running(), { type: 'permissionAsked', requestId: 3, params: permissionParams('s') });
    const tool = new ViewSync('/ws').next(s).items[1];
    if (tool.type !== 'tool') throw new Error('expected a tool card');
    expect(tool).toMatchObject({ title: 'edit_file hello.py', icon: '\u270E', kindLabel: 'edit', statusLabel: 'pending' });
    const p = tool.permission!;
    expect(p.state).toBe('pending');
    expect(p.reasons).toEqual(['hello.py']);
    expect(p.diffs[0]).toMatchObject({ displayPath: 'hello.py', added: 1, removed: 1 });
    expect(p.options.map((o) => [o.name, o.primary])).toEqual([
      ['Accept', true], ['Always allow', false], ['Reject', true], ['Always reject', false]]);
    expect(header(s).pendingPermissions).toBe(1);

    s = reduce(s, { type: 'permissionSettled', sessionId: 's', requestId: 3, answer: { optionId: 'allow_once' } });
    const answered = new ViewSync('/ws').next(s).items[1];
    expect(answered.type === 'tool' && answered.permission).toMatchObject({ state: 'answered', answerLabel: 'Accepted', revisable: false });
  });

  it('marks a revisable question, and says when it was accepted with the person\'s changes', () => {
    let s = reduce(running(), { type: 'permissionAsked', requestId: 3, params: revisablePermissionParams('s') });
    const tool = new ViewSync('/ws').next(s).items[1];
    expect(tool.type === 'tool' && tool.permission!.revisable).toBe(true);
    s = reduce(s, { type: 'permissionSettled', sessionId: 's', requestId: 3, answer: { optionId: 'allow_once', revised: true } });
    const answered = new ViewSync('/ws').next(s).items[1];
    expect(answered.type === 'tool' && answered.permission!.answerLabel).toBe('Accepted, with your changes');
  });

  it('shows tool output as text or diff, and a failed call\'s error', () => {
    let s = reduce(running(), { type: 'update', sessionId: 's', update: { sessionUpdate: 'tool_call', toolCallId: 'c', title: 'edit', kind: 'edit', status: 'pending', locations: [{ path: '/ws/hello.py', line: 3 }] } });
    s = reduce(s, { type: 'update', sessionId: 's', update: { sessionUpdate: 'tool_call_update', toolCallId: 'c', status: 'completed',
      content: [{ type: 'content', content: { type: 'text', text: 'Edited.' } }, DIFF] } });
    s = reduce(s, { type: 'update', sessionId: 's', update: { sessionUpdate: 'tool_call', toolCallId: 'd', title: 'bash', kind: 'execute', status: 'failed', rawOutput: { error: 'exit 1' } } });
    const [, edit, bash] = new ViewSync('/ws').next(s).items;
    if (edit.type !== 'tool' || bash.type !== 'tool') throw new Error('expected tool cards');
    expect(edit.locations).toEqual([{ path: '/ws/hello.py', line: 3, label: 'hello.py:3' }]);
    expect(edit.outputs.map((o) => o.type)).toEqual(['text', 'diff']);
    expect(findDiff(s, edit.id, 1, 'output')).toEqual(DIFF);
    expect(findDiff(s, edit.id, 0, 'output')).toBeNull();
    expect(bash).toMatchObject({ statusLabel: 'failed', error: 'exit 1', kindLabel: 'run' });
  });

  it('shows a running command\'s output open, however long, and folds a long one once it ends', () => {
    const text = Array.from({ length: 40 }, (_, i) => `line ${i}`).join('\n');
    const update = (status: string) => ({ type: 'update' as const, sessionId: 's', update: { sessionUpdate: 'tool_call_update' as const,
      toolCallId: 'c', status: status as any, content: [{ type: 'content' as const, content: { type: 'text' as const, text } }] } });
    let s = reduce(running(), { type: 'update', sessionId: 's', update: { sessionUpdate: 'tool_call', toolCallId: 'c', title: 'pytest', kind: 'execute', status: 'pending' } });
    s = reduce(s, update('in_progress'));
    const [, live] = new ViewSync('/ws').next(s).items;
    if (live.type !== 'tool') throw new Error('expected a tool card');
    expect(live.outputs[0]).toMatchObject({ type: 'text', lines: 40, open: true, live: true });
    const [, done] = new ViewSync('/ws').next(reduce(s, update('completed'))).items;
    if (done.type !== 'tool') throw new Error('expected a tool card');
    expect(done.outputs[0]).toMatchObject({ open: false, live: false });
  });

  it('offers Send when idle, Cancel while running, Undo after a turn with tool calls', () => {
    const s = running();
    expect(header(s)).toMatchObject({ running: true, canSend: false, canCancel: true, canUndo: false });
    const withTool = reduce(s, { type: 'update', sessionId: 's', update: { sessionUpdate: 'tool_call', toolCallId: 'c', title: 't', kind: 'edit', status: 'pending' } });
    const done = reduce(withTool, { type: 'turnEnded', sessionId: 's', stopReason: 'end_turn' });
    expect(header(done)).toMatchObject({ running: false, canSend: true, canCancel: false, canUndo: true });
    const usage = reduce(done, { type: 'update', sessionId: 's', update: { sessionUpdate: 'usage_update', used: 12345, size: 131072 } });
    expect(header(usage).usage).toBe('12k / 131k tokens');
    expect(header(reduce(done, { type: 'server', status: 'stopped' })).canSend).toBe(false);
  });

  it('sums the client up for the status bar: idle, working, waiting, error', () => {
    expect(statusOf(initialState()).kind).toBe('stopped');
    expect(statusOf(reduce(initialState(), { type: 'server', status: 'starting' })).kind).toBe('starting');
    const s = running();
    expect(statusOf(s).kind).toBe('working');
    expect(statusOf(reduce(s, { type: 'permissionAsked', requestId: 1, params: permissionParams('s') })).kind).toBe('waiting');
    expect(statusOf(reduce(s, { type: 'turnEnded', sessionId: 's', stopReason: 'end_turn' })).kind).toBe('idle');
    expect(statusOf(reduce(s, { type: 'turnFailed', sessionId: 's', message: 'boom' }))).toMatchObject({ kind: 'error', tooltip: 'The last turn failed: boom' });
    expect(statusOf(reduce(s, { type: 'server', status: 'failed', message: 'python not found' })).kind).toBe('error');
  });

  it('names the sandbox level, and warns when it is weaker than bubblewrap', () => {
    const idle = reduce(running(), { type: 'turnEnded', sessionId: 's', stopReason: 'end_turn' });
    const full = { ...WEAK, level: 'bwrap', weaker: false, restricted: false, message: 'sandbox isolation: bwrap (bubblewrap)' };
    expect(statusOf(reduce(idle, { type: 'isolation', status: full }))).toMatchObject({ kind: 'idle' });
    expect(statusOf(reduce(idle, { type: 'isolation', status: full })).tooltip).toContain('sandbox isolation: bwrap');
    const weak = reduce(idle, { type: 'isolation', status: WEAK });
    expect(statusOf(weak)).toMatchObject({ kind: 'unsandboxed', text: '$(warning) Composer: sandbox none' });
    expect(statusOf(weak).tooltip).toContain('Warning: sandbox isolation: none, weaker than bubblewrap');
    expect(header(weak).isolation).toEqual({ level: 'none', weaker: true, message: WEAK.message });
    const asked = reduce(weak, { type: 'permissionAsked', requestId: 2, params: permissionParams('s') });
    expect(statusOf(asked).kind).toBe('waiting'); // a question outranks the standing warning
    expect(statusOf(asked).tooltip).toContain('weaker than bubblewrap');
    const restarted = reduce(weak, { type: 'server', status: 'starting' });
    expect(restarted.isolation).toBeNull(); // the next server says its own
    expect(header(restarted).isolation).toBeNull();
  });

  it('shows a terminal question with the whole command and the sandbox warning, without "always allow"', () => {
    const s = reduce(running(), { type: 'permissionAsked', requestId: 5, params: terminalPermissionParams('s', 'make all') });
    const tool = new ViewSync('/ws').next(s).items[1];
    if (tool.type !== 'tool') throw new Error('expected a tool card');
    expect(tool.permission).toMatchObject({ details: ['$ make all'], diffs: [] });
    expect(tool.permission!.warning).toContain("sandbox isolation 'none'");
    expect(tool.permission!.options.map((o) => o.kind)).toEqual(['allow_once', 'reject_once', 'reject_always']);
    const edit = new ViewSync('/ws').next(reduce(running(), { type: 'permissionAsked', requestId: 6, params: permissionParams('s') })).items[1];
    expect(edit.type === 'tool' && edit.permission).toMatchObject({ details: [], warning: null });
  });
});

describe('the view of a turn\'s changes', () => {
  function listed(): ChatState {
    let s = reduce(running(), { type: 'turnEnded', sessionId: 's', stopReason: 'end_turn', checkpoint: 'cp1' });
    const itemId = s.sessions.s.items.at(-1)!.id;
    s = reduce(s, { type: 'reviewListed', sessionId: 's', itemId, files: [...TURN_CHANGES.files,
      { path: 'old.py', status: 'deleted', binary: false, hunks: [{ index: 0, header: '@@ -1,2 +0,0 @@', lines: ['-a', '-b'], digest: 'x' }] }] });
    return reduce(s, { type: 'reviewKept', sessionId: 's', itemId, kept: [{ path: 'config.py', index: 0 }], refused: {} });
  }

  it('puts each hunk\'s link at its first changed line on the new side, in the workspace', () => {
    const item = new ViewSync('/ws').next(listed()).items.find((i) => i.type === 'review')!;
    expect(item).toMatchObject({ type: 'review', state: 'open', busy: false, canKeepAll: true });
    if (item.type !== 'review') throw new Error('not a review');
    const [config, logo, old] = item.files;
    expect(config.absPath).toBe('/ws/config.py');
    expect(config.hunks.map((h) => [h.line, h.label, h.kept])).toEqual([
      [2, 'config.py, lines 1 to 5', true], [18, 'config.py, lines 15 to 20', false]]);
    expect(config.hunks[1].lines.slice(2, 5)).toEqual([{ op: ' ', text: 'value_16 = 16' }, { op: '-', text: 'value_17 = 17' },
      { op: '+', text: 'value_17 = 1700' }]);
    expect(logo).toMatchObject({ binary: true, hunks: [], absPath: '/ws/logo.png' });
    expect(old).toMatchObject({ absPath: null, hunks: [{ line: 1 }] }); // deleted: nothing to open
  });

  it('is stale, with nothing to keep, once the next turn starts', () => {
    const s = reduce(listed(), { type: 'prompted', sessionId: 's', text: 'more' });
    const review = s.sessions.s.items.find((i) => i.type === 'review')!;
    expect(reviewView(review as never, '/ws')).toMatchObject({ state: 'stale', canKeepAll: false });
  });
});
