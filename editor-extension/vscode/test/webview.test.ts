// @vitest-environment happy-dom
/* The webview painter (src/webview/main.ts) in a DOM: what it shows for the view model, and what
 * it posts back when clicked. */
import { beforeEach, describe, expect, it } from 'vitest';
import { ChatState, initialState, reduce } from '../src/protocol/chatState';
import type { FromView } from '../src/protocol/view';
import { ViewSync } from '../src/protocol/viewModel';
import { mount, renderText } from '../src/webview/main';
import {
  chunk, MODES, permissionParams, revisablePermissionParams, terminalPermissionParams, TURN_CHANGES, WEAK,
} from './support/fakeConnection';

let root: HTMLElement;
let posted: FromView[];

beforeEach(() => {
  document.body.replaceChildren();
  root = document.createElement('div');
  document.body.append(root);
  posted = [];
});

const $ = (sel: string) => root.querySelector(sel) as HTMLElement;
const $$ = (sel: string) => [...root.querySelectorAll(sel)] as HTMLElement[];

function state(params: ReturnType<typeof permissionParams> = permissionParams('s')) {
  let s = reduce(initialState(), { type: 'server', status: 'running' });
  s = reduce(s, { type: 'opened', sessionId: 's', modes: MODES as any, cwd: '/ws' });
  s = reduce(s, { type: 'prompted', sessionId: 's', text: 'say goodbye' });
  s = reduce(s, { type: 'update', sessionId: 's', update: chunk('I will edit `hello.py`.') });
  s = reduce(s, { type: 'update', sessionId: 's', update: { sessionUpdate: 'tool_call', toolCallId: 'call_0', title: 'edit_file hello.py', kind: 'edit', status: 'pending' } });
  return reduce(s, { type: 'permissionAsked', requestId: 4, params });
}

