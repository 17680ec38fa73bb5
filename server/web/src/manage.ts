// Managing a document from its page (SPEC B1a): sharing — who has access,
// adding a person by account name with a role, changing a role, removing
// someone — renaming, archiving and unarchiving, and deleting after a
// confirmation. Owners see every control; editors may rename; everyone
// sees who has access. Each act is an HTTP call (docs/protocol.md); what it
// changed reaches every open page through the document's feed.

import { ApiError, api, describe } from './api';
import { byId, el } from './dom';
import type { DocumentInfo, MemberInfo, Role } from './wire';

export interface ManageOptions {
  token: string;
  /** Who is looking. */
  account: string;
  onAuthFailure: (e: unknown) => boolean;
  /** The document as the server answered an act (renamed, archived…). */
  onChanged: (doc: DocumentInfo) => void;
  /** The document was deleted. */
  onDeleted: (title: string) => void;
}

const ROLE_WORDS: Record<string, string> = { owner: 'Owner', editor: 'Editor', viewer: 'Viewer' };

export class DocumentControls {
  private doc: DocumentInfo;
  private destroyed = false;
  private readonly title = byId<HTMLElement>('doc-title');
  private readonly renameForm = byId<HTMLFormElement>('rename-form');
  private readonly renameInput = byId<HTMLInputElement>('rename-input');
  private readonly renameError = byId<HTMLElement>('rename-error');
  private readonly share = byId<HTMLButtonElement>('share-button');
  private readonly menuButton = byId<HTMLButtonElement>('doc-menu-button');
  private readonly menu = byId<HTMLElement>('doc-menu');
  private readonly renameButton = byId<HTMLButtonElement>('rename-button');
  private readonly archiveButton = byId<HTMLButtonElement>('archive-button');
  private readonly deleteButton = byId<HTMLButtonElement>('delete-button');
  private readonly unarchive = byId<HTMLButtonElement>('unarchive-button');
  private readonly shareDialog = byId<HTMLDialogElement>('share-dialog');
  private readonly memberList = byId<HTMLUListElement>('member-list');
  private readonly shareForm = byId<HTMLFormElement>('share-form');
  private readonly shareAccount = byId<HTMLInputElement>('share-account');
  private readonly shareRole = byId<HTMLSelectElement>('share-role');
  private readonly shareError = byId<HTMLElement>('share-error');
  private readonly deleteDialog = byId<HTMLDialogElement>('delete-dialog');
  private readonly deleteError = byId<HTMLElement>('delete-error');
  private readonly listeners: [EventTarget, string, EventListener][] = [];

  constructor(
    doc: DocumentInfo,
    private readonly o: ManageOptions,
  ) {
    this.doc = doc;
    this.on(this.share, 'click', () => void this.openShare());
    this.on(this.menuButton, 'click', () => this.toggleMenu());
    this.on(this.menu, 'keydown', (ev) => this.menuKeys(ev as KeyboardEvent));
    this.on(document, 'click', (ev) => {
      const t = ev.target;
      if (t instanceof Node && !this.menu.contains(t) && !this.menuButton.contains(t)) this.closeMenu(false);
    });
    this.on(this.renameButton, 'click', () => this.startRename());
    this.on(this.title, 'dblclick', () => this.canRename() && this.startRename());
    this.on(this.renameForm, 'submit', (ev) => {
      ev.preventDefault();
      void this.rename();
    });
    this.on(byId('rename-cancel'), 'click', () => this.stopRename());
    this.on(this.renameInput, 'keydown', (ev) => (ev as KeyboardEvent).key === 'Escape' && this.stopRename());
    this.on(this.archiveButton, 'click', () => void this.setArchived(!this.doc.archived));
    this.on(this.unarchive, 'click', () => void this.setArchived(false));
    this.on(this.deleteButton, 'click', () => this.askDelete());
    this.on(byId('delete-cancel'), 'click', () => this.deleteDialog.close());
    this.on(byId('delete-confirm'), 'click', () => void this.remove());
    this.on(this.shareForm, 'submit', (ev) => {
      ev.preventDefault();
      void this.addMember();
    });
    this.show(doc);
  }

