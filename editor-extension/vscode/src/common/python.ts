/* Which Python runs composer-lsp: the `composer.interpreter` setting; else the interpreter selected
 * in the Python extension (ms-python.python), when it is installed; else `python` on PATH. Follows
 * the Python tools extension template's src/common/python.ts, without depending on the extension.
 */

import { Disposable, Event, EventEmitter, extensions, Uri } from 'vscode';
import { traceError, traceLog } from './logging';

interface EnvironmentPath {
  readonly id: string;
  readonly path: string;
}

interface PythonExtensionApi {
  ready?: Promise<void>;
  environments: {
    getActiveEnvironmentPath(resource?: Uri): EnvironmentPath;
    resolveEnvironment(env: EnvironmentPath | string): Promise<{ executable: { uri?: Uri } } | undefined>;
    readonly onDidChangeActiveEnvironmentPath: Event<EnvironmentPath & { resource?: { uri: Uri } }>;
  };
}

const changed = new EventEmitter<void>();
/** Fires when the Python extension's selected interpreter changes. */
export const onDidChangePythonInterpreter: Event<void> = changed.event;

async function pythonApi(): Promise<PythonExtensionApi | undefined> {
  const extension = extensions.getExtension('ms-python.python');
  if (!extension) return undefined;
  try {
    if (!extension.isActive) await extension.activate();
    const exports = extension.exports as { environments?: unknown } | undefined;
    // the environments API is exported by the Python extension since 2023
    return exports?.environments ? (exports as unknown as PythonExtensionApi) : undefined;
  } catch (err) {
    traceError('Could not activate the Python extension:', err);
    return undefined;
  }
}

export async function initializePython(disposables: Disposable[]): Promise<void> {
  const api = await pythonApi();
  if (!api) return;
  disposables.push(api.environments.onDidChangeActiveEnvironmentPath(() => changed.fire()));
}

/** The interpreter to run: the setting if given, else the Python extension's, else `python`. */
export async function getInterpreter(setting: string[], resource?: Uri): Promise<string[]> {
  if (setting.length) return setting;
  const api = await pythonApi();
  if (api) {
    try {
      const env = await api.environments.resolveEnvironment(api.environments.getActiveEnvironmentPath(resource));
      if (env?.executable.uri) return [env.executable.uri.fsPath];
    } catch (err) {
      traceError('Could not resolve the Python extension\'s interpreter:', err);
    }
  }
  traceLog('No interpreter set and none from the Python extension: using `python` from PATH');
  return ['python'];
}
