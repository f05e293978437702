/* The chat state model: every session the extension knows on this connection, folded from the
 * server's `session/update` notifications, permission questions and the turns' results.
 *
 *   let state = initialState('agent');
 *   state = reduce(state, {type: 'opened', sessionId: 's1', modes});
 *   state = reduce(state, {type: 'update', sessionId: 's1', update: {sessionUpdate: 'agent_message_chunk', ...}});
 *
 * `reduce` is pure: it never changes the state it is given (changed sessions, item lists and items
 * are copied), so views can compare by identity. Every changed item gets a new `rev`, which the
 * webview uses to repaint only what changed. No `vscode` import.
 */

import type {
  DiffContent, IsolationStatus, ModeId, PermissionOption, PlanEntry, RequestPermissionParams, SessionMode, SessionModes,
  SessionUpdate, StopReason, ToolCallContent, ToolCallFields, ToolKind, ToolLocation, ToolStatus, TurnFileChanges,
} from './types';

export type Role = 'user' | 'agent' | 'thought';

export interface MessageItem {
  type: 'message';
  id: string;
  rev: number;
  role: Role;
  text: string;
}

/** `revised`: the allow answer carried the person's own text of the proposal. */
export type PermissionAnswer = { optionId: string; revised?: boolean } | { cancelled: string };

export interface PermissionState {
  requestId: number;
  title: string;
  options: PermissionOption[];
  diffs: DiffContent[];
  /** The parts of the call no rule allowed (composer's `_meta.composer.asked`). */
  reasons: string[];
  /** The question's text blocks: a command shown whole, a weaker sandbox's warning. */
  details: string[];
  /** The person may edit the proposed diff before allowing it (see revisableDiff). */
  revisable: boolean;
  /** Unset while the question waits for an answer. */
  answer?: PermissionAnswer;
}

export interface ToolItem {
  type: 'tool';
  id: string;
  rev: number;
  toolCallId: string;
  title: string;
  kind: ToolKind;
  status: ToolStatus;
  rawInput?: unknown;
  rawOutput?: unknown;
  locations: ToolLocation[];
  content: ToolCallContent[];
  /** Made from a permission question before its tool_call arrived. */
  placeholder: boolean;
  permission?: PermissionState;
}

export interface NoticeItem {
  type: 'notice';
  id: string;
  rev: number;
  level: 'info' | 'error';
  text: string;
}

export interface ReviewHunk {
  index: number;
  header: string;
  lines: string[];
  digest: string;
  /** The person kept it (composer/reviewHunks `keep`). */
  kept: boolean;
}

export interface ReviewFile {
  path: string;
  status: string;
  binary: boolean;
  hunks: ReviewHunk[];
  /** Why composer/reviewHunks left this file untouched, when it did. */
  refused: string | null;
}

/** The changes of a turn that changed files (its prompt result's `_meta.composer.checkpoint`), to
 * keep or undo hunk by hunk: "Review changes" lists them (composer/turnChanges). */
export interface ReviewItem {
  type: 'review';
  id: string;
  rev: number;
  checkpointId: string;
  /** closed: not listed yet; open: `files` is the latest listing. */
  phase: 'closed' | 'open';
  files: ReviewFile[];
  /** A request about it is under way. */
  busy: boolean;
  error: string | null;
  /** A later turn started, or the turn was undone: the listing no longer describes this turn. */
  stale: boolean;
}

export type ChatItem = MessageItem | ToolItem | NoticeItem | ReviewItem;

export interface SessionState {
  id: string;
  title: string | null;
  cwd: string | null;
  mode: ModeId;
  /** False once the server that had it open is gone: the next prompt reloads it first. */
  attached: boolean;
  loading: boolean;
  running: boolean;
  items: ChatItem[];
  plan: PlanEntry[];
  usage: { used: number; size: number } | null;
  lastStop: StopReason | null;
  error: string | null;
  /** The message item that chunks of its role append to (null after a tool call or a notice). */
  open: string | null;
}

