/* The session client: the extension's side of composer-lsp's session methods, on any JSON-RPC
 * connection (vscode-languageclient's LanguageClient in the editor, a vscode-jsonrpc
 * MessageConnection in tests). It sends the requests, folds `session/update` into the chat state
 * (chatState.ts), and holds `session/request_permission` questions until the person answers.
 *
 *   const client = new SessionClient({cwd: '/repo', mode: 'review'});
 *   client.attach(connection);                      // after `initialize`
 *   await client.refreshIsolation();                // the sandbox level, for the status bar
 *   client.onDidChange((state) => render(state));
 *   await client.prompt('rename foo to bar');       // creates the session on first use
 *   client.answerPermission(requestId, 'allow_once');   // with the person's text, if they edited the proposal
 *   await client.reviewChanges(itemId);             // a turn that changed files: list its hunks
 *   await client.reviewHunks(itemId, 'undo', [{path: 'a.py', index: 1}]);   // then lists them again
 *
 * No `vscode` import: this module runs in plain Node.
 */

import {
  ChatAction, ChatState, currentSession, initialState, pendingPermissions, PermissionAnswer, reduce, ReviewItem, revisableDiff,
  ServerStatus,
} from './chatState';
import {
  ContentBlock, DiffContent, IsolationStatus, METHODS, ModeId, NewSessionResult, PromptResult, ProtocolDiagnostic,
  HunkPick, RequestPermissionParams, RequestPermissionResponse, ReviewHunksResult, RewindResult, SERVER_COMMANDS, SessionInfo,
  SessionModes, SessionNotification, TurnChangesResult,
} from './types';

export interface Disposable {
  dispose(): void;
}

/** What the session client needs of a JSON-RPC connection; LanguageClient and vscode-jsonrpc's
 * MessageConnection both have it. */
export interface RpcConnection {
  sendRequest<R>(method: string, params: unknown): Promise<R>;
  sendNotification(method: string, params: unknown): Promise<void> | void;
  onNotification(method: string, handler: (params: any) => void): Disposable;
  onRequest(method: string, handler: (params: any) => unknown): Disposable;
}

export type LogLevel = 'info' | 'warn' | 'error';

/** Where the person edits a revisable question's proposal (in VS Code, the diff editor's right
 * side; see proposalDocuments.ts). Keyed by the client's permission request ids. */
export interface ProposalEditor {
  /** The person's text of the proposal, unsaved typing included; null when they did not change
   * it (or never opened it). */
  editedText(requestId: number): string | null;
  /** The question is settled: close the proposal without asking to save it. */
  discard(requestId: number): void;
}

export interface SessionClientOptions {
  /** The workspace sessions work in (session/new's cwd); the server's own workspace when unset. */
  cwd?: string | null;
  /** The mode new chats start in. */
  mode?: ModeId;
  log?: (level: LogLevel, message: string) => void;
  /** Revisable questions' proposals; without it, questions are answered as if none were. */
  proposals?: ProposalEditor;
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (err && typeof err === 'object' && 'message' in err) return String((err as { message: unknown }).message);
  return String(err);
}

type Waiting = {
  sessionId: string;
  resolve: (r: RequestPermissionResponse) => void;
  /** The diff the person may revise (revisable questions only). */
  proposal: DiffContent | null;
  /** The options that allow the call: only they may carry a revision. */
  allowIds: string[];
};

export class SessionClient {
  private conn: RpcConnection | null = null;
  private subscriptions: Disposable[] = [];
  private waiting = new Map<number, Waiting>();
  private nextRequestId = 1;
  private current: ChatState;
  private listeners = new Set<(state: ChatState) => void>();
  private updateListeners = new Set<(n: SessionNotification) => void>();
  /** What a server command turn is about, shown as its first message once its session appears. */
  private commandLabels: string[] = [];
  private creating: Promise<string> | null = null;
  /** Session id -> its session/load under way: requests about the session wait for it. */
  private loads = new Map<string, Promise<void>>();

  constructor(private readonly options: SessionClientOptions = {}) {
    this.current = initialState(options.mode ?? 'agent');
  }

  get state(): ChatState {
    return this.current;
  }

