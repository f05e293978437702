/* The messages between the chat webview and the extension, and the view model the webview paints.
 * Types only: the webview script (src/webview/main.ts) imports them too.
 *
 * extension -> webview: `ToView` ({type: 'state'}: the header, the order of the items, and only the
 * items whose `rev` changed since the last message; `reset` when the webview must start over).
 * webview -> extension: `FromView` (checked by viewMessages.ts before anything is done with it).
 */

import type { DiffLine, DiffModel } from './diff';

export interface ViewOption {
  optionId: string;
  name: string;
  kind: string;
  /** Shown as a main button (Accept / Reject); the "always" answers are secondary. */
  primary: boolean;
}

export interface ViewPermission {
  requestId: number;
  title: string;
  reasons: string[];
  /** The command asked about, shown whole. */
  details: string[];
  /** A weaker sandbox's warning (what the command could do there). */
  warning: string | null;
  diffs: DiffModel[];
  /** Its one diff may be edited in the diff editor before it is accepted. */
  revisable: boolean;
  options: ViewOption[];
  state: 'pending' | 'answered' | 'cancelled';
  /** What was answered, for the card once it is settled. */
  answerLabel: string | null;
}

export type ViewOutput =
  | { type: 'text'; text: string; lines: number; open: boolean; live: boolean }
  | { type: 'diff'; index: number; diff: DiffModel };

export interface ViewReviewHunk {
  index: number;
  header: string;
  /** The new side's first changed line (1-based): where opening the file puts the cursor. */
  line: number;
  lines: DiffLine[];
  kept: boolean;
  /** For screen readers: "config.py, lines 15 to 21". */
  label: string;
}

export interface ViewReviewFile {
  path: string;
  displayPath: string;
  /** The file on disk to open; null when the change deleted it. */
  absPath: string | null;
  status: string;
  binary: boolean;
  refused: string | null;
  hunks: ViewReviewHunk[];
}

export interface ViewReview {
  id: string; rev: number; type: 'review';
  /** closed: only "Review changes"; open: the listing; stale: an earlier turn's, no buttons. */
  state: 'closed' | 'open' | 'stale';
  busy: boolean;
  error: string | null;
  files: ViewReviewFile[];
  /** Some listed hunk is neither kept nor undone yet. */
  canKeepAll: boolean;
}

export type ViewItem =
  | { id: string; rev: number; type: 'message'; role: 'user' | 'agent' | 'thought'; label: string; text: string }
  | { id: string; rev: number; type: 'notice'; level: 'info' | 'error'; text: string }
  | {
      id: string; rev: number; type: 'tool'; title: string; kind: string; icon: string; kindLabel: string;
      status: string; statusLabel: string; locations: { label: string; path: string; line?: number }[];
      outputs: ViewOutput[]; input: string | null; error: string | null; permission: ViewPermission | null;
    }
  | ViewReview;

export interface ViewHeader {
  server: { status: 'stopped' | 'starting' | 'running' | 'failed'; message: string | null };
  sessionId: string | null;
  title: string;
  mode: string;
  modes: { id: string; name: string; description?: string }[];
  running: boolean;
  loading: boolean;
  canSend: boolean;
  canCancel: boolean;
  canUndo: boolean;
  usage: string | null;
  plan: { content: string; status: string }[];
  pendingPermissions: number;
  error: string | null;
  /** The sandbox level, with its warning when weaker than bubblewrap; null while unknown. */
  isolation: { level: string; weaker: boolean; message: string } | null;
}

export type ToView = { type: 'state'; reset: boolean; header: ViewHeader; order: string[]; items: ViewItem[] };

export type FromView =
  | { type: 'ready' }
  | { type: 'send'; text: string }
  | { type: 'cancel' }
  | { type: 'newChat' }
  | { type: 'history' }
  | { type: 'undo' }
  | { type: 'setMode'; modeId: string }
  | { type: 'answer'; requestId: number; optionId: string }
  | { type: 'openDiff'; itemId: string; index: number; source: 'permission' | 'output' }
  | { type: 'openLocation'; path: string; line?: number }
  | { type: 'reviewChanges'; itemId: string }
  | { type: 'reviewHunk'; itemId: string; path: string; index: number; verdict: 'undo' | 'keep' }
  | { type: 'keepAll'; itemId: string };