export type ServerStatus = 'stopped' | 'starting' | 'running' | 'failed';

export interface ChatState {
  sessions: Record<string, SessionState>;
  /** The session shown; null for a new chat, created on its first prompt. */
  currentId: string | null;
  /** The mode a new chat will be put in. */
  draftMode: ModeId;
  modes: SessionMode[];
  server: { status: ServerStatus; message: string | null };
  /** The sandbox's isolation level (composer/isolation); null until the server said. */
  isolation: IsolationStatus | null;
  /** Turns started by server commands (composer.fixDiagnostic, composer.prompt) still running. */
  commandTurns: number;
  nextRev: number;
}

export const DEFAULT_MODES: SessionMode[] = [
  { id: 'agent', name: 'Agent', description: 'Edits and safe commands run as the permission rules say.' },
  { id: 'review', name: 'Review edits', description: 'Every edit waits for you to accept its diff, every command for you to allow it.' },
];

export type ChatAction =
  | { type: 'server'; status: ServerStatus; message?: string | null }
  | { type: 'isolation'; status: IsolationStatus | null }
  | { type: 'opened'; sessionId: string; modes?: SessionModes; cwd?: string | null; title?: string | null;
      loading?: boolean; running?: boolean; select?: boolean }
  | { type: 'loaded'; sessionId: string; modes?: SessionModes }
  | { type: 'select'; sessionId: string | null }
  | { type: 'update'; sessionId: string; update: SessionUpdate }
  | { type: 'prompted'; sessionId: string; text: string }
  | { type: 'turnEnded'; sessionId: string; stopReason: StopReason; checkpoint?: string | null }
  | { type: 'turnFailed'; sessionId: string; message: string }
  | { type: 'permissionAsked'; requestId: number; params: RequestPermissionParams }
  | { type: 'permissionSettled'; sessionId: string; requestId: number; answer: PermissionAnswer }
  | { type: 'mode'; sessionId: string | null; modeId: ModeId }
  | { type: 'notice'; sessionId: string; level: 'info' | 'error'; text: string }
  | { type: 'closed'; sessionId: string }
  | { type: 'restore'; session: SessionState }
  | { type: 'commandTurn'; delta: 1 | -1 }
  | { type: 'reviewBusy'; sessionId: string; itemId: string }
  | { type: 'reviewListed'; sessionId: string; itemId: string; files: TurnFileChanges[]; refused?: Record<string, string> }
  | { type: 'reviewKept'; sessionId: string; itemId: string; kept: { path: string; index: number }[]; refused: Record<string, string> }
  | { type: 'reviewFailed'; sessionId: string; itemId: string; message: string }
  /** The workspace went back before the session's turns (composer/rewind): no review applies. */
  | { type: 'reviewStale'; sessionId: string };

export function initialState(draftMode: ModeId = 'agent'): ChatState {
  return { sessions: {}, currentId: null, draftMode, modes: DEFAULT_MODES,
    server: { status: 'stopped', message: null }, isolation: null, commandTurns: 0, nextRev: 1 };
}

export function emptySession(id: string, mode: ModeId): SessionState {
  return { id, title: null, cwd: null, mode, attached: true, loading: false, running: false, items: [], plan: [],
    usage: null, lastStop: null, error: null, open: null };
}

export function currentSession(state: ChatState): SessionState | null {
  return state.currentId ? state.sessions[state.currentId] ?? null : null;
}

/** The permission questions still waiting for an answer, oldest first. */
export function pendingPermissions(session: SessionState | null): { tool: ToolItem; permission: PermissionState }[] {
  const out: { tool: ToolItem; permission: PermissionState }[] = [];
  for (const item of session?.items ?? []) {
    if (item.type === 'tool' && item.permission && !item.permission.answer) out.push({ tool: item, permission: item.permission });
  }
  return out;
}

