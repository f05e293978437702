/* The chat webview's script: paints the view model the extension posts (protocol/view.ts) and posts
 * back what the person does. All logic about sessions lives in the extension; this only draws.
 * Built by `tsc -p src/webview` (an ES module, DOM lib) into out/webview/webview/main.js.
 *
 * Model and tool text only ever reaches the page as text nodes (textContent), never as HTML.
 */

import type {
  FromView, ToView, ViewHeader, ViewItem, ViewOutput, ViewPermission, ViewReview, ViewReviewFile, ViewReviewHunk,
} from '../protocol/view';
import type { DiffModel } from '../protocol/diff';

type Attrs = Record<string, string | number | boolean | null | undefined | ((e: Event) => void)>;
type Child = Node | string | null | undefined | false;

function el(tag: string, attrs: Attrs = {}, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === 'function') node.addEventListener(key.slice(2), value);
    else if (key === 'class') node.className = String(value);
    else if (key === 'text') node.textContent = String(value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

/* Markdown-lite: ``` fences become code blocks, `spans` inline code; everything else stays text. */
export function renderText(text: string): Node[] {
  const nodes: Node[] = [];
  text.split('```').forEach((part, i, parts) => {
    if (i % 2 === 1) {
      const nl = part.indexOf('\n');
      const lang = nl >= 0 ? part.slice(0, nl).trim() : '';
      const code = nl >= 0 ? part.slice(nl + 1) : part;
      nodes.push(el('pre', { class: 'code', 'data-lang': lang || null }, el('code', {}, code.replace(/\n$/, ''))));
      return;
    }
    if (i > 0) part = part.replace(/^\n/, '');
    if (i < parts.length - 1) part = part.replace(/\n$/, '');
    const para = el('div', { class: 'text' });
    const re = /`([^`\n]+)`/g;
    let at = 0;
    for (let m = re.exec(part); m; m = re.exec(part)) {
      if (m.index > at) para.append(part.slice(at, m.index));
      para.append(el('code', {}, m[1]));
      at = m.index + m[0].length;
    }
    if (at < part.length) para.append(part.slice(at));
    if (para.childNodes.length) nodes.push(para);
  });
  return nodes;
}

export interface ChatView {
  receive(message: ToView): void;
  root: HTMLElement;
}

/** Builds the chat UI inside `root`; `post` sends messages to the extension. */
export function mount(root: HTMLElement, post: (m: FromView) => void, draft = ''): ChatView {
  const title = el('div', { class: 'title', 'data-testid': 'title' });
  const mode = el('select', { class: 'mode', title: 'Mode', 'aria-label': 'Mode', 'data-testid': 'mode',
    onchange: () => post({ type: 'setMode', modeId: (mode as HTMLSelectElement).value }) }) as HTMLSelectElement;
  const undo = el('button', { class: 'icon', title: 'Undo the last turn\'s changes', 'data-testid': 'undo',
    onclick: () => post({ type: 'undo' }) }, '\u21B6');
  const toolbar = el('div', { class: 'toolbar' }, title, mode,
    el('button', { class: 'icon', title: 'Open a session', 'data-testid': 'history', onclick: () => post({ type: 'history' }) }, '\u2630'),
    undo,
    el('button', { class: 'icon', title: 'New chat', 'data-testid': 'new-chat', onclick: () => post({ type: 'newChat' }) }, '+'));
  const banner = el('div', { class: 'banner', hidden: true, 'data-testid': 'banner' });
  const sandbox = el('div', { class: 'sandbox', hidden: true, 'data-testid': 'isolation' });
  const plan = el('ol', { class: 'plan', hidden: true, 'data-testid': 'plan' });
  const transcript = el('div', { class: 'transcript', 'data-testid': 'transcript', role: 'log', 'aria-live': 'polite' });
  const empty = el('div', { class: 'empty' }, el('h3', { text: 'What should Composer do?' }),
    el('p', { text: 'Describe a change; Composer reads the workspace, edits files and runs commands. In Review edits mode every edit waits for you to accept its diff.' }));
  const prompt = el('textarea', { class: 'prompt', rows: 3, placeholder: 'Ask Composer... (Enter sends, Shift+Enter adds a line)',
    'aria-label': 'Prompt', 'data-testid': 'prompt' }) as HTMLTextAreaElement;
  prompt.value = draft;
  const usage = el('span', { class: 'usage', 'data-testid': 'usage' });
  const send = el('button', { class: 'primary', 'data-testid': 'send', onclick: () => submit() }, 'Send') as HTMLButtonElement;
  const cancel = el('button', { 'data-testid': 'cancel', hidden: true, onclick: () => post({ type: 'cancel' }) }, 'Cancel') as HTMLButtonElement;
  root.replaceChildren(toolbar, banner, sandbox, plan, transcript, el('div', { class: 'footer' }, prompt, el('div', { class: 'actions' }, usage, cancel, send)));

  let head: ViewHeader | null = null;
  const nodes = new Map<string, { rev: number; node: HTMLElement }>();

  function submit(): void {
    const text = prompt.value.trim();
    if (!text || !head?.canSend) return;
    post({ type: 'send', text });
    prompt.value = '';
  }

  prompt.addEventListener('keydown', (e: KeyboardEvent) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });

  function paintHeader(h: ViewHeader): void {
    head = h;
    title.textContent = h.title;
    title.title = h.sessionId ? `Session ${h.sessionId}` : 'A new chat: its session starts with the first prompt';
    mode.replaceChildren(...h.modes.map((m) => el('option', { value: m.id, title: m.description ?? '', selected: m.id === h.mode }, m.name)));
    mode.value = h.mode;
    mode.disabled = h.running;
    (undo as HTMLButtonElement).disabled = !h.canUndo;
    send.disabled = !h.canSend;
    cancel.hidden = !h.canCancel;
    usage.textContent = h.usage ?? '';
    const problem = h.server.status === 'running' ? null : h.server.status === 'starting' ? 'Starting composer-lsp\u2026'
      : h.server.status === 'failed' ? `composer-lsp failed: ${h.server.message ?? 'see the Composer output'}`
        : `composer-lsp is not running${h.server.message ? `: ${h.server.message}` : ''}`;
    banner.hidden = !problem;
    banner.textContent = problem ?? '';
    banner.dataset.state = h.server.status;
    // the sandbox level: a standing warning when weaker than bubblewrap, else just a tooltip
    sandbox.hidden = !h.isolation?.weaker;
    sandbox.textContent = h.isolation?.weaker ? `Sandbox: ${h.isolation.level}. ${h.isolation.message}` : '';
    sandbox.dataset.level = h.isolation?.level ?? '';
    title.title += h.isolation ? ` \u00B7 sandbox: ${h.isolation.level}` : '';
    plan.hidden = !h.plan.length;
    plan.replaceChildren(...h.plan.map((e) => el('li', { 'data-status': e.status }, e.content)));
  }

  function receive(m: ToView): void {
    if (!m || m.type !== 'state') return;
    const follow = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 80;
    if (m.reset) nodes.clear();
    paintHeader(m.header);
    for (const item of m.items) {
      const old = nodes.get(item.id);
      const node = paintItem(item, post);
      if (old) {
        keepWhatThePersonSet(old.node, node);
        old.node.replaceWith(node);
      }
      nodes.set(item.id, { rev: item.rev, node });
    }
    const wanted = m.order.map((id) => nodes.get(id)?.node).filter((n): n is HTMLElement => !!n);
    const order = new Set(m.order);
    for (const id of [...nodes.keys()]) if (!order.has(id)) nodes.delete(id);
    if (!wanted.length) transcript.replaceChildren(empty);
    else if (wanted.length !== transcript.children.length || wanted.some((n, i) => transcript.children[i] !== n)) {
      transcript.replaceChildren(...wanted);
    }
    // in the cards this message repainted, a running command's output shows its newest lines unless
    // the person scrolled back (once in place: moving a node resets its scroll)
    for (const pre of m.items.flatMap((i) => [...(nodes.get(i.id)?.node.querySelectorAll<HTMLElement>('pre[data-live]') ?? [])])) {
      pre.scrollTop = pre.dataset.keepScroll !== undefined ? Number(pre.dataset.keepScroll) : pre.scrollHeight;
      delete pre.dataset.keepScroll;
    }
    if (follow || m.reset) transcript.scrollTop = transcript.scrollHeight;
  }

  return { receive, root };
}

function paintItem(item: ViewItem, post: (m: FromView) => void): HTMLElement {
  if (item.type === 'message') {
    if (item.role === 'thought') {
      return el('details', { class: 'message thought', 'data-id': item.id }, el('summary', { text: item.label }),
        el('div', { class: 'body' }, ...renderText(item.text)));
    }
    return el('div', { class: `message ${item.role}`, 'data-id': item.id, 'data-testid': `message-${item.role}` },
      el('div', { class: 'role', text: item.label }), el('div', { class: 'body' }, ...renderText(item.text)));
  }
  if (item.type === 'notice') return el('div', { class: `notice ${item.level}`, 'data-id': item.id, 'data-testid': 'notice' }, item.text);
  if (item.type === 'review') return paintReview(item, post);
  const card = el('div', { class: 'tool', 'data-id': item.id, 'data-status': item.status, 'data-kind': item.kind, 'data-testid': 'tool' },
    el('div', { class: 'tool-head' }, el('span', { class: 'tool-kind', title: item.kindLabel }, item.icon, ' ', item.kindLabel),
      el('span', { class: 'tool-title', text: item.title }),
      el('span', { class: 'tool-status', 'data-status': item.status, text: item.statusLabel })));
  if (item.locations.length) {
    card.append(el('div', { class: 'locations' }, ...item.locations.map((l) => el('a', { href: '#', class: 'location',
      onclick: (e: Event) => { e.preventDefault(); post({ type: 'openLocation', path: l.path, line: l.line }); } }, l.label))));
  }
  if (item.permission) card.append(paintPermission(item.id, item.permission, post));
  for (const out of item.outputs) card.append(paintOutput(item.id, out, post));
  if (item.error) card.append(el('pre', { class: 'tool-error', text: item.error }));
  if (item.input) card.append(el('details', { class: 'tool-input' }, el('summary', { text: 'Input' }), el('pre', { text: item.input })));
  return card;
}

/** A card repainted by an update keeps what the person did to the old one: the Input they opened,
 * a running command's output they folded or scrolled back in. */
function keepWhatThePersonSet(old: HTMLElement, node: HTMLElement): void {
  if (old.querySelector('details.tool-input[open]')) node.querySelector('details.tool-input')?.setAttribute('open', '');
  const before = old.querySelector<HTMLDetailsElement>('details.tool-output');
  const pre = before?.querySelector<HTMLElement>('pre[data-live]');
  const live = node.querySelector<HTMLElement>('pre[data-live]');
  if (!before || !pre || !live) return;
  if (!before.open) live.closest('details')?.removeAttribute('open');
  // a folded output has no height: it was not scrolled back, whatever its scrollTop
  if (pre.clientHeight > 0 && pre.scrollTop + pre.clientHeight < pre.scrollHeight - 4) live.dataset.keepScroll = String(pre.scrollTop);
}

function paintOutput(itemId: string, out: ViewOutput, post: (m: FromView) => void): HTMLElement {
  if (out.type === 'diff') return paintDiff(out.diff, () => post({ type: 'openDiff', itemId, index: out.index, source: 'output' }), false);
  const pre = el('pre', { text: out.text, 'data-live': out.live });
  // running output the person unfolds shows its newest lines (a folded one could not be scrolled);
  // a click, not `toggle`, which also fires for the repaint's own `open`
  const onclick = out.live ? () => setTimeout(() => { pre.scrollTop = pre.scrollHeight; }) : null;
  return el('details', { class: 'tool-output', open: out.open },
    el('summary', { text: `Output (${out.lines} line${out.lines === 1 ? '' : 's'})`, onclick }), pre);
}

export function paintDiff(d: DiffModel, open: () => void, expanded = true): HTMLElement {
  const summary = el('summary', { class: 'diff-summary' }, el('span', { class: 'diff-path', text: d.displayPath }));
  if (d.isNew) summary.append(el('span', { class: 'diff-tag', text: ' new file' }));
  const wrap = el('details', { class: 'diff', open: expanded, 'data-path': d.path, 'data-testid': 'diff' }, summary);
  if (d.tooLarge) {
    summary.append(el('span', { class: 'muted', text: ` ${d.tooLarge.oldLines} -> ${d.tooLarge.newLines} lines (too large to show here)` }));
  } else {
    summary.append(el('span', { class: 'diff-add', text: ` +${d.added}` }), el('span', { class: 'diff-del', text: ` -${d.removed}` }));
    const pre = el('pre', { class: 'diff-lines' });
    if (!d.hunks.length) pre.append(el('span', { class: 'line hunk', text: '(no changes)' }));
    for (const h of d.hunks) {
      pre.append(el('span', { class: 'line hunk', text: h.header }));
      for (const l of h.lines) {
        pre.append(el('span', { class: `line ${l.op === '+' ? 'add' : l.op === '-' ? 'del' : 'ctx'}`, text: l.op + l.text }));
      }
    }
    wrap.append(pre);
  }
  summary.append(el('button', { class: 'link', title: 'Open in the diff editor', 'data-testid': 'open-diff',
    onclick: (e: Event) => { e.preventDefault(); open(); } }, 'Open diff'));
  return wrap;
}

function paintPermission(itemId: string, p: ViewPermission, post: (m: FromView) => void): HTMLElement {
  const card = el('div', { class: 'permission', 'data-state': p.state, 'data-request-id': p.requestId, role: 'group',
    'aria-label': 'Permission needed', 'data-testid': 'permission' },
  el('div', { class: 'permission-head' }, el('strong', { text: p.state === 'pending' ? 'Permission needed: ' : 'Asked: ' }), p.title));
  if (p.reasons.length) card.append(el('ul', { class: 'reasons' }, ...p.reasons.map((r) => el('li', { text: r }))));
  for (const d of p.details) card.append(el('pre', { class: 'command', 'data-testid': 'permission-command', text: d }));
  if (p.warning) card.append(el('div', { class: 'warning', role: 'note', 'data-testid': 'permission-warning', text: p.warning }));
  p.diffs.forEach((d, index) => card.append(paintDiff(d, () => post({ type: 'openDiff', itemId, index, source: 'permission' }), p.state === 'pending')));
  if (p.revisable && p.state === 'pending') {
    card.append(el('div', { class: 'revisable', 'data-testid': 'permission-revisable',
      text: 'You can change this edit: Open diff, edit the right side, then Accept. Your text is what gets written.' }));
  }
  const actions = el('div', { class: 'permission-actions' });
  if (p.state === 'pending') {
    for (const o of p.options) {
      actions.append(el('button', { class: o.primary ? (o.kind.startsWith('allow') ? 'primary' : 'danger') : 'secondary',
        'data-option': o.optionId, 'data-testid': `answer-${o.optionId}`,
        onclick: () => post({ type: 'answer', requestId: p.requestId, optionId: o.optionId }) }, o.name));
    }
  } else {
    actions.append(el('span', { class: 'answer', 'data-testid': 'answer', text: p.answerLabel ?? '' }));
  }
  card.append(actions);
  return card;
}

const FILE_STATUS: Record<string, string> = { added: 'new file', deleted: 'deleted', modified: 'changed' };

/** A turn's changes: "Review changes", then each file's hunks with Undo / Keep, and Keep all. */
function paintReview(r: ViewReview, post: (m: FromView) => void): HTMLElement {
  const live = r.state === 'open' && !r.busy;
  const card = el('div', { class: 'review', 'data-id': r.id, 'data-state': r.state, 'data-testid': 'review', role: 'group',
    'aria-label': 'Changes of the turn', 'aria-busy': r.busy ? 'true' : null });
  const head = el('div', { class: 'review-head' }, el('strong', { text: r.state === 'open' ? 'Changes of this turn' : 'This turn changed files.' }));
  if (r.state === 'closed') {
    head.append(el('button', { class: 'primary', 'data-testid': 'review-changes', disabled: r.busy,
      title: 'List this turn\'s changes, to keep or undo each one', onclick: () => post({ type: 'reviewChanges', itemId: r.id }) },
    r.busy ? 'Listing\u2026' : 'Review changes'));
  } else if (r.state === 'open' && r.canKeepAll) {
    head.append(el('button', { 'data-testid': 'review-keep-all', disabled: !live, title: 'Keep every change not yet kept or undone',
      onclick: () => post({ type: 'keepAll', itemId: r.id }) }, 'Keep all'));
  }
  card.append(head);
  if (r.state === 'stale') {
    card.append(el('div', { class: 'muted', text: 'A later turn or an undo changed the workspace since: review the last turn instead.' }));
  }
  if (r.error) card.append(el('div', { class: 'review-error', role: 'alert', 'data-testid': 'review-error', text: r.error }));
  if (r.state === 'open' && !r.files.length) {
    card.append(el('div', { class: 'muted', 'data-testid': 'review-empty', text: 'No changes left: the files are as they were before the turn.' }));
  }
  if (r.state !== 'closed') for (const f of r.files) card.append(paintReviewFile(r, f, live, post));
  return card;
}

function paintReviewFile(r: ViewReview, f: ViewReviewFile, live: boolean, post: (m: FromView) => void): HTMLElement {
  const open = (line: number) => (e: Event) => {
    e.preventDefault();
    if (f.absPath) post({ type: 'openLocation', path: f.absPath, line });
  };
  const name = (text: string, line: number, label: string) => (f.absPath
    ? el('button', { class: 'link review-path', title: `Open ${f.displayPath} at line ${line}`, 'aria-label': `Open ${label}`,
      'data-testid': 'review-open', onclick: open(line) }, text)
    : el('span', { class: 'review-path', text }));
  const box = el('div', { class: 'review-file', 'data-path': f.path, 'data-testid': 'review-file' },
    el('div', { class: 'review-file-head' }, name(f.displayPath, f.hunks[0]?.line ?? 1, f.displayPath),
      el('span', { class: 'diff-tag', text: ` ${FILE_STATUS[f.status] ?? f.status}` })));
  if (f.refused) box.append(el('div', { class: 'warning', role: 'note', 'data-testid': 'review-refused', text: `Left untouched: ${f.refused}` }));
  if (f.binary) box.append(el('div', { class: 'muted', text: 'Binary or too large to show: only Undo last turn restores it.' }));
  for (const h of f.hunks) box.append(paintReviewHunk(r, f, h, live, name, post));
  return box;
}

function paintReviewHunk(r: ViewReview, f: ViewReviewFile, h: ViewReviewHunk, live: boolean,
  name: (text: string, line: number, label: string) => HTMLElement, post: (m: FromView) => void): HTMLElement {
  const verdict = (v: 'undo' | 'keep') => () => post({ type: 'reviewHunk', itemId: r.id, path: f.path, index: h.index, verdict: v });
  const actions = el('span', { class: 'review-actions' });
  if (h.kept) actions.append(el('span', { class: 'review-kept', 'data-testid': 'review-kept', text: 'Kept' }));
  else if (r.state === 'open') {
    actions.append(
      el('button', { class: 'danger', 'data-testid': 'review-undo', disabled: !live, 'aria-label': `Undo the change to ${h.label}`,
        title: 'Put these lines back as they were before the turn', onclick: verdict('undo') }, 'Undo'),
      el('button', { class: 'primary', 'data-testid': 'review-keep', disabled: !live, 'aria-label': `Keep the change to ${h.label}`,
        onclick: verdict('keep') }, 'Keep'));
  }
  const pre = el('pre', { class: 'diff-lines' });
  for (const l of h.lines) pre.append(el('span', { class: `line ${l.op === '+' ? 'add' : l.op === '-' ? 'del' : 'ctx'}`, text: l.op + l.text }));
  return el('div', { class: 'review-hunk', 'data-index': h.index, 'data-kept': h.kept ? 'true' : 'false', 'data-testid': 'review-hunk',
    role: 'group', 'aria-label': `Change to ${h.label}` },
  el('div', { class: 'review-hunk-head' }, name(`${f.displayPath}:${h.line}`, h.line, h.label),
    el('span', { class: 'review-header', text: h.header }), actions), pre);
}

// ---- bootstrap inside VS Code -------------------------------------------------------------------

interface VsCodeApi {
  postMessage(message: unknown): void;
  getState(): { draft?: string } | undefined;
  setState(state: { draft?: string }): void;
}

declare const acquireVsCodeApi: (() => VsCodeApi) | undefined;

if (typeof acquireVsCodeApi === 'function') {
  const api = acquireVsCodeApi();
  const app = document.getElementById('app') ?? document.body;
  const view = mount(app, (m) => api.postMessage(m), api.getState()?.draft ?? '');
  window.addEventListener('message', (e: MessageEvent) => view.receive(e.data as ToView));
  app.addEventListener('input', () => api.setState({ draft: (app.querySelector('textarea') as HTMLTextAreaElement).value }));
  api.postMessage({ type: 'ready' });
}
