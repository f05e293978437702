/* The editable proposals (src/proposalDocuments.ts) on the stub of the `vscode` API: the diff it
 * opens, the person's unsaved typing read back, and closing without a "save changes?" prompt; then
 * the whole way from the diff editor to the session client's answer. */

import { beforeEach, describe, expect, it } from 'vitest';
import * as vscode from 'vscode';
import { DIFF_SCHEME, DiffDocuments } from '../src/diffDocuments';
import { currentSession, pendingPermissions } from '../src/protocol/chatState';
import { SessionClient } from '../src/protocol/sessionClient';
import { PROPOSAL_SCHEME, ProposalDocuments } from '../src/proposalDocuments';
import { DIFF, FakeConnection, MODES, revisablePermissionParams } from './support/fakeConnection';
import { FakeTextDocument, stub } from './support/vscodeStub';

let diffs: DiffDocuments;
let proposals: ProposalDocuments;

beforeEach(() => {
  stub.reset();
  diffs = new DiffDocuments();
  proposals = new ProposalDocuments(diffs);
  vscode.workspace.registerFileSystemProvider(PROPOSAL_SCHEME, proposals);
});

const opened = () => stub.executed.filter((e) => e.command === 'vscode.diff').map((e) => e.args as [vscode.Uri, vscode.Uri, string]);
const proposalDocument = () => stub.documents.find((d) => d.uri.scheme === PROPOSAL_SCHEME) as FakeTextDocument;
const settled = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('editable proposals in the diff editor', () => {
  it('opens the file as it is (read-only) against the proposal (editable, named like the file)', async () => {
    await proposals.open(7, DIFF);
    const [[left, right, title]] = opened();
    expect(left.scheme).toBe(DIFF_SCHEME);
    expect(diffs.provideTextDocumentContent(left)).toBe(DIFF.oldText);
    expect(right.toString()).toBe(`${PROPOSAL_SCHEME}:///7/hello.py`);
    expect(new TextDecoder().decode(proposals.readFile(right))).toBe(DIFF.newText);
    expect(title).toContain('edit the right side, then Accept');
  });

  it('reads the person\'s unsaved typing; nothing when they changed nothing or never opened it', async () => {
    expect(proposals.editedText(7)).toBeNull();
    await proposals.open(7, DIFF);
    expect(proposals.editedText(7)).toBeNull();
    proposalDocument().type("print('goodbye, world')\n");
    expect(proposals.editedText(7)).toBe("print('goodbye, world')\n");
    await proposals.open(7, DIFF); // reopened: the same document, edits kept
    expect(new Set(opened().map(([, right]) => right.toString())).size).toBe(1);
    expect(proposals.editedText(7)).toBe("print('goodbye, world')\n");
  });

  it('keeps what the person saved into the proposal after they closed it', async () => {
    await proposals.open(7, DIFF);
    const doc = proposalDocument();
    doc.type('saved text\n');
    await doc.save();
    stub.documents = [];
    expect(proposals.editedText(7)).toBe('saved text\n');
  });

  it('closes a changed proposal without a "save changes?" prompt, and forgets it', async () => {
    await proposals.open(7, DIFF);
    const right = opened()[0][1];
    proposalDocument().type('mine\n');
    proposals.discard(7);
    await settled();
    expect(stub.tabs).toEqual([]);
    expect(stub.savePrompts).toEqual([]);
    expect(proposals.editedText(7)).toBeNull();
    expect(() => proposals.stat(right)).toThrow('not found');
  });

  it('opens no diff for a proposal settled while its document was opening', async () => {
    const opening = proposals.open(7, DIFF);
    proposals.discard(7);
    await opening;
    await settled();
    expect(opened()).toEqual([]);
    expect(stub.tabs).toEqual([]);
    expect(proposals.editedText(7)).toBeNull();
  });

  it('writes nothing but the proposals', () => {
    const elsewhere = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: '/8/new.py' });
    expect(() => proposals.writeFile(elsewhere, new Uint8Array())).toThrow('not found');
    expect(() => proposals.delete(elsewhere)).toThrow('no permissions');
  });
});

describe('a revisable question answered from the diff editor', () => {
  async function ask() {
    const conn = new FakeConnection({ 'session/new': () => ({ sessionId: 's1', modes: MODES }) });
    const client = new SessionClient({ cwd: '/ws', proposals });
    client.attach(conn);
    await client.newSession();
    const answer = conn.ask('session/request_permission', revisablePermissionParams('s1'));
    const [{ permission }] = pendingPermissions(currentSession(client.state));
    await proposals.open(permission.requestId, permission.diffs[0]);
    return { client, answer, requestId: permission.requestId };
  }

  it('Accept sends the edited text as revisedText and closes the proposal unprompted', async () => {
    const { client, answer, requestId } = await ask();
    proposalDocument().type("print('goodbye, world')\n");
    client.answerPermission(requestId, 'allow_once');
    expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'allow_once' },
      _meta: { composer: { revisedText: "print('goodbye, world')\n" } } });
    await settled();
    expect(stub.tabs).toEqual([]);
    expect(stub.savePrompts).toEqual([]);
  });

  it('Reject sends no text, and closes the proposal too', async () => {
    const { client, answer, requestId } = await ask();
    proposalDocument().type('edited, then rejected\n');
    client.answerPermission(requestId, 'reject_once');
    expect(await answer).toEqual({ outcome: { outcome: 'selected', optionId: 'reject_once' } });
    await settled();
    expect(stub.tabs).toEqual([]);
  });
});
