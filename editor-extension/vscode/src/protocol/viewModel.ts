/* From the chat state to what the webview paints: labels, diff models, which buttons show, and
 * `ViewSync`, which sends the webview only the items that changed since its last message.
 *
 *   const sync = new ViewSync('/repo');
 *   webview.postMessage(sync.next(client.state));     // after every change (throttled)
 *   sync.reset();                                      // the webview (re)loaded: send everything
 *
 * No `vscode` import.
 */

import { ChatItem, ChatState, currentSession, pendingPermissions, PermissionState, ReviewItem, SessionState, ToolItem } from './chatState';
import { DiffLine, diffModel, relativePath } from './diff';
import type { DiffContent, ToolCallContent } from './types';
import type { ToView, ViewHeader, ViewItem, ViewOutput, ViewPermission, ViewReview, ViewReviewHunk } from './view';

export const KINDS: Record<string, [string, string]> = {
  read: ['\u2261', 'read'], edit: ['\u270E', 'edit'], delete: ['\u2716', 'delete'], move: ['\u21C4', 'move'],
  search: ['\u2315', 'search'], execute: ['\u25B6', 'run'], think: ['\u2026', 'think'], fetch: ['\u21E3', 'fetch'],
  switch_mode: ['\u21C6', 'mode'], other: ['\u2022', 'tool'],
};

export const STATUS_LABELS: Record<string, string> = {
  pending: 'pending', in_progress: 'running', completed: 'done', failed: 'failed',
};

const OPEN_OUTPUT_LINES = 12;