const STOP_NOTES: Record<string, string> = {
  cancelled: 'Cancelled.',
  max_tokens: 'Stopped: the model reached its token limit.',
  max_turn_requests: 'Stopped: the turn took too many steps.',
  refusal: 'The model refused.',
};

/** A mutable working copy of one reduce step: copies what it touches, once. */
class Draft {
  readonly state: ChatState;

  constructor(prev: ChatState) {
    this.state = { ...prev, sessions: { ...prev.sessions } };
  }

  rev(): number {
    return this.state.nextRev++;
  }

  session(id: string, create = true): SessionState | null {
    const found = this.state.sessions[id];
    if (!found && !create) return null;
    const copy: SessionState = found ? { ...found, items: [...found.items] } : emptySession(id, this.state.draftMode);
    this.state.sessions[id] = copy;
    return copy;
  }

  push(s: SessionState, item: Omit<MessageItem, 'id' | 'rev'> | Omit<ToolItem, 'id' | 'rev'> | Omit<NoticeItem, 'id' | 'rev'>
    | Omit<ReviewItem, 'id' | 'rev'>): ChatItem {
    const rev = this.rev();
    const made = { ...item, id: `i${rev}`, rev } as ChatItem;
    s.items.push(made);
    return made;
  }

  /** Replaces item `index` of `s` with a changed copy. */
  change<T extends ChatItem>(s: SessionState, index: number, changes: Partial<T>): T {
    const next = { ...(s.items[index] as T), ...changes, rev: this.rev() };
    s.items[index] = next;
    return next;
  }
}

export function reduce(prev: ChatState, action: ChatAction): ChatState {
  const d = new Draft(prev);
  const st = d.state;
  switch (action.type) {
    case 'server':
      st.server = { status: action.status, message: action.message ?? null };
      if (action.status !== 'running') st.isolation = null;  // the next server says its own
      if (action.status === 'stopped' || action.status === 'failed') {
        detachAll(d, 'the server stopped');
        st.commandTurns = 0;
      }
      break;
    case 'opened': {
      const s = d.session(action.sessionId)!;
      Object.assign(s, { attached: true, loading: !!action.loading, running: !!action.running, error: null });
      if (action.loading) Object.assign(s, { items: [], plan: [], usage: null, open: null });
      if (action.cwd !== undefined) s.cwd = action.cwd;
      if (action.title !== undefined && action.title !== null) s.title = action.title;
      applyModes(st, s, action.modes);
      if (action.select !== false) st.currentId = action.sessionId;
      break;
    }
    case 'loaded': {
      const s = d.session(action.sessionId)!;
      s.loading = false;
      s.open = null;
      applyModes(st, s, action.modes);
      break;
    }
    case 'isolation':
      st.isolation = action.status;
      break;
    case 'select':
      st.currentId = action.sessionId;
      break;
    case 'update':
      applyUpdate(d, d.session(action.sessionId)!, action.update);
      break;
    case 'prompted': {
      const s = d.session(action.sessionId)!;
      Object.assign(s, { running: true, error: null, lastStop: null, open: null });
      staleReviews(d, s);
      if (s.title === null) s.title = firstLine(action.text);
      d.push(s, { type: 'message', role: 'user', text: action.text });
      break;
    }
    case 'turnEnded': {
      const s = d.session(action.sessionId)!;
      Object.assign(s, { running: false, lastStop: action.stopReason, open: null });
      settleAll(d, s, 'the turn ended');
      const note = STOP_NOTES[action.stopReason];
      if (note) d.push(s, { type: 'notice', level: 'info', text: note });
      if (typeof action.checkpoint === 'string' && action.checkpoint) {
        d.push(s, { type: 'review', checkpointId: action.checkpoint, phase: 'closed', files: [], busy: false, error: null, stale: false });
      }
      break;
    }
    case 'turnFailed': {
      const s = d.session(action.sessionId)!;
      Object.assign(s, { running: false, error: action.message, open: null });
      settleAll(d, s, 'the turn failed');
      d.push(s, { type: 'notice', level: 'error', text: action.message });
      break;
    }
    case 'permissionAsked':
      askPermission(d, action.requestId, action.params);
      break;
    case 'permissionSettled': {
      const s = d.session(action.sessionId, false);
      if (s) settle(d, s, (p) => p.requestId === action.requestId, action.answer);
      break;
    }
    case 'mode':
      if (action.sessionId === null) st.draftMode = action.modeId;
      else d.session(action.sessionId)!.mode = action.modeId;
      break;
    case 'notice': {
      const s = d.session(action.sessionId)!;
      s.open = null;
      d.push(s, { type: 'notice', level: action.level, text: action.text });
      break;
    }
    case 'closed':
      delete st.sessions[action.sessionId];
      if (st.currentId === action.sessionId) st.currentId = null;
      break;
    case 'restore':
      st.sessions[action.session.id] = action.session;
      break;
    case 'commandTurn':
      st.commandTurns = Math.max(0, st.commandTurns + action.delta);
      break;
    case 'reviewStale': {
      const s = d.session(action.sessionId, false);
      if (s) staleReviews(d, s);
      break;
    }
    case 'reviewBusy':
    case 'reviewListed':
    case 'reviewKept':
    case 'reviewFailed':
      changeReview(d, action);
      break;
  }
  return st;
}

