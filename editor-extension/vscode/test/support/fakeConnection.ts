/* An in-memory RpcConnection for unit tests: records what the client sends, answers requests with
 * the handlers a test sets, and lets the test play the server (notify, ask).
 *
 *   const conn = new FakeConnection({'session/new': () => ({sessionId: 's1', modes})});
 *   client.attach(conn);
 *   conn.notify('session/update', {...});
 *   const answer = await conn.ask('session/request_permission', {...});
 */

import type { Disposable, RpcConnection } from '../../src/protocol/sessionClient';

type Handler = (params: any) => unknown;

export class FakeConnection implements RpcConnection {
  sent: { method: string; params: any }[] = [];
  notifications: { method: string; params: any }[] = [];
  private notificationHandlers = new Map<string, (p: any) => void>();
  private requestHandlers = new Map<string, Handler>();

  constructor(public responders: Record<string, Handler> = {}) {}

  async sendRequest<R>(method: string, params: unknown): Promise<R> {
    this.sent.push({ method, params });
    const responder = this.responders[method];
    if (!responder) throw new Error(`no responder for ${method}`);
    return (await responder(params)) as R;
  }

  sendNotification(method: string, params: unknown): void {
    this.notifications.push({ method, params });
  }

  onNotification(method: string, handler: (params: any) => void): Disposable {
    this.notificationHandlers.set(method, handler);
    return { dispose: () => this.notificationHandlers.delete(method) };
  }

  onRequest(method: string, handler: Handler): Disposable {
    this.requestHandlers.set(method, handler);
    return { dispose: () => this.requestHandlers.delete(method) };
  }

  /** The server sends a notification. */
  notify(method: string, params: unknown): void {
    this.notificationHandlers.get(method)?.(params);
  }

  /** The server sends a request; resolves with the client's answer. */
  ask(method: string, params: unknown): Promise<any> {
    const handler = this.requestHandlers.get(method);
    if (!handler) throw new Error(`the client does not handle ${method}`);
    return Promise.resolve(handler(params));
  }

  get handled(): string[] {
    return [...this.notificationHandlers.keys(), ...this.requestHandlers.keys()];
  }
}

export const MODES = {
  currentModeId: 'agent',
  availableModes: [{ id: 'agent', name: 'Agent' }, { id: 'review', name: 'Review edits' }],
};

export const chunk = (text: string, kind = 'agent_message_chunk') => ({ sessionUpdate: kind, content: { type: 'text', text } });

export const DIFF = { type: 'diff' as const, path: '/ws/hello.py', oldText: "print('hello')\n", newText: "print('goodbye')\n" };

export const OPTIONS = [
  { optionId: 'allow_once', name: 'Allow', kind: 'allow_once' as const },
  { optionId: 'allow_always', name: 'Always allow', kind: 'allow_always' as const },
  { optionId: 'reject_once', name: 'Reject', kind: 'reject_once' as const },
  { optionId: 'reject_always', name: 'Always reject', kind: 'reject_always' as const },
];

export function permissionParams(sessionId: string, toolCallId = 'call_0') {
  return {
    sessionId,
    toolCall: { toolCallId, title: 'edit_file hello.py', kind: 'edit' as const, status: 'pending' as const,
      rawInput: { path: 'hello.py' }, content: [DIFF] },
    options: OPTIONS,
    _meta: { composer: { asked: [{ kind: 'path', text: 'hello.py' }] } },
  };
}

/** A question whose one diff the person may edit before allowing it (`_meta.composer.revisable`). */
export function revisablePermissionParams(sessionId: string, toolCallId = 'call_0') {
  const params = permissionParams(sessionId, toolCallId);
  return { ...params, _meta: { composer: { ...params._meta.composer, revisable: true } } };
}

/** composer/isolation on a machine without bubblewrap (agent/isolation.py's to_dict). */
export const WEAK = {
  level: 'none', weaker: true, restricted: true, letsThrough: 'everything you can do yourself', optIn: null,
  message: 'sandbox isolation: none, weaker than bubblewrap; it lets through everything you can do yourself.',
};

/** The question about a terminal command where the sandbox is weaker: the command shown whole,
 * the warning, and no "allow always" (server/hub.py). */
export function terminalPermissionParams(sessionId: string, command = 'make all', toolCallId = 'call_1') {
  return {
    sessionId,
    toolCall: { toolCallId, title: `run_terminal ${command}`, kind: 'execute' as const, status: 'pending' as const,
      rawInput: { command }, content: [
        { type: 'content' as const, content: { type: 'text', text: `$ ${command}` } },
        { type: 'content' as const, content: { type: 'text', text: "Warning: This command would run with sandbox isolation 'none', weaker than bubblewrap." } },
      ] },
    options: OPTIONS.filter((o) => o.kind !== 'allow_always'),
  };
}

/** The checkpoint a turn that changed files reports (`_meta.composer.checkpoint`). */
export const CHECKPOINT = 'cp1';

/** composer/turnChanges hunks of config.py, 20 lines `value_i = i`: value_1 and value_17 changed. */
export const HUNK_0 = { index: 0, header: '@@ -1,5 +1,5 @@', digest: 'd0',
  lines: [' value_0 = 0', '-value_1 = 1', '+value_1 = 100', ' value_2 = 2', ' value_3 = 3', ' value_4 = 4'] };
export const HUNK_1 = { index: 1, header: '@@ -15,6 +15,6 @@', digest: 'd1',
  lines: [' value_14 = 14', ' value_15 = 15', ' value_16 = 16', '-value_17 = 17', '+value_17 = 1700', ' value_18 = 18', ' value_19 = 19'] };

export const TURN_CHANGES = {
  checkpointId: CHECKPOINT,
  files: [
    { path: 'config.py', status: 'modified', binary: false, hunks: [HUNK_0, HUNK_1] },
    { path: 'logo.png', status: 'added', binary: true, hunks: [] },
  ],
};
