/**
 * Ask before nbgrader's Assignment List submits work that is not ready.
 *
 * nbgrader's "Submit" sends the fetched folder ``<assignment>/`` as it is. Before it
 * does, this asks the server (``GET /autograder/api/handin``) whether that copy still has
 * answers not written, or is older than the copy the student last checked; if so, a
 * dialog says which, and only "Submit anyway" lets nbgrader's own button go on.
 *
 * nbgrader's button is its own (an ``onclick`` on a plain button), so the question is
 * asked from a click listener that runs before it (capture phase, on the document).
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';

import { Widget } from '@lumino/widgets';

import { handinStatus } from './api';

const SUBMIT = '#fetched_assignments_list .item_status button';

export function guardSubmit(root: Document = document): void {
  const allowed = new WeakSet<HTMLElement>();
  root.addEventListener(
    'click',
    event => {
      const target = event.target as HTMLElement | null;
      const button = target?.closest?.(SUBMIT) as HTMLButtonElement | null;
      if (!button || button.textContent?.trim() !== 'Submit' || allowed.has(button)) {
        return;
      }
      const row = button.closest('.list_item');
      const name = row?.querySelector('.item_name')?.textContent?.trim();
      if (!name) {
        return;
      }
      event.stopImmediatePropagation();
      event.preventDefault();
      void confirmSubmit(name).then(go => {
        if (go) {
          allowed.add(button);
          try {
            button.click();
          } finally {
            allowed.delete(button);
          }
        }
      });
    },
    true
  );
}

async function confirmSubmit(assignment: string): Promise<boolean> {
  let warnings: string[];
  try {
    warnings = (await handinStatus(assignment)).warnings;
  } catch {
    return true; // no answer from the extension: nbgrader decides, as without it
  }
  if (!warnings.length) {
    return true;
  }
  const body = document.createElement('div');
  body.className = 'tc-submitWarning';
  const intro = document.createElement('p');
  intro.textContent = `Before you submit ${assignment}:`;
  const list = document.createElement('ul');
  for (const warning of warnings) {
    const item = document.createElement('li');
    item.textContent = warning;
    list.append(item);
  }
  const outro = document.createElement('p');
  outro.textContent = 'Your instructor grades what you submit now.';
  body.append(intro, list, outro);
  const answer = await showDialog({
    title: `Submit ${assignment} as it is?`,
    body: new WidgetBody(body),
    buttons: [
      Dialog.cancelButton({ label: 'Keep working' }),
      Dialog.warnButton({ label: 'Submit anyway' })
    ],
    defaultButton: 0 // Enter keeps working
  });
  return answer.button.accept;
}

class WidgetBody extends Widget {
  constructor(node: HTMLElement) {
    super({ node });
  }
}