type ReviewAction = Extract<ChatAction, { type: 'reviewBusy' | 'reviewListed' | 'reviewKept' | 'reviewFailed' }>;

function changeReview(d: Draft, action: ReviewAction): void {
  const s = d.session(action.sessionId, false);
  const index = s ? s.items.findIndex((i) => i.id === action.itemId && i.type === 'review') : -1;
  if (!s || index < 0) return;
  const item = s.items[index] as ReviewItem;
  switch (action.type) {
    case 'reviewBusy':
      d.change<ReviewItem>(s, index, { busy: true, error: null });
      return;
    case 'reviewFailed':
      d.change<ReviewItem>(s, index, { busy: false, error: action.message });
      return;
    case 'reviewListed':
      d.change<ReviewItem>(s, index, { phase: 'open', busy: false, error: null,
        files: listedFiles(action.files, item.files, action.refused ?? {}) });
      return;
    case 'reviewKept': {
      const kept = new Set(action.kept.filter((k) => !(k.path in action.refused)).map((k) => `${k.index}\0${k.path}`));
      const files = item.files.map((f) => ({
        ...f,
        refused: action.refused[f.path] ?? f.refused,
        hunks: f.hunks.map((h) => (kept.has(`${h.index}\0${f.path}`) ? { ...h, kept: true } : h)),
      }));
      d.change<ReviewItem>(s, index, { busy: false, error: null, files });
      return;
    }
  }
}

/** A new listing, the hunks kept before still marked kept (indices and digests shift when a hunk
 * above is undone, so they are matched by path, lines and where they start on the old side, which
 * an undo leaves as it was: two identical changes of one file are two hunks). */
function listedFiles(listed: TurnFileChanges[], before: ReviewFile[], refused: Record<string, string>): ReviewFile[] {
  const key = (path: string, header: string, lines: string[]) => `${path}\0${oldStart(header)}\0${lines.join('\n')}`;
  const kept = new Set(before.flatMap((f) => f.hunks.filter((h) => h.kept).map((h) => key(f.path, h.header, h.lines))));
  const files: ReviewFile[] = (Array.isArray(listed) ? listed : []).filter((f) => f && typeof f.path === 'string').map((f) => ({
    path: f.path,
    status: String(f.status ?? 'modified'),
    binary: f.binary === true,
    hunks: (Array.isArray(f.hunks) ? f.hunks : []).map((h) => ({
      index: Number(h.index), header: String(h.header ?? ''), lines: Array.isArray(h.lines) ? h.lines.map(String) : [],
      digest: String(h.digest ?? ''),
      kept: kept.has(key(f.path, String(h.header ?? ''), Array.isArray(h.lines) ? h.lines.map(String) : [])),
    })),
    refused: refused[f.path] ?? null,
  }));
  // a refused file the listing no longer holds still says why
  for (const [path, why] of Object.entries(refused)) {
    if (!files.some((f) => f.path === path)) files.push({ path, status: 'modified', binary: false, hunks: [], refused: why });
  }
  return files;
}

