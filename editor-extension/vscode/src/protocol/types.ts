/* The session protocol composer-lsp speaks next to LSP: ACP v1's payloads (camelCase keys,
 * `_meta` for vendor data) on the methods session/new, /load, /list, /prompt, /set_mode, /cancel,
 * /close, composer/rewind, composer/turnChanges, composer/reviewHunks, the notification session/update and the server's request
 * session/request_permission. See the repository's README, "The language server".
 *
 * Types only, and no `vscode` import: this layer runs in Node tests as well as in the extension.
 */

export type ModeId = 'agent' | 'review' | (string & {});

export interface SessionMode {
  id: ModeId;
  name: string;
  description?: string;
}

export interface SessionModes {
  currentModeId: ModeId;
  availableModes: SessionMode[];
}

export interface TextBlock {
  type: 'text';
  text: string;
}

export interface ResourceBlock {
  type: 'resource';
  resource: { uri: string; text: string; mimeType?: string };
}

export interface ResourceLinkBlock {
  type: 'resource_link';
  uri: string;
  name?: string;
}

export type ContentBlock = TextBlock | ResourceBlock | ResourceLinkBlock | { type: string; [key: string]: unknown };

export interface DiffContent {
  type: 'diff';
  path: string;
  oldText?: string | null;
  newText: string;
}

export type ToolCallContent =
  | { type: 'content'; content: ContentBlock }
  | DiffContent
  | { type: 'terminal'; terminalId: string };

export type ToolKind =
  | 'read' | 'edit' | 'delete' | 'move' | 'search' | 'execute' | 'think' | 'fetch' | 'switch_mode' | 'other';

export type ToolStatus = 'pending' | 'in_progress' | 'completed' | 'failed';

export interface ToolLocation {
  path: string;
  line?: number;
}

/** The fields of a tool call; `tool_call` carries them all, `tool_call_update` only the changed ones. */
export interface ToolCallFields {
  toolCallId: string;
  title?: string;
  kind?: ToolKind;
  status?: ToolStatus;
  rawInput?: unknown;
  rawOutput?: unknown;
  locations?: ToolLocation[];
  content?: ToolCallContent[];
}

export interface PlanEntry {
  content: string;
  priority?: 'high' | 'medium' | 'low';
  status?: 'pending' | 'in_progress' | 'completed';
}

export type SessionUpdate =
  | { sessionUpdate: 'user_message_chunk' | 'agent_message_chunk' | 'agent_thought_chunk'; content: ContentBlock }
  | ({ sessionUpdate: 'tool_call' | 'tool_call_update' } & ToolCallFields)
  | { sessionUpdate: 'plan'; entries: PlanEntry[] }
  | { sessionUpdate: 'usage_update'; used: number; size: number; cost?: { amount: number; currency: string } }
  | { sessionUpdate: 'current_mode_update'; currentModeId: ModeId }
  | { sessionUpdate: 'session_info_update'; title?: string; updatedAt?: string }
  | { sessionUpdate: string; [key: string]: unknown };

export interface SessionNotification {
  sessionId: string;
  update: SessionUpdate;
}

export type PermissionOptionKind = 'allow_once' | 'allow_always' | 'reject_once' | 'reject_always';

export interface PermissionOption {
  optionId: string;
  name: string;
  kind: PermissionOptionKind;
}

export interface RequestPermissionParams {
  sessionId: string;
  toolCall: ToolCallFields;
  options: PermissionOption[];
  /** `revisable`: the person may change the one diff in toolCall.content before allowing it (then
   * the answer carries their text as `revisedText`). */
  _meta?: { composer?: { asked?: { kind: string; text: string }[]; revisable?: boolean } };
}

export type PermissionOutcome = { outcome: 'selected'; optionId: string } | { outcome: 'cancelled' };

export interface RequestPermissionResponse {
  outcome: PermissionOutcome;
  /** Only on an allow answer to a revisable question whose proposal the person changed: the whole
   * new text of the file, which the server writes instead of the model's. */
  _meta?: { composer: { revisedText: string } };
}