describe('the chat webview', () => {
  it('paints messages, the tool card and its permission question with the diff', () => {
    const view = mount(root, (m) => posted.push(m));
    view.receive(new ViewSync('/ws').next(state()));
    expect($$('[data-testid="message-user"] .body')[0].textContent).toBe('say goodbye');
    expect($('[data-testid="message-agent"] code').textContent).toBe('hello.py');
    expect($('[data-testid="tool"] .tool-title').textContent).toBe('edit_file hello.py');
    const diffLines = $$('[data-testid="permission"] .diff-lines .line').map((l) => l.textContent);
    expect(diffLines).toEqual(['@@ -1,1 +1,1 @@', "-print('hello')", "+print('goodbye')"]);
    expect($$('[data-testid="permission"] button[data-option]').map((b) => b.textContent)).toEqual(['Accept', 'Always allow', 'Reject', 'Always reject']);
    expect(($('[data-testid="send"]') as HTMLButtonElement).disabled).toBe(true); // a turn is running
    expect(($('[data-testid="cancel"]') as HTMLButtonElement).hidden).toBe(false);
  });

  it('posts the answer when Accept is clicked, and Open diff asks for the diff editor', () => {
    const view = mount(root, (m) => posted.push(m));
    view.receive(new ViewSync('/ws').next(state()));
    $('[data-testid="answer-allow_once"]').click();
    $('[data-testid="permission"] [data-testid="open-diff"]').click();
    const toolId = $('[data-testid="tool"]').dataset.id!;
    expect(posted).toEqual([{ type: 'answer', requestId: 4, optionId: 'allow_once' },
      { type: 'openDiff', itemId: toolId, index: 0, source: 'permission' }]);
  });

  it('says a revisable question\'s edit can be changed in the diff, only while it waits', () => {
    const view = mount(root, (m) => posted.push(m));
    view.receive(new ViewSync('/ws').next(state()));
    expect($('[data-testid="permission-revisable"]')).toBeNull();
    const sync = new ViewSync('/ws');
    let s = state(revisablePermissionParams('s'));
    view.receive(sync.next(s));
    expect($('[data-testid="permission-revisable"]').textContent).toContain('edit the right side, then Accept');
    s = reduce(s, { type: 'permissionSettled', sessionId: 's', requestId: 4, answer: { optionId: 'allow_once', revised: true } });
    view.receive(sync.next(s));
    expect($('[data-testid="permission-revisable"]')).toBeNull();
    expect($('[data-testid="answer"]').textContent).toBe('Accepted, with your changes');
  });

  it('repaints only changed items, in order, and shows the answer once settled', () => {
    const sync = new ViewSync('/ws');
    const view = mount(root, (m) => posted.push(m));
    let s = state();
    view.receive(sync.next(s));
    const userNode = $('[data-testid="message-user"]');
    s = reduce(s, { type: 'permissionSettled', sessionId: 's', requestId: 4, answer: { optionId: 'allow_once' } });
    s = reduce(s, { type: 'update', sessionId: 's', update: chunk('Changed it.') });
    view.receive(sync.next(s));
    expect($('[data-testid="message-user"]')).toBe(userNode); // untouched
    expect($('[data-testid="answer"]').textContent).toBe('Accepted');
    expect($$('[data-testid="transcript"] > *').map((n) => n.dataset.testid)).toEqual(['message-user', 'message-agent', 'tool', 'message-agent']);
  });

  it('sends with Enter (not Shift+Enter) when it may, and clears the prompt', () => {
    const view = mount(root, (m) => posted.push(m));
    let s = reduce(state(), { type: 'turnEnded', sessionId: 's', stopReason: 'end_turn' });
    view.receive(new ViewSync('/ws').next(s));
    const prompt = $('[data-testid="prompt"]') as HTMLTextAreaElement;
    prompt.value = 'next step';
    prompt.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', shiftKey: true }));
    expect(posted).toEqual([]);
    prompt.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    expect(posted).toEqual([{ type: 'send', text: 'next step' }]);
    expect(prompt.value).toBe('');
    s = reduce(s, { type: 'server', status: 'failed', message: 'python not found' });
    view.receive(new ViewSync('/ws').next(s));
    expect($('[data-testid="banner"]').textContent).toContain('python not found');
  });

  it('posts mode changes, new chat and history', () => {
    const view = mount(root, (m) => posted.push(m));
    view.receive(new ViewSync().next(reduce(initialState(), { type: 'server', status: 'running' })));
    const mode = $('[data-testid="mode"]') as HTMLSelectElement;
    expect([...mode.options].map((o) => o.value)).toEqual(['agent', 'review']);
    mode.value = 'review';
    mode.dispatchEvent(new Event('change'));
    $('[data-testid="new-chat"]').click();
    $('[data-testid="history"]').click();
    expect(posted).toEqual([{ type: 'setMode', modeId: 'review' }, { type: 'newChat' }, { type: 'history' }]);
    expect($('[data-testid="transcript"]').textContent).toContain('What should Composer do?');
  });

  it('warns about a weaker sandbox and shows the command and warning in its question', () => {
    const view = mount(root, (m) => posted.push(m));
    let s = reduce(state(), { type: 'isolation', status: { ...WEAK, level: 'bwrap', weaker: false } });
    view.receive(new ViewSync('/ws').next(s));
    expect($('[data-testid="isolation"]').hidden).toBe(true);
    expect($('[data-testid="title"]').title).toContain('sandbox: bwrap');
    s = reduce(reduce(state(), { type: 'isolation', status: WEAK }),
      { type: 'permissionAsked', requestId: 7, params: terminalPermissionParams('s', 'make <all>') });
    view.receive(new ViewSync('/ws').next(s));
    const sandbox = $('[data-testid="isolation"]');
    expect(sandbox.hidden).toBe(false);
    expect(sandbox.textContent).toContain('Sandbox: none.');
    const card = $$('[data-testid="permission"]')[1];
    expect(card.querySelector('[data-testid="permission-command"]')!.textContent).toBe('$ make <all>');
    expect(card.querySelector('[data-testid="permission-warning"]')!.textContent).toContain('weaker than bubblewrap');
    expect([...card.querySelectorAll('button[data-option]')].map((b) => b.getAttribute('data-option')))
      .toEqual(['allow_once', 'reject_once', 'reject_always']);
  });

  it('never turns model text into HTML', () => {
    const nodes = renderText('<img src=x onerror="alert(1)"> and ```html\n<script>x()</script>\n```');
    const box = document.createElement('div');
    box.append(...nodes);
    expect(box.querySelector('img, script')).toBeNull();
    expect(box.textContent).toContain('<img src=x onerror="alert(1)">');
    expect(box.querySelector('pre.code')!.textContent).toBe('<script>x()</script>');
  });
});

