/* A stand-in for vscode-languageclient's LanguageClient in test/extension.test.ts: it runs the
 * command the extension configured (serverOptions.run) and speaks LSP with it through
 * vscode-languageserver-protocol, passing the clientOptions' initializationOptions, and reports
 * state changes as the real one does (Starting, Running, Stopped). */

import { connectServer, Server } from './composer';

export enum State { Stopped = 1, Running = 2, Starting = 3 }
export enum RevealOutputChannelOn { Debug = 0, Info = 1, Warn = 2, Error = 3, Never = 4 }

type Handler = (params: any) => any;

export class LanguageClient {
  static instances: LanguageClient[] = [];
  state = State.Stopped;
  server: Server | undefined;
  private listeners = new Set<(e: { oldState: State; newState: State }) => void>();
  readonly code2ProtocolConverter = { asDiagnostic: (d: unknown) => d };

  constructor(readonly id: string, readonly name: string, readonly serverOptions: any, readonly clientOptions: any) {
    LanguageClient.instances.push(this);
  }

  onDidChangeState(listener: (e: { oldState: State; newState: State }) => void) {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  private setState(newState: State): void {
    const oldState = this.state;
    this.state = newState;
    for (const l of [...this.listeners]) l({ oldState, newState });
  }

  async start(): Promise<void> {
    this.setState(State.Starting);
    const { command, args, options } = this.serverOptions.run;
    const folder = this.clientOptions.workspaceFolder.uri.fsPath;
    this.server = await connectServer(command, args, options, folder, this.clientOptions.initializationOptions);
    this.setState(State.Running);
  }

  async stop(): Promise<void> {
    await this.server?.stop();
    this.setState(State.Stopped);
  }

  private get connection() {
    if (!this.server) throw new Error('Client is not running');
    return this.server.connection;
  }

  sendRequest(method: string, params?: unknown) {
    return this.connection.sendRequest(method, params);
  }

  sendNotification(method: string, params?: unknown) {
    return this.connection.sendNotification(method, params);
  }

  onRequest(method: string, handler: Handler) {
    return this.connection.onRequest(method, handler);
  }

  onNotification(method: string, handler: Handler) {
    return this.connection.onNotification(method, handler);
  }
}