export interface NewSessionResult {
  sessionId: string;
  modes?: SessionModes;
}

export type StopReason = 'end_turn' | 'max_tokens' | 'max_turn_requests' | 'refusal' | 'cancelled' | (string & {});

export interface PromptResult {
  stopReason: StopReason;
  _meta?: { composer?: { steps?: number; toolCalls?: number; checkpoint?: string | null } };
}

export interface SessionInfo {
  sessionId: string;
  cwd?: string;
  title?: string | null;
  updatedAt?: string;
}

export interface RewindResult {
  /** null: the turn changed no file, and only left the conversation (asked with `conversation: true`). */
  checkpointId: string | null;
  changes?: unknown;
  /** Open buffers put back as the checkpoint saw them (editor edits), and those the editor refused. */
  buffers?: { reverted: string[]; refused: Record<string, string> };
  /** The turn left the conversation too (asked with `conversation: true`). */
  forgotTurn?: boolean;
  backupCheckpointId?: string | null;
}

/** One hunk of `composer/turnChanges`: unified-diff lines (" ctx", "-old", "+new") of the file at
 * the checkpoint against the file now. Picks name it by `index` AND `digest` of the latest listing. */
export interface TurnHunk {
  index: number;
  /** "@@ -a,b +c,d @@" (1-based starts). */
  header: string;
  lines: string[];
  digest: string;
}

export interface TurnFileChanges {
  /** Relative to the session's workspace. */
  path: string;
  status: 'added' | 'modified' | 'deleted' | (string & {});
  /** Binary or too large: listed without hunks (only a whole-turn rewind restores it). */
  binary: boolean;
  hunks: TurnHunk[];
}

/** `composer/turnChanges {sessionId, checkpointId?}`: the changes since the checkpoint taken before
 * the last turn's first change (or `checkpointId`'s). */
export interface TurnChangesResult {
  checkpointId: string;
  files: TurnFileChanges[];
}

export interface HunkPick {
  path: string;
  index: number;
  digest: string;
}

/** `composer/reviewHunks {sessionId, checkpointId?, undo?, keep?}`: `refused` maps a path to why it
 * was left untouched (it changed since it was listed: list again). */
export interface ReviewHunksResult {
  undone: { path: string; index: number }[];
  /** The `keep` picks taken (absent from older servers: every pick in a file not refused). */
  kept?: { path: string; index: number }[];
  refused: Record<string, string>;
  /** composer/rewind {sessionId, checkpointId: backupCheckpointId} undoes the undo. */
  backupCheckpointId: string | null;
}

/** The LSP Diagnostic as `composer.fixDiagnostic` takes it (protocol positions, 0-based). */
export interface ProtocolDiagnostic {
  range: { start: { line: number; character: number }; end: { line: number; character: number } };
  message: string;
  severity?: number;
  source?: string;
  code?: string | number;
}

/** `composer/isolation`: the sandbox level terminal commands run with (agent/isolation.py). */
export interface IsolationStatus {
  level: string;
  /** Weaker than bubblewrap (unshare, none). */
  weaker: boolean;
  /** Weaker and not opted in: every terminal command is asked about, with no "allow always". */
  restricted: boolean;
  letsThrough: string;
  optIn: string | null;
  message: string;
}

export const METHODS = {
  newSession: 'session/new',
  loadSession: 'session/load',
  listSessions: 'session/list',
  prompt: 'session/prompt',
  setMode: 'session/set_mode',
  cancel: 'session/cancel',
  close: 'session/close',
  rewind: 'composer/rewind',
  turnChanges: 'composer/turnChanges',
  reviewHunks: 'composer/reviewHunks',
  isolation: 'composer/isolation',
  update: 'session/update',
  requestPermission: 'session/request_permission',
  executeCommand: 'workspace/executeCommand',
} as const;

/** The server's `workspace/executeCommand` targets (the language client registers them as VS Code
 * commands by these ids, so the extension's own commands use other ids). */
export const SERVER_COMMANDS = {
  prompt: 'composer.prompt',
  fixDiagnostic: 'composer.fixDiagnostic',
  rewind: 'composer.rewind',
} as const;