describe('the review of a turn\'s changes in the webview', () => {
  function ended(): { s: ChatState; itemId: string } {
    let s = reduce(reduce(state(), { type: 'permissionSettled', sessionId: 's', requestId: 4, answer: { optionId: 'allow_once' } }),
      { type: 'turnEnded', sessionId: 's', stopReason: 'end_turn', checkpoint: 'cp1' });
    return { s, itemId: s.sessions.s.items.at(-1)!.id };
  }

  it('offers Review changes after a turn that changed files', () => {
    const view = mount(root, (m) => posted.push(m));
    const { s, itemId } = ended();
    view.receive(new ViewSync('/ws').next(s));
    expect($('[data-testid="review"] [data-testid="review-file"]')).toBeNull();
    $('[data-testid="review-changes"]').click();
    expect(posted).toEqual([{ type: 'reviewChanges', itemId }]);
  });

  it('shows each file\'s hunks as a diff, with Undo and Keep per hunk, Keep all, and the file name opening the file', () => {
    const view = mount(root, (m) => posted.push(m));
    const sync = new ViewSync('/ws');
    const { s: closed, itemId } = ended();
    let s = reduce(closed, { type: 'reviewListed', sessionId: 's', itemId, files: TURN_CHANGES.files });
    view.receive(sync.next(s));
    expect($('[data-testid="review-changes"]')).toBeNull();
    const hunks = $$('[data-testid="review-hunk"]');
    expect(hunks).toHaveLength(2);
    expect([...hunks[1].querySelectorAll('.diff-lines .line.del, .diff-lines .line.add')].map((l) => l.textContent))
      .toEqual(['-value_17 = 17', '+value_17 = 1700']);
    expect(hunks[1].getAttribute('aria-label')).toBe('Change to config.py, lines 15 to 20');
    const undo = hunks[1].querySelector('[data-testid="review-undo"]') as HTMLButtonElement;
    expect(undo.tagName).toBe('BUTTON');
    expect(undo.getAttribute('aria-label')).toBe('Undo the change to config.py, lines 15 to 20');
    undo.click();
    (hunks[0].querySelector('[data-testid="review-keep"]') as HTMLElement).click();
    $('[data-testid="review-keep-all"]').click();
    (hunks[1].querySelector('[data-testid="review-open"]') as HTMLElement).click();
    expect(posted).toEqual([
      { type: 'reviewHunk', itemId, path: 'config.py', index: 1, verdict: 'undo' },
      { type: 'reviewHunk', itemId, path: 'config.py', index: 0, verdict: 'keep' },
      { type: 'keepAll', itemId },
      { type: 'openLocation', path: '/ws/config.py', line: 18 },
    ]);
    expect($$('[data-testid="review-file"]')[1].textContent).toContain('Binary or too large');
  });

  it('marks kept hunks, shows refused files\' reasons, and disables the buttons while a request runs', () => {
    const view = mount(root, (m) => posted.push(m));
    const sync = new ViewSync('/ws');
    const { s: closed, itemId } = ended();
    let s = reduce(closed, { type: 'reviewListed', sessionId: 's', itemId, files: TURN_CHANGES.files });
    s = reduce(s, { type: 'reviewKept', sessionId: 's', itemId, kept: [{ path: 'config.py', index: 0 }], refused: { 'logo.png': 'it changed: list again' } });
    s = reduce(s, { type: 'reviewBusy', sessionId: 's', itemId });
    view.receive(sync.next(s));
    const [first, second] = $$('[data-testid="review-hunk"]');
    expect(first.querySelector('[data-testid="review-kept"]')!.textContent).toBe('Kept');
    expect(first.querySelector('button[data-testid^="review-"]:not([data-testid="review-open"])')).toBeNull();
    expect((second.querySelector('[data-testid="review-undo"]') as HTMLButtonElement).disabled).toBe(true);
    expect($('[data-testid="review"]').getAttribute('aria-busy')).toBe('true');
    expect($('[data-testid="review-refused"]').textContent).toBe('Left untouched: it changed: list again');
    s = reduce(s, { type: 'reviewFailed', sessionId: 's', itemId, message: 'config.py: gone' });
    view.receive(sync.next(s));
    expect($('[data-testid="review-error"]').textContent).toBe('config.py: gone');
    expect(($$('[data-testid="review-hunk"]')[1].querySelector('[data-testid="review-undo"]') as HTMLButtonElement).disabled).toBe(false);
  });

  it('an earlier turn\'s review has no buttons', () => {
    const view = mount(root, (m) => posted.push(m));
    const { s } = ended();
    view.receive(new ViewSync('/ws').next(reduce(s, { type: 'prompted', sessionId: 's', text: 'more' })));
    expect($('[data-testid="review"]').dataset.state).toBe('stale');
    expect($('[data-testid="review"] button')).toBeNull();
  });
});
