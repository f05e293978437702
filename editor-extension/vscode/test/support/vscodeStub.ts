/* Just enough of the `vscode` module for test/extension.test.ts to activate the extension in Node
 * (vitest.config.mts aliases `vscode` here). It records what the extension registers and shows;
 * `stub` lets a test set the workspace, settings and answers to prompts. Not VS Code: it checks the
 * extension's wiring, not how VS Code renders it.
 */

import * as path from 'path';

type Listener<T> = (e: T) => unknown;

export class EventEmitter<T> {
  private listeners = new Set<Listener<T>>();
  event = (listener: Listener<T>) => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };
  fire(e: T): void {
    for (const l of [...this.listeners]) l(e);
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export class Uri {
  private constructor(readonly scheme: string, readonly path: string) {}
  static file(p: string): Uri {
    return new Uri('file', p);
  }
  static from(c: { scheme: string; path: string }): Uri {
    return new Uri(c.scheme, c.path);
  }
  static joinPath(base: Uri, ...segments: string[]): Uri {
    return new Uri(base.scheme, path.posix.join(base.path, ...segments));
  }
  get fsPath(): string {
    return this.path;
  }
  toString(): string {
    return `${this.scheme}://${this.path}`;
  }
}

export class Position {
  constructor(readonly line: number, readonly character: number) {}
}

export class Range {
  constructor(readonly start: Position, readonly end: Position) {}
  contains(p: Position): boolean {
    return p.line >= this.start.line && p.line <= this.end.line;
  }
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export enum StatusBarAlignment { Left = 1, Right = 2 }

export const stub = {
  folders: [] as { uri: Uri; name: string; index: number }[],
  settings: {} as Record<string, unknown>,
  configListeners: new EventEmitter<{ affectsConfiguration(s: string): boolean }>(),
  commands: new Map<string, (...args: any[]) => unknown>(),
  executed: [] as { command: string; args: unknown[] }[],
  views: new Map<string, any>(),
  statusBar: [] as { text: string; tooltip: string }[],
  messages: [] as { level: string; text: string }[],
  log: [] as string[],
  answers: [] as unknown[],
  reset(): void {
    this.folders = [];
    this.settings = {};
    this.commands.clear();
    this.executed = [];
    this.views.clear();
    this.statusBar = [];
    this.messages = [];
    this.log = [];
    this.answers = [];
  },
};

const disposable = { dispose: () => undefined };

function channel(name: string) {
  const write = (level: string) => (text: string) => stub.log.push(`[${name} ${level}] ${text}`);
  return { name, appendLine: write('log'), append: write('log'), trace: write('trace'), debug: write('debug'), info: write('info'),
    warn: write('warn'), error: write('error'), show: () => undefined, clear: () => undefined, dispose: () => undefined };
}

function message(level: string) {
  return async (text: string) => {
    stub.messages.push({ level, text });
    return stub.answers.shift();
  };
}

export const window = {
  createOutputChannel: (name: string) => channel(name),
  registerWebviewViewProvider: (id: string, provider: unknown) => {
    stub.views.set(id, provider);
    return disposable;
  },
  createStatusBarItem: () => {
    const item = { text: '', tooltip: '', name: '', command: '', backgroundColor: undefined as unknown,
      show: () => undefined, dispose: () => undefined };
    return new Proxy(item, {
      set(target, key, value) {
        (target as any)[key] = value;
        if (key === 'tooltip') stub.statusBar.push({ text: target.text, tooltip: String(value) });
        return true;
      },
    });
  },
  showErrorMessage: message('error'),
  showInformationMessage: message('info'),
  showWarningMessage: message('warning'),
  showInputBox: async () => stub.answers.shift(),
  showQuickPick: async () => stub.answers.shift(),
  showTextDocument: async () => undefined,
  activeTextEditor: undefined as unknown,
};

export const workspace = {
  get workspaceFolders() {
    return stub.folders;
  },
  getConfiguration: (section: string) => ({
    get: <T>(key: string): T | undefined => stub.settings[`${section}.${key}`] as T | undefined,
  }),
  onDidChangeConfiguration: (l: Listener<{ affectsConfiguration(s: string): boolean }>) => stub.configListeners.event(l),
  registerTextDocumentContentProvider: () => disposable,
};

export const commands = {
  registerCommand: (id: string, fn: (...args: any[]) => unknown) => {
    if (stub.commands.has(id)) throw new Error(`command ${id} already exists`);
    stub.commands.set(id, fn);
    return { dispose: () => stub.commands.delete(id) };
  },
  executeCommand: async (command: string, ...args: unknown[]) => {
    stub.executed.push({ command, args });
    return stub.commands.get(command)?.(...args);
  },
};

export const extensions = { getExtension: () => undefined };
export const languages = { getDiagnostics: () => [] };