/** The old-side start line of a hunk header `@@ -a,b +c,d @@` ('' when it has none). */
function oldStart(header: string): string {
  return /^@@ -(\d+)/.exec(header)?.[1] ?? '';
}

function staleReviews(d: Draft, s: SessionState): void {
  s.items.forEach((item, index) => {
    if (item.type === 'review' && !item.stale) d.change<ReviewItem>(s, index, { stale: true });
  });
}

function firstLine(text: string): string {
  const line = text.trim().split('\n')[0] ?? '';
  return line.length > 80 ? `${line.slice(0, 79)}\u2026` : line;
}

function applyModes(st: ChatState, s: SessionState, modes: SessionModes | undefined): void {
  if (!modes) return;
  s.mode = modes.currentModeId;
  if (Array.isArray(modes.availableModes) && modes.availableModes.length) st.modes = modes.availableModes;
}

function detachAll(d: Draft, why: string): void {
  for (const id of Object.keys(d.state.sessions)) {
    const s = d.session(id)!;
    Object.assign(s, { attached: false, running: false, loading: false, open: null });
    settleAll(d, s, why);
  }
}

function contentText(block: unknown): string {
  if (!block || typeof block !== 'object') return '';
  const b = block as { type?: string; text?: unknown; name?: string; uri?: string; resource?: { text?: string } };
  if (b.type === 'text') return String(b.text ?? '');
  if (b.type === 'resource_link') return `[${b.name || b.uri}]`;
  if (b.type === 'resource') return String(b.resource?.text ?? '[resource]');
  return `[${b.type}]`;
}

function applyUpdate(d: Draft, s: SessionState, update: SessionUpdate): void {
  const u = update as SessionUpdate & Record<string, unknown>;
  switch (u.sessionUpdate) {
    case 'user_message_chunk':
      return appendChunk(d, s, 'user', contentText(u.content));
    case 'agent_message_chunk':
      return appendChunk(d, s, 'agent', contentText(u.content));
    case 'agent_thought_chunk':
      return appendChunk(d, s, 'thought', contentText(u.content));
    case 'tool_call':
    case 'tool_call_update':
      s.open = null;
      upsertTool(d, s, u as unknown as ToolCallFields, u.sessionUpdate === 'tool_call');
      return;
    case 'plan':
      s.plan = Array.isArray(u.entries) ? (u.entries as PlanEntry[]) : [];
      return;
    case 'usage_update':
      s.usage = { used: Number(u.used) || 0, size: Number(u.size) || 0 };
      return;
    case 'current_mode_update':
      if (typeof u.currentModeId === 'string') s.mode = u.currentModeId;
      return;
    case 'session_info_update':
      if (typeof u.title === 'string' && u.title) s.title = u.title;
      return;
    default:
      return; // available_commands_update and what a later server adds: nothing to show
  }
}

function appendChunk(d: Draft, s: SessionState, role: Role, text: string): void {
  const index = s.open === null ? -1 : s.items.findIndex((i) => i.id === s.open);
  const open = index >= 0 ? (s.items[index] as MessageItem) : null;
  if (open && open.role === role) {
    d.change<MessageItem>(s, index, { text: open.text + text });
    return;
  }
  if (role === 'user' && s.title === null) s.title = firstLine(text);
  s.open = d.push(s, { type: 'message', role, text }).id;
}