export function shortNumber(n: number): string {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${Math.round(n / 1e3)}k`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

function blockText(block: unknown): string {
  const b = (block ?? {}) as { type?: string; text?: unknown; uri?: string; name?: string };
  if (b.type === 'text') return String(b.text ?? '');
  if (b.type === 'resource_link') return `[${b.name || b.uri}]`;
  return `[${b.type ?? 'content'}]`;
}

/** One item of a tool call's content; `live`: a running command's output, shown open (its newest
 * lines in view) since it changes a few times a second. */
function output(c: ToolCallContent, index: number, root: string | null, live: boolean): ViewOutput | null {
  if (!c || typeof c !== 'object') return null;
  if (c.type === 'diff') return { type: 'diff', index, diff: diffModel(c, root) };
  const text = c.type === 'content' ? blockText(c.content) : c.type === 'terminal' ? `[terminal ${c.terminalId}]` : JSON.stringify(c);
  const lines = text.split('\n').length;
  return { type: 'text', text, lines, open: live || lines <= OPEN_OUTPUT_LINES, live };
}

export function permissionView(p: PermissionState, root: string | null): ViewPermission {
  const chosen = p.answer && 'optionId' in p.answer ? p.answer.optionId : null;
  const revised = !!p.answer && 'optionId' in p.answer && p.answer.revised === true;
  const option = p.options.find((o) => o.optionId === chosen);
  return {
    requestId: p.requestId,
    title: p.title,
    reasons: p.reasons,
    details: p.details.filter((t) => !t.startsWith('Warning:')),
    warning: p.details.find((t) => t.startsWith('Warning:')) ?? null,
    diffs: p.diffs.map((d) => diffModel(d, root)),
    revisable: p.revisable,
    // an edit's question reads "Accept / Reject" its diff
    options: p.options.map((o) => ({ optionId: o.optionId, kind: o.kind,
      name: o.kind === 'allow_once' && p.diffs.length ? 'Accept' : o.name,
      primary: o.kind === 'allow_once' || o.kind === 'reject_once' })),
    state: !p.answer ? 'pending' : chosen ? 'answered' : 'cancelled',
    answerLabel: !p.answer ? null : chosen ? answered(option?.kind, p.diffs.length > 0, chosen, revised)
      : `Not answered (${(p.answer as { cancelled: string }).cancelled})`,
  };
}

function answered(kind: string | undefined, edit: boolean, optionId: string, revised: boolean): string {
  const labels: Record<string, string> = { allow_once: edit ? 'Accepted' : 'Allowed', allow_always: 'Always allowed',
    reject_once: 'Rejected', reject_always: 'Always rejected' };
  const label = (kind && labels[kind]) || optionId;
  return revised ? `${label}, with your changes` : label;
}

function toolError(t: ToolItem): string | null {
  if (t.status !== 'failed' || t.content.length) return null;
  const out = t.rawOutput as { error?: unknown } | undefined;
  return out && out.error !== undefined ? String(out.error) : null;
}

/** "@@ -a,b +c,d @@" -> c, d (1-based start and length of the new side). */
function newSide(header: string): [number, number] {
  const m = /\+(\d+)(?:,(\d+))?/.exec(header);
  return m ? [Number(m[1]), m[2] === undefined ? 1 : Number(m[2])] : [1, 0];
}

export function reviewHunkView(path: string, h: { index: number; header: string; lines: string[]; kept: boolean }): ViewReviewHunk {
  const lines: DiffLine[] = h.lines.map((l) => {
    const op = l[0];
    return op === '+' || op === '-' ? { op, text: l.slice(1) } : { op: ' ', text: op === ' ' ? l.slice(1) : l };
  });
  const [start, count] = newSide(h.header);
  const lead = lines.findIndex((l) => l.op !== ' ');
  const line = Math.max(1, start + Math.max(0, lead));
  const last = Math.max(start, start + count - 1);
  const label = count > 1 ? `${path}, lines ${start} to ${last}` : `${path}, line ${Math.max(1, start)}`;
  return { index: h.index, header: h.header, line, lines, kept: h.kept, label };
}

function joinRoot(root: string | null, rel: string): string | null {
  if (/^([a-zA-Z]:)?[\\/]/.test(rel)) return rel;
  return root ? `${root.replace(/[\\/]+$/, '')}/${rel}` : null;
}

export function reviewView(item: ReviewItem, root: string | null): ViewReview {
  return {
    id: item.id, rev: item.rev, type: 'review',
    state: item.stale ? 'stale' : item.phase,
    busy: item.busy,
    error: item.error,
    files: item.files.map((f) => ({
      path: f.path, displayPath: f.path, status: f.status, binary: f.binary, refused: f.refused,
      absPath: f.status === 'deleted' ? null : joinRoot(root, f.path),
      hunks: f.hunks.map((h) => reviewHunkView(f.path, h)),
    })),
    canKeepAll: !item.stale && item.files.some((f) => f.hunks.some((h) => !h.kept)),
  };
}

export function toViewItem(item: ChatItem, root: string | null): ViewItem {
  if (item.type === 'review') return reviewView(item, root);
  if (item.type === 'message') {
    const label = item.role === 'user' ? 'You' : item.role === 'agent' ? 'Composer' : 'Thinking';
    return { id: item.id, rev: item.rev, type: 'message', role: item.role, label, text: item.text };
  }
  if (item.type === 'notice') return { id: item.id, rev: item.rev, type: 'notice', level: item.level, text: item.text };
  const [icon, kindLabel] = KINDS[item.kind] ?? KINDS.other;
  return {
    id: item.id, rev: item.rev, type: 'tool', title: item.title, kind: item.kind, icon, kindLabel,
    status: item.status, statusLabel: STATUS_LABELS[item.status] ?? item.status,
    locations: item.locations.map((l) => ({ path: l.path, line: l.line,
      label: relativePath(l.path, root) + (l.line ? `:${l.line}` : '') })),
    outputs: item.content.map((c, i) => output(c, i, root, item.status === 'in_progress')).filter((o): o is ViewOutput => o !== null),
    input: item.rawInput === undefined || item.rawInput === null ? null : JSON.stringify(item.rawInput, null, 2),
    error: toolError(item),
    permission: item.permission ? permissionView(item.permission, root) : null,
  };
}

export function header(state: ChatState): ViewHeader {
  const s: SessionState | null = currentSession(state);
  const serverUp = state.server.status === 'running';
  const running = !!s && (s.running || s.loading);
  return {
    server: state.server,
    sessionId: s?.id ?? null,
    title: s?.title ?? 'New chat',
    mode: s?.mode ?? state.draftMode,
    modes: state.modes.map((m) => ({ id: m.id, name: m.name, description: m.description })),
    running: !!s?.running || (!s && state.commandTurns > 0),
    loading: !!s?.loading,
    canSend: serverUp && !running,
    canCancel: serverUp && !!s?.running,
    canUndo: serverUp && !!s && !running && s.items.some((i) => i.type === 'tool'),
    usage: s?.usage && s.usage.size ? `${shortNumber(s.usage.used)} / ${shortNumber(s.usage.size)} tokens` : null,
    plan: (s?.plan ?? []).map((e) => ({ content: e.content, status: e.status ?? 'pending' })),
    pendingPermissions: pendingPermissions(s).length,
    error: s?.error ?? (state.server.status === 'failed' ? state.server.message ?? 'composer-lsp failed to start' : null),
    isolation: state.isolation
      ? { level: state.isolation.level, weaker: state.isolation.weaker, message: state.isolation.message } : null,
  };
}

function findTool(state: ChatState, itemId: string): ToolItem | null {
  const item = currentSession(state)?.items.find((i) => i.id === itemId);
  return item && item.type === 'tool' ? item : null;
}

/** The permission question of an item of the current session. */
export function findPermission(state: ChatState, itemId: string): PermissionState | null {
  return findTool(state, itemId)?.permission ?? null;
}

/** The diff `index` of an item of the current session: its permission question's, or its output's. */
export function findDiff(state: ChatState, itemId: string, index: number, source: 'permission' | 'output'): DiffContent | null {
  if (source === 'permission') return findPermission(state, itemId)?.diffs[index] ?? null;
  const c = findTool(state, itemId)?.content[index];
  return c && c.type === 'diff' ? c : null;
}

/** Remembers what the webview has, so each message carries only the changed items. */
export class ViewSync {
  private sent = new Map<string, number>();
  private sessionId: string | null | undefined = undefined;

  constructor(private readonly root: string | null = null) {}

  reset(): void {
    this.sent.clear();
    this.sessionId = undefined;
  }

  next(state: ChatState): ToView {
    const s = currentSession(state);
    const id = s?.id ?? null;
    const reset = id !== this.sessionId;
    if (reset) {
      this.sent.clear();
      this.sessionId = id;
    }
    const items = s?.items ?? [];
    const changed = items.filter((i) => this.sent.get(i.id) !== i.rev);
    const keep = new Map<string, number>();
    for (const i of items) keep.set(i.id, i.rev);
    this.sent = keep;
    return { type: 'state', reset, header: header(state), order: items.map((i) => i.id),
      items: changed.map((i) => toViewItem(i, s?.cwd ?? this.root)) };
  }
}

export interface StatusView {
  kind: 'idle' | 'working' | 'waiting' | 'error' | 'starting' | 'stopped' | 'unsandboxed';
  /** Status bar text, with codicons. */
  text: string;
  tooltip: string;
}

/** The status bar's summary of the whole client: idle, working, waiting for an answer, or error;
 * every tooltip names the sandbox level, and an idle client on a weaker one says so in its text. */
export function statusOf(state: ChatState): StatusView {
  const status = activity(state);
  const iso = state.isolation;
  if (!iso || state.server.status !== 'running') return status;
  const tooltip = `${status.tooltip}\n${iso.weaker ? 'Warning: ' : ''}${iso.message}`;
  if (iso.weaker && status.kind === 'idle') {
    return { kind: 'unsandboxed', text: `$(warning) Composer: sandbox ${iso.level}`, tooltip };
  }
  return { ...status, tooltip };
}

function activity(state: ChatState): StatusView {
  const sessions = Object.values(state.sessions);
  const server = state.server;
  if (server.status === 'failed') {
    return { kind: 'error', text: '$(error) Composer', tooltip: `composer-lsp failed: ${server.message ?? 'see the output'}` };
  }
  if (server.status === 'starting') return { kind: 'starting', text: '$(sync~spin) Composer', tooltip: 'Starting composer-lsp' };
  if (server.status === 'stopped') {
    return { kind: 'stopped', text: '$(circle-slash) Composer', tooltip: `composer-lsp is not running${server.message ? `: ${server.message}` : ''}` };
  }
  const waiting = sessions.reduce((n, s) => n + pendingPermissions(s).length, 0);
  if (waiting) return { kind: 'waiting', text: '$(question) Composer', tooltip: `Composer is waiting for you to answer ${waiting} question(s)` };
  if (state.commandTurns > 0 || sessions.some((s) => s.running || s.loading)) {
    return { kind: 'working', text: '$(loading~spin) Composer', tooltip: 'Composer is working (Composer: Cancel stops it)' };
  }
  const s = currentSession(state);
  if (s?.error) return { kind: 'error', text: '$(error) Composer', tooltip: `The last turn failed: ${s.error}` };
  return { kind: 'idle', text: '$(comment-discussion) Composer', tooltip: 'Composer is idle: open the chat' };
}