  destroy(): void {
    this.destroyed = true;
    for (const [target, type, listener] of this.listeners) target.removeEventListener(type, listener);
    this.listeners.length = 0;
    if (this.shareDialog.open) this.shareDialog.close();
    if (this.deleteDialog.open) this.deleteDialog.close();
    this.stopRename();
    this.closeMenu(false);
  }

  private on(target: EventTarget, type: string, listener: EventListener): void {
    target.addEventListener(type, listener);
    this.listeners.push([target, type, listener]);
  }

  private owner(): boolean {
    return this.doc.role === 'owner';
  }

  private canRename(): boolean {
    return this.doc.role !== 'viewer' && !this.doc.archived;
  }

  /** Shows the controls `doc` allows. */
  show(doc: DocumentInfo): void {
    this.doc = doc;
    this.title.textContent = doc.title || 'Untitled';
    this.share.hidden = false;
    this.share.textContent = this.owner() ? 'Share' : 'People';
    this.menuButton.hidden = !(this.owner() || this.canRename());
    this.renameButton.hidden = !this.canRename();
    this.archiveButton.hidden = !this.owner();
    this.archiveButton.textContent = doc.archived ? 'Unarchive' : 'Archive';
    this.deleteButton.hidden = !this.owner();
    this.unarchive.hidden = !(this.owner() && doc.archived);
    if (this.shareDialog.open) void this.loadMembers();
  }

  // ------------------------------------------------------------ menu

  private toggleMenu(): void {
    if (this.menu.hidden) {
      this.menu.hidden = false;
      this.menuButton.setAttribute('aria-expanded', 'true');
      this.items()[0]?.focus();
    } else {
      this.closeMenu(true);
    }
  }

  private closeMenu(refocus: boolean): void {
    if (this.menu.hidden) return;
    this.menu.hidden = true;
    this.menuButton.setAttribute('aria-expanded', 'false');
    if (refocus) this.menuButton.focus();
  }

  private items(): HTMLButtonElement[] {
    return [...this.menu.querySelectorAll<HTMLButtonElement>('.menu-item')].filter((b) => !b.hidden);
  }