function lastToolIndex(s: SessionState, toolCallId: string, usable?: (t: ToolItem) => boolean): number {
  for (let i = s.items.length - 1; i >= 0; i--) {
    const item = s.items[i];
    if (item.type === 'tool' && item.toolCallId === toolCallId) return !usable || usable(item) ? i : -1;
  }
  return -1;
}

const TOOL_FIELDS = ['title', 'kind', 'status', 'rawInput', 'rawOutput', 'locations', 'content'] as const;

/** tool_call makes a card (or fills the one its permission question made); tool_call_update changes
 * the fields it carries (content and locations replace the whole list). */
function upsertTool(d: Draft, s: SessionState, u: ToolCallFields, isNew: boolean): void {
  const id = String(u.toolCallId ?? '');
  let index = lastToolIndex(s, id);
  if (index < 0 || (isNew && !(s.items[index] as ToolItem).placeholder)) {
    d.push(s, { type: 'tool', toolCallId: id, title: 'Tool call', kind: 'other', status: 'pending', locations: [],
      content: [], placeholder: false });
    index = s.items.length - 1;
  }
  const changes: Partial<ToolItem> = {};
  for (const key of TOOL_FIELDS) {
    if (u[key] !== undefined && u[key] !== null) (changes as Record<string, unknown>)[key] = u[key];
  }
  if (isNew) changes.placeholder = false;
  d.change<ToolItem>(s, index, changes);
}

/** The diff a question lets the person change before allowing it: set when the server marks it
 * `_meta.composer.revisable` and the call's content holds exactly one diff; null otherwise (then
 * the question is answered as any other). */
export function revisableDiff(params: RequestPermissionParams): DiffContent | null {
  if (params._meta?.composer?.revisable !== true) return null;
  const content = Array.isArray(params.toolCall?.content) ? params.toolCall.content : [];
  const diffs = content.filter((c): c is DiffContent => !!c && c.type === 'diff');
  return diffs.length === 1 && typeof diffs[0].path === 'string' && typeof diffs[0].newText === 'string' ? diffs[0] : null;
}

function askPermission(d: Draft, requestId: number, params: RequestPermissionParams): void {
  const s = d.session(params.sessionId)!;
  const call = params.toolCall ?? ({ toolCallId: '' } as ToolCallFields);
  const id = String(call.toolCallId ?? '');
  let index = lastToolIndex(s, id, (t) => t.status !== 'completed' && t.status !== 'failed');
  if (index < 0) {
    d.push(s, { type: 'tool', toolCallId: id, title: call.title ?? 'Tool call', kind: call.kind ?? 'other',
      status: 'pending', rawInput: call.rawInput, locations: call.locations ?? [], content: [], placeholder: true });
    index = s.items.length - 1;
  }
  const content = Array.isArray(call.content) ? call.content : [];
  const asked = params._meta?.composer?.asked;
  const permission: PermissionState = {
    requestId,
    title: call.title ?? (s.items[index] as ToolItem).title,
    options: Array.isArray(params.options) ? params.options : [],
    diffs: content.filter((c): c is DiffContent => !!c && c.type === 'diff'),
    reasons: Array.isArray(asked) ? asked.map((a) => String(a.text ?? '')) : [],
    details: content.flatMap((c) => (c && c.type === 'content' && typeof (c.content as { text?: unknown })?.text === 'string'
      ? [String((c.content as { text: string }).text)] : [])),
    revisable: revisableDiff(params) !== null,
  };
  s.open = null;
  d.change<ToolItem>(s, index, { permission });
}

function settle(d: Draft, s: SessionState, which: (p: PermissionState) => boolean, answer: PermissionAnswer): void {
  s.items.forEach((item, index) => {
    if (item.type === 'tool' && item.permission && !item.permission.answer && which(item.permission)) {
      d.change<ToolItem>(s, index, { permission: { ...item.permission, answer } });
    }
  });
}

function settleAll(d: Draft, s: SessionState, why: string): void {
  settle(d, s, () => true, { cancelled: why });
}
