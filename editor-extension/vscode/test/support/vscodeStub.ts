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

export enum FileType { File = 1, Directory = 2 }

export enum FileChangeType { Changed = 1, Created = 2, Deleted = 3 }

export class FileSystemError extends Error {
  constructor(message: string, readonly code: string) {
    super(message);
  }
  static FileNotFound(uri?: Uri): FileSystemError {
    return new FileSystemError(`${uri} not found`, 'FileNotFound');
  }
  static NoPermissions(uri?: Uri): FileSystemError {
    return new FileSystemError(`${uri}: no permissions`, 'NoPermissions');
  }
}

export class TabInputText {
  constructor(readonly uri: Uri) {}
}

export class TabInputTextDiff {
  constructor(readonly original: Uri, readonly modified: Uri) {}
}

/** What the stub needs of a registered FileSystemProvider. */
interface FileSystem {
  readFile(uri: Uri): Uint8Array | Thenable<Uint8Array>;
  writeFile(uri: Uri, content: Uint8Array, options: { create: boolean; overwrite: boolean }): void | Thenable<void>;
}

/** An open text document, loaded from a registered file system: `type` is the person typing
 * (unsaved), `save` writes it back through the provider as VS Code does. */
export class FakeTextDocument {
  isDirty = false;
  constructor(readonly uri: Uri, private text: string) {}
  getText(): string {
    return this.text;
  }
  type(text: string): void {
    this.text = text;
    this.isDirty = true;
  }
  async save(): Promise<boolean> {
    await stub.fileSystems.get(this.uri.scheme)!.writeFile(this.uri, new TextEncoder().encode(this.text), { create: false, overwrite: true });
    this.isDirty = false;
    return true;
  }
}

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
  fileSystems: new Map<string, FileSystem>(),
  documents: [] as FakeTextDocument[],
  /** The editor tabs; `vscode.diff` opens one. */
  tabs: [] as { input: unknown }[],
  /** Documents VS Code would have asked "save changes?" about, closed while dirty. */
  savePrompts: [] as string[],
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
    this.fileSystems.clear();
    this.documents = [];
    this.tabs = [];
    this.savePrompts = [];
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
  tabGroups: {
    get all() {
      return [{ tabs: [...stub.tabs] }];
    },
    close: async (tabs: { input: unknown }[]) => {
      for (const tab of tabs) {
        const shown = tab.input instanceof TabInputTextDiff ? tab.input.modified : (tab.input as TabInputText).uri;
        if (stub.documents.some((d) => d.isDirty && d.uri.toString() === shown.toString())) stub.savePrompts.push(shown.toString());
      }
      stub.tabs = stub.tabs.filter((t) => !tabs.includes(t));
      return true;
    },
  },
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
  registerFileSystemProvider: (scheme: string, provider: FileSystem) => {
    stub.fileSystems.set(scheme, provider);
    return { dispose: () => stub.fileSystems.delete(scheme) };
  },
  get textDocuments() {
    return stub.documents;
  },
  openTextDocument: async (uri: Uri) => {
    const open = stub.documents.find((d) => d.uri.toString() === uri.toString());
    if (open) return open;
    const doc = new FakeTextDocument(uri, new TextDecoder().decode(await stub.fileSystems.get(uri.scheme)!.readFile(uri)));
    stub.documents.push(doc);
    return doc;
  },
};

export const commands = {
  registerCommand: (id: string, fn: (...args: any[]) => unknown) => {
    if (stub.commands.has(id)) throw new Error(`command ${id} already exists`);
    stub.commands.set(id, fn);
    return { dispose: () => stub.commands.delete(id) };
  },
  executeCommand: async (command: string, ...args: unknown[]) => {
    stub.executed.push({ command, args });
    if (command === 'vscode.diff') stub.tabs.push({ input: new TabInputTextDiff(args[0] as Uri, args[1] as Uri) });
    return stub.commands.get(command)?.(...args);
  },
};

export const extensions = { getExtension: () => undefined };
export const languages = { getDiagnostics: () => [] };