  private menuKeys(ev: KeyboardEvent): void {
    const items = this.items();
    const at = items.indexOf(document.activeElement as HTMLButtonElement);
    if (ev.key === 'Escape') {
      ev.preventDefault();
      this.closeMenu(true);
    } else if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
      ev.preventDefault();
      const step = ev.key === 'ArrowDown' ? 1 : -1;
      items[(at + step + items.length) % items.length]?.focus();
    } else if (ev.key === 'Tab') {
      this.closeMenu(false);
    }
  }

  // ------------------------------------------------------------ rename

  private startRename(): void {
    this.closeMenu(false);
    if (!this.canRename()) return;
    this.renameInput.value = this.doc.title;
    this.title.hidden = true;
    this.renameForm.hidden = false;
    this.renameError.hidden = true;
    this.renameInput.focus();
    this.renameInput.select();
  }

  private stopRename(): void {
    this.renameForm.hidden = true;
    this.title.hidden = false;
  }

  private async rename(): Promise<void> {
    const title = this.renameInput.value.trim();
    if (!title) {
      this.fail(this.renameError, 'A title cannot be blank.');
      return;
    }
    try {
      const doc = await api<DocumentInfo>('PATCH', this.path(''), this.o.token, { title });
      if (this.destroyed) return;
      this.stopRename();
      this.o.onChanged(doc);
    } catch (e) {
      if (!this.o.onAuthFailure(e)) this.fail(this.renameError, `Could not rename: ${describe(e)}`);
    }
  }

  // ------------------------------------------------------------ archive, delete

  private async setArchived(archived: boolean): Promise<void> {
    this.closeMenu(false);
    try {
      const doc = await api<DocumentInfo>('POST', this.path(archived ? '/archive' : '/unarchive'), this.o.token);
      if (!this.destroyed) this.o.onChanged(doc);
    } catch (e) {
      if (!this.o.onAuthFailure(e)) this.fail(this.renameError, `Could not ${archived ? 'archive' : 'unarchive'}: ${describe(e)}`);
    }
  }

  private askDelete(): void {
    this.closeMenu(false);
    byId('delete-text').textContent =
      `“${this.doc.title || 'Untitled'}” will be deleted for everyone: its text, its decisions and their answers, ` +
      'its Chat and its Planner session. This cannot be undone.';
    this.deleteError.hidden = true;
    this.deleteDialog.showModal();
    byId<HTMLButtonElement>('delete-cancel').focus();
  }

  private async remove(): Promise<void> {
    const confirm = byId<HTMLButtonElement>('delete-confirm');
    confirm.disabled = true;
    try {
      await api('DELETE', this.path(''), this.o.token);
      this.deleteDialog.close();
      this.o.onDeleted(this.doc.title);
    } catch (e) {
      if (!this.o.onAuthFailure(e)) this.fail(this.deleteError, `Could not delete: ${describe(e)}`);
    } finally {
      confirm.disabled = false;
    }
  }

  // ------------------------------------------------------------ sharing

  private async openShare(): Promise<void> {
    byId('share-doc-title').textContent = `“${this.doc.title || 'Untitled'}”`;
    byId('share-hint').textContent = this.owner()
      ? 'Editors can change the text and answer decisions; viewers can read and follow along.'
      : 'Only the owner can change who has access.';
    this.shareForm.hidden = !this.owner();
    this.shareError.hidden = true;
    this.memberList.replaceChildren();
    this.shareDialog.showModal();
    (this.owner() ? this.shareAccount : byId<HTMLElement>('share-dialog').querySelector<HTMLElement>('.dialog-x'))?.focus();
    await this.loadMembers();
  }

  private async loadMembers(): Promise<void> {
    try {
      const { members } = await api<{ members: MemberInfo[] }>('GET', this.path('/members'), this.o.token);
      if (!this.destroyed) this.memberList.replaceChildren(...members.map((m) => this.memberRow(m)));
    } catch (e) {
      if (!this.o.onAuthFailure(e)) this.fail(this.shareError, `Could not list who has access: ${describe(e)}`);
    }
  }

  private memberRow(m: MemberInfo): HTMLLIElement {
    const li = el('li', 'member');
    li.dataset.account = m.account;
    li.append(el('span', 'member-name', m.account === this.o.account ? `${m.account} (you)` : m.account));
    if (!this.owner() || m.role === 'owner') {
      li.append(el('span', 'member-role', ROLE_WORDS[m.role] ?? m.role));
      return li;
    }
    const select = el('select', 'member-role-select');
    select.setAttribute('aria-label', `Role of ${m.account}`);
    for (const role of ['editor', 'viewer'] as Role[]) {
      const option = el('option', '', ROLE_WORDS[role]);
      option.value = role;
      option.selected = role === m.role;
      select.append(option);
    }
    select.addEventListener('change', () => void this.setRole(m.account, select.value as Role));
    const remove = el('button', 'secondary member-remove', 'Remove');
    remove.type = 'button';
    remove.setAttribute('aria-label', `Remove ${m.account}`);
    remove.addEventListener('click', () => void this.removeMember(m.account));
    li.append(select, remove);
    return li;
  }

  private async addMember(): Promise<void> {
    const account = this.shareAccount.value.trim();
    if (!account) return;
    const submit = byId<HTMLButtonElement>('share-submit');
    submit.disabled = true;
    this.shareError.hidden = true;
    try {
      await this.setRole(account, this.shareRole.value as Role);
      this.shareAccount.value = '';
    } finally {
      submit.disabled = false;
    }
  }

  private async setRole(account: string, role: Role): Promise<void> {
    try {
      await api<MemberInfo>('POST', this.path('/members'), this.o.token, { account, role });
      await this.loadMembers();
    } catch (e) {
      if (this.o.onAuthFailure(e)) return;
      const why =
        e instanceof ApiError && e.code === 'unknown_account'
          ? `There is no account named “${account}”. Check the name with the person.`
          : describe(e);
      this.fail(this.shareError, `Could not share with ${account}: ${why}`);
      await this.loadMembers();
    }
  }

  private async removeMember(account: string): Promise<void> {
    try {
      await api('DELETE', this.path(`/members/${encodeURIComponent(account)}`), this.o.token);
      await this.loadMembers();
    } catch (e) {
      if (!this.o.onAuthFailure(e)) this.fail(this.shareError, `Could not remove ${account}: ${describe(e)}`);
    }
  }

  private path(rest: string): string {
    return `/documents/${encodeURIComponent(this.doc.id)}${rest}`;
  }

  private fail(where: HTMLElement, message: string): void {
    where.textContent = message;
    where.hidden = false;
  }
}