  get connected(): boolean {
    return this.conn !== null;
  }

  /** Calls `listener` with the new state after every change. */
  onDidChange(listener: (state: ChatState) => void): Disposable {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  /** Every `session/update` notification as it arrives (before it is folded into the state). */
  onUpdate(listener: (n: SessionNotification) => void): Disposable {
    this.updateListeners.add(listener);
    return { dispose: () => this.updateListeners.delete(listener) };
  }

  dispatch(action: ChatAction): void {
    this.current = reduce(this.current, action);
    for (const listener of [...this.listeners]) listener(this.current);
  }

  private log(level: LogLevel, message: string): void {
    this.options.log?.(level, message);
  }

  // ---- the connection -------------------------------------------------------------------------

  /** Starts using `conn` (an initialized connection); sessions of an earlier one reload on use. */
  attach(conn: RpcConnection): void {
    this.detach('starting');
    this.conn = conn;
    this.subscriptions.push(
      conn.onNotification(METHODS.update, (params: SessionNotification) => this.onSessionUpdate(params)),
      conn.onRequest(METHODS.requestPermission, (params: RequestPermissionParams) => this.onPermission(params)),
    );
    this.dispatch({ type: 'server', status: 'running' });
  }

  /** Stops using the connection: open questions are answered "cancelled", sessions detach. */
  detach(status: ServerStatus = 'stopped', message?: string): void {
    for (const s of this.subscriptions.splice(0)) s.dispose();
    this.conn = null;
    this.loads.clear(); // loads on that connection: the next one loads again
    for (const [requestId, w] of [...this.waiting]) this.finish(requestId, w, { cancelled: 'the server stopped' }, false);
    this.dispatch({ type: 'server', status, message: message ?? null });
  }

  /** Asks the server which sandbox level its terminal commands run with (composer/isolation) and
   * keeps the answer in the state; a server that cannot say leaves it unknown (null). */
  async refreshIsolation(): Promise<void> {
    try {
      const status = await this.request<IsolationStatus>(METHODS.isolation, {});
      this.dispatch({ type: 'isolation', status });
      if (status.weaker) this.log('warn', status.message);
    } catch (err) {
      this.log('warn', `composer/isolation: ${errorMessage(err)}`);
      this.dispatch({ type: 'isolation', status: null });
    }
  }

  private connection(): RpcConnection {
    if (!this.conn) throw new Error('Composer is not connected to composer-lsp (see the Composer output channel)');
    return this.conn;
  }

  private request<R>(method: string, params: unknown): Promise<R> {
    return this.connection().sendRequest<R>(method, params);
  }

  // ---- what the server sends ------------------------------------------------------------------

  private onSessionUpdate(params: SessionNotification): void {
    if (!params || typeof params.sessionId !== 'string' || !params.update) return;
    for (const listener of [...this.updateListeners]) listener(params);
    this.adopt(params.sessionId);
    this.dispatch({ type: 'update', sessionId: params.sessionId, update: params.update });
  }

  /** A session this client did not open (a server command made it) joins the chat, shown when a
   * command turn is running. */
  private adopt(sessionId: string): void {
    if (this.current.sessions[sessionId]) return;
    const command = this.current.commandTurns > 0;
    this.dispatch({ type: 'opened', sessionId, cwd: this.options.cwd ?? null, running: command,
      select: command || this.current.currentId === null });
    const label = command ? this.commandLabels.shift() : undefined;
    if (label) this.dispatch({ type: 'update', sessionId, update: { sessionUpdate: 'user_message_chunk', content: { type: 'text', text: label } } });
  }

  private onPermission(params: RequestPermissionParams): Promise<RequestPermissionResponse> {
    if (!params || typeof params.sessionId !== 'string') return Promise.resolve({ outcome: { outcome: 'cancelled' } });
    this.adopt(params.sessionId);
    const requestId = this.nextRequestId++;
    this.log('info', `permission asked (${requestId}): ${params.toolCall?.title ?? 'a tool call'}`);
    return new Promise((resolve) => {
      const allowIds = (Array.isArray(params.options) ? params.options : [])
        .filter((o) => o.kind === 'allow_once' || o.kind === 'allow_always').map((o) => o.optionId);
      this.waiting.set(requestId, { sessionId: params.sessionId, resolve, proposal: revisableDiff(params), allowIds });
      this.dispatch({ type: 'permissionAsked', requestId, params });
    });
  }

  /** Answers permission question `requestId` with `optionId` (null: dismissed, "cancelled"). */
  answerPermission(requestId: number, optionId: string | null): boolean {
    const w = this.waiting.get(requestId);
    if (!w) return false;
    this.finish(requestId, w, optionId === null ? { cancelled: 'dismissed' } : { optionId });
    return true;
  }

  private finish(requestId: number, w: Waiting, answer: PermissionAnswer, record = true): void {
    this.waiting.delete(requestId);
    const revisedText = 'optionId' in answer ? this.revisedText(requestId, w, answer.optionId) : null;
    // read first, then closed: whatever settles the question (answer, cancel, turn end, detach)
    if (w.proposal) this.options.proposals?.discard(requestId);
    w.resolve(permissionResponse(answer, revisedText));
    const settled = revisedText === null ? answer : { ...answer, revised: true };
    if (record) this.dispatch({ type: 'permissionSettled', sessionId: w.sessionId, requestId, answer: settled });
  }

  /** The person's text of the proposal, sent with an allow answer when it differs from the model's
   * (the protocol's `revisedText`); null for anything else: rejects never carry it. */
  private revisedText(requestId: number, w: Waiting, optionId: string): string | null {
    if (!w.proposal || !this.options.proposals || !w.allowIds.includes(optionId)) return null;
    try {
      const text = this.options.proposals.editedText(requestId);
      return text !== null && text !== w.proposal.newText ? text : null;
    } catch (err) {
      // the answer must still go out, or the server waits for ever
      this.log('error', `could not read the edited proposal (${requestId}), allowed as proposed: ${errorMessage(err)}`);
      return null;
    }
  }

  private settleSession(sessionId: string, why: string): void {
    for (const [requestId, w] of [...this.waiting]) {
      if (w.sessionId === sessionId) this.finish(requestId, w, { cancelled: why });
    }
  }

  // ---- sessions -------------------------------------------------------------------------------

  /** Shows a new chat; its session is created on the first prompt. */
  newChat(): void {
    this.dispatch({ type: 'select', sessionId: null });
  }

  select(sessionId: string | null): void {
    this.dispatch({ type: 'select', sessionId });
  }

  async newSession(): Promise<string> {
    const params = { ...(this.options.cwd ? { cwd: this.options.cwd } : {}), mcpServers: [] };
    const result = await this.request<NewSessionResult>(METHODS.newSession, params);
    const wanted = this.current.draftMode;
    this.dispatch({ type: 'opened', sessionId: result.sessionId, modes: result.modes, cwd: this.options.cwd ?? null });
    if (result.modes && wanted !== result.modes.currentModeId) await this.setMode(wanted, result.sessionId);
    return result.sessionId;
  }

  /** The current session, created (or reloaded, after a server restart) when needed; prompts sent
   * while it is being created share it. */
  async ensureSession(): Promise<string> {
    const s = currentSession(this.current);
    if (!s) {
      this.creating ??= this.newSession().finally(() => { this.creating = null; });
      return this.creating;
    }
    await this.loaded(s.id);
    return s.id;
  }

  /** Resolves once the server knows `sessionId`: after its load under way, or a load started here
   * when the session is detached (the server restarted since). */
  private async loaded(sessionId: string): Promise<void> {
    const loading = this.loads.get(sessionId);
    if (loading) return loading;
    if (this.current.sessions[sessionId]?.attached === false) await this.loadSession(sessionId);
  }

  /** Reopens a logged session: the server replays its history into the chat. */
  async loadSession(sessionId: string): Promise<void> {
    const loading: Promise<void> = this.loads.get(sessionId) ?? this.load(sessionId).finally(() => {
      if (this.loads.get(sessionId) === loading) this.loads.delete(sessionId); // not a later connection's
    });
    this.loads.set(sessionId, loading);
    return loading;
  }

  private async load(sessionId: string): Promise<void> {
    const conn = this.connection();
    const before = this.current.sessions[sessionId];
    this.dispatch({ type: 'opened', sessionId, loading: true, cwd: this.options.cwd ?? before?.cwd ?? null });
    try {
      const params = { sessionId, ...(this.options.cwd ? { cwd: this.options.cwd } : {}), mcpServers: [] };
      const result = await conn.sendRequest<{ modes?: SessionModes } | null>(METHODS.loadSession, params);
      this.dispatch({ type: 'loaded', sessionId, modes: result?.modes });
    } catch (err) {
      // what the chat showed stays (the replay may have half-rebuilt it)
      if (before) this.dispatch({ type: 'restore', session: before });
      else this.dispatch({ type: 'loaded', sessionId });
      this.dispatch({ type: 'notice', sessionId, level: 'error', text: `Could not open the session: ${errorMessage(err)}` });
      throw err;
    }
    if (before && before.mode !== this.current.sessions[sessionId]?.mode) await this.setMode(before.mode, sessionId);
  }

  async listSessions(): Promise<SessionInfo[]> {
    const result = await this.request<{ sessions?: SessionInfo[] }>(METHODS.listSessions, this.options.cwd ? { cwd: this.options.cwd } : {});
    return Array.isArray(result?.sessions) ? result.sessions : [];
  }

  /** Sets the mode of a session (default: the current one) and of the chats started after it. */
  async setMode(modeId: ModeId, sessionId?: string): Promise<void> {
    const id = sessionId ?? this.current.currentId;
    const s = id ? this.current.sessions[id] : undefined;
    if (s && s.attached && this.conn) {
      await this.request(METHODS.setMode, { sessionId: s.id, modeId });
      this.dispatch({ type: 'mode', sessionId: s.id, modeId });
    } else if (s) {
      this.dispatch({ type: 'mode', sessionId: s.id, modeId }); // applied when it reloads
    }
    this.dispatch({ type: 'mode', sessionId: null, modeId });
  }

  // ---- turns ----------------------------------------------------------------------------------

  /** Sends a prompt to the current session (or `sessionId`) and waits for the turn to end. */
  async prompt(input: string | ContentBlock[], sessionId?: string): Promise<PromptResult> {
    const blocks: ContentBlock[] = typeof input === 'string' ? [{ type: 'text', text: input }] : input;
    const shown = blocks.map(blockText).filter(Boolean).join('\n\n');
    const id = sessionId ?? (await this.ensureSession());
    this.dispatch({ type: 'prompted', sessionId: id, text: shown });
    try {
      const result = await this.request<PromptResult>(METHODS.prompt, { sessionId: id, prompt: blocks });
      this.settleSession(id, 'the turn ended');
      this.dispatch({ type: 'turnEnded', sessionId: id, stopReason: result?.stopReason ?? 'end_turn',
        checkpoint: result?._meta?.composer?.checkpoint ?? null });
      return result;
    } catch (err) {
      this.settleSession(id, 'the turn failed');
      this.dispatch({ type: 'turnFailed', sessionId: id, message: errorMessage(err) });
      throw err;
    }
  }

  /** Cancels the running turn of the current session (or `sessionId`); its open questions are
   * answered "cancelled", as ACP asks of clients. */
  async cancel(sessionId?: string): Promise<void> {
    const id = sessionId ?? this.current.currentId;
    if (!id || !this.conn) return;
    this.settleSession(id, 'cancelled');
    await this.conn.sendNotification(METHODS.cancel, { sessionId: id });
  }

  /** Restores the workspace to before the last turn's first change (composer/rewind); `forget`:
   * the turn leaves the conversation too, as if it had not happened. */
  async rewind(sessionId?: string, forget = false): Promise<RewindResult> {
    const id = sessionId ?? this.current.currentId;
    if (!id) throw new Error('There is no session to undo');
    // After a server restart the server knows the session again once it is loaded; it still
    // knows which open buffers hold the agent's edits, and takes those back too.
    await this.loaded(id);
    const result = await this.request<RewindResult>(METHODS.rewind, forget ? { sessionId: id, conversation: true } : { sessionId: id });
    this.dispatch({ type: 'reviewStale', sessionId: id });
    const forgot = forget ? ' Composer forgot it: the next prompt goes on from before it.' : '';
    const text = result.checkpointId === null // a turn that changed no file only leaves the conversation
      ? 'The last turn changed no file; Composer forgot it: the next prompt goes on from before it.'
      : `Undid the last turn: the workspace is back where it was before it.${forgot}`;
    this.dispatch({ type: 'notice', sessionId: id, level: 'info', text });
    const refused = Object.entries(result.buffers?.refused ?? {});
    if (refused.length) {
      const why = refused.map(([path, reason]) => `${path} (${reason})`).join('; ');
      this.dispatch({ type: 'notice', sessionId: id, level: 'error',
        text: `The files are back on disk, but these open editors were not put back: ${why}` });
    }
    return result;
  }

  // ---- reviewing a turn's changes hunk by hunk ------------------------------------------------

  /** The review item `itemId` of the current session, while it still describes the last turn and
   * no other request about it is under way (else the reason is shown on it, and thrown). `during`:
   * the session of the request under way about it, which may no longer be the one shown. */
  private review(itemId: string, during?: string): { sessionId: string; item: ReviewItem } {
    const s = during !== undefined ? this.current.sessions[during] ?? null : currentSession(this.current);
    const item = s?.items.find((i) => i.id === itemId);
    if (!s || !item || item.type !== 'review') throw new Error('There are no changes to review here');
    // a second click before the first request's answer: that request's outcome stands
    if (during === undefined && item.busy) throw new Error('A request about these changes is under way: wait for it');
    const refuse = (message: string): never => {
      this.dispatch({ type: 'reviewFailed', sessionId: s.id, itemId, message });
      throw new Error(message);
    };
    if (item.stale) refuse('These changes are from an earlier turn: review the last one');
    if (s.running || s.loading) refuse('Wait for the turn to end before reviewing its changes');
    // the listing's hunks are the last server's: after a restart, Undo takes the turn back whole
    if (!s.attached) refuse('The server restarted since these changes were listed: Undo takes the turn back whole');
    return { sessionId: s.id, item };
  }

  /** Lists the changes of review item `itemId`'s turn, file by file, hunk by hunk
   * (composer/turnChanges); a failure is shown on the item, and thrown. */
  async reviewChanges(itemId: string): Promise<TurnChangesResult> {
    const { sessionId, item } = this.review(itemId);
    this.dispatch({ type: 'reviewBusy', sessionId, itemId });
    return this.reviewing(sessionId, itemId, () => this.list(sessionId, item, {}));
  }

  private async list(sessionId: string, item: ReviewItem, refused: Record<string, string>): Promise<TurnChangesResult> {
    const listed = await this.request<TurnChangesResult>(METHODS.turnChanges, { sessionId, checkpointId: item.checkpointId });
    this.dispatch({ type: 'reviewListed', sessionId, itemId: item.id, files: listed?.files ?? [], refused });
    return listed;
  }

  /** Undoes or keeps hunks of the latest listing of review item `itemId` (composer/reviewHunks,
   * with each hunk's index and digest). After an undo the changes are listed again: the indices
   * below an undone hunk shift. The hunks the server kept are marked kept; files it refused say why.
   * Refused while another request about the item is under way. */
  async reviewHunks(itemId: string, verdict: 'undo' | 'keep', hunks: { path: string; index: number }[]): Promise<ReviewHunksResult> {
    const { sessionId, item } = this.review(itemId);
    const picks: HunkPick[] = [];
    for (const { path, index } of hunks) {
      const hunk = item.files.find((f) => f.path === path)?.hunks.find((h) => h.index === index);
      if (hunk) picks.push({ path, index, digest: hunk.digest });
    }
    if (!picks.length) {
      const message = 'That change is no longer listed: review the changes again';
      this.dispatch({ type: 'reviewFailed', sessionId, itemId, message });
      throw new Error(message);
    }
    this.dispatch({ type: 'reviewBusy', sessionId, itemId });
    return this.reviewing(sessionId, itemId, async () => {
      const result = await this.request<ReviewHunksResult>(METHODS.reviewHunks,
        { sessionId, checkpointId: item.checkpointId, [verdict]: picks });
      const refused = result?.refused && typeof result.refused === 'object' ? result.refused : {};
      for (const [path, why] of Object.entries(refused)) this.log('warn', `composer/reviewHunks refused ${path}: ${why}`);
      // the server names the picks it kept (an older one does not: then every pick not refused)
      const kept = Array.isArray(result?.kept)
        ? result.kept.filter((k) => k && typeof k.path === 'string' && typeof k.index === 'number') : picks;
      if (verdict === 'keep') this.dispatch({ type: 'reviewKept', sessionId, itemId, kept, refused });
      // an undo shifts what follows it; a refused file changed since it was listed. The person may
      // have switched chats meanwhile: the item is the request's session's.
      if (verdict === 'undo' || Object.keys(refused).length) await this.list(sessionId, this.review(itemId, sessionId).item, refused);
      return result;
    });
  }

  /** Keeps every hunk of review item `itemId` not yet kept. */
  async keepAll(itemId: string): Promise<ReviewHunksResult> {
    const { item } = this.review(itemId);
    const hunks = item.files.flatMap((f) => f.hunks.filter((h) => !h.kept).map((h) => ({ path: f.path, index: h.index })));
    return this.reviewHunks(itemId, 'keep', hunks);
  }

  private async reviewing<T>(sessionId: string, itemId: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      this.dispatch({ type: 'reviewFailed', sessionId, itemId, message: errorMessage(err) });
      throw err;
    }
  }

