/* The protocol layer runs in plain Node: nothing in it may import `vscode`. */
import * as fs from 'fs';
import * as path from 'path';
import { describe, expect, it } from 'vitest';

const SRC = path.join(__dirname, '..', 'src');
const PURE = ['protocol', 'common/command.ts', 'webview'];

function files(p: string): string[] {
  const full = path.join(SRC, p);
  if (fs.statSync(full).isFile()) return [full];
  return fs.readdirSync(full).filter((f) => f.endsWith('.ts')).map((f) => path.join(full, f));
}

describe('layering', () => {
  it('keeps `vscode` out of the protocol layer and the webview', () => {
    const offenders = PURE.flatMap(files).filter((f) => /from\s+['"]vscode(-languageclient[^'"]*)?['"]|require\(['"]vscode/.test(fs.readFileSync(f, 'utf8')));
    expect(offenders).toEqual([]);
  });
});
