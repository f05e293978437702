import * as fs from 'fs';
import * as path from 'path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, initializationOptions, serverCommand } from '../src/common/command';

const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8'));

describe('the composer-lsp command line', () => {
  it('runs `python -m server --stdio` by default', () => {
    expect(serverCommand(DEFAULT_SETTINGS, [], '/repo')).toEqual({
      command: 'python', args: ['-m', 'server', '--stdio', '--workspace', '/repo', '--log-level', 'WARNING'] });
  });

  it('uses the interpreter with its leading arguments, and passes the options on', () => {
    const settings = { ...DEFAULT_SETTINGS, endpoint: 'http://127.0.0.1:8000/v1', model: 'm', logDir: '/logs', args: ['--quantize', 'none'] };
    expect(serverCommand(settings, ['/usr/bin/env', 'python3'], '/repo')).toEqual({ command: '/usr/bin/env', args: [
      'python3', '-m', 'server', '--stdio', '--workspace', '/repo', '--endpoint', 'http://127.0.0.1:8000/v1', '--model', 'm',
      '--log-dir', '/logs', '--log-level', 'WARNING', '--quantize', 'none'] });
  });

  it('runs a composer-lsp executable instead when `path` is set', () => {
    expect(serverCommand({ ...DEFAULT_SETTINGS, path: ['composer-lsp'] }, ['python'], '/r').command).toBe('composer-lsp');
  });

  it('sends the settings as initializationOptions, the mode among them', () => {
    expect(initializationOptions({ ...DEFAULT_SETTINGS, mode: 'review' })).toMatchObject({ mode: 'review', endpoint: null });
  });

  it('declares every setting it reads, and every command, in package.json', () => {
    const declared = Object.keys(pkg.contributes.configuration.properties);
    for (const key of Object.keys(DEFAULT_SETTINGS)) expect(declared).toContain(`composer.${key}`);
    const commands = pkg.contributes.commands.map((c: { command: string }) => c.command);
    const source = fs.readFileSync(path.join(__dirname, '..', 'src', 'commands.ts'), 'utf8');
    for (const id of source.matchAll(/'(composer\.[A-Za-z]+)'/g)) expect(commands).toContain(id[1]);
    expect(commands).not.toContain('composer.fixDiagnostic'); // the language client registers the server's
    expect(pkg.contributes.views.composer[0]).toMatchObject({ type: 'webview', id: 'composer.chat' });
  });
});