  /** Asks the server to fix a diagnostic (its `composer.fixDiagnostic` command): a new session,
   * shown in the chat as it streams. */
  fixDiagnostic(uri: string, diagnostic: ProtocolDiagnostic): Promise<{ sessionId: string } & PromptResult> {
    const send = () => this.request<{ sessionId: string } & PromptResult>(METHODS.executeCommand, {
      command: SERVER_COMMANDS.fixDiagnostic, arguments: [uri, diagnostic] });
    return this.commandTurn(`Fix: ${diagnostic.message}`, send);
  }

  /** Runs a server command that starts a turn (`send` does the request), keeping the chat state
   * right about it: its session is adopted and shown, and ends when the command answers. */
  async commandTurn<T>(label: string, send: () => Promise<T>): Promise<T> {
    this.commandLabels.push(label);
    this.dispatch({ type: 'commandTurn', delta: 1 });
    try {
      const result = await send();
      const r = result as unknown as { sessionId?: string; stopReason?: string } | null;
      if (r && typeof r.sessionId === 'string' && this.current.sessions[r.sessionId]) {
        this.settleSession(r.sessionId, 'the turn ended');
        const checkpoint = (result as unknown as PromptResult)?._meta?.composer?.checkpoint ?? null;
        this.dispatch({ type: 'turnEnded', sessionId: r.sessionId, stopReason: r.stopReason ?? 'end_turn', checkpoint });
      }
      return result;
    } finally {
      const at = this.commandLabels.indexOf(label);
      if (at >= 0) this.commandLabels.splice(at, 1);
      this.dispatch({ type: 'commandTurn', delta: -1 });
    }
  }

  /** The permission questions of the current session still waiting, oldest first. */
  pending(): { requestId: number; title: string }[] {
    return pendingPermissions(currentSession(this.current)).map((p) => ({ requestId: p.permission.requestId, title: p.permission.title }));
  }
}

function permissionResponse(answer: PermissionAnswer, revisedText: string | null): RequestPermissionResponse {
  if (!('optionId' in answer)) return { outcome: { outcome: 'cancelled' } };
  const outcome = { outcome: 'selected', optionId: answer.optionId } as const;
  return revisedText === null ? { outcome } : { outcome, _meta: { composer: { revisedText } } };
}

function blockText(block: ContentBlock): string {
  const b = block as { type: string; text?: string; uri?: string; name?: string; resource?: { uri?: string } };
  if (b.type === 'text') return b.text ?? '';
  if (b.type === 'resource') return `[${b.resource?.uri ?? 'resource'}]`;
  if (b.type === 'resource_link') return `[${b.name ?? b.uri}]`;
  return '';
}
